"""The runtime: compiled networks, their cells, instances and tensor views."""

from myelin.runtime.network import Cell, Instance, Network, Tensor

__all__ = ["Cell", "Instance", "Network", "Tensor"]
