"""What the GPU back end generates code for: a CUDA architecture, and a device's properties.

A :class:`CudaTarget` names the architecture NVRTC compiles for (``sm_80``, ``sm_90``); the
generated source depends on nothing else. A :class:`Device` holds the properties that decide
how kernels are launched (threads per block, number of multiprocessors); the runtime reads
them from the driver, and the defaults describe a large current GPU.
"""

import dataclasses
import re

from myelin.errors import CompileError

WARP = 32


@dataclasses.dataclass(frozen=True)
class CudaTarget:
    """A CUDA architecture, ``sm_XY`` (compute capability X.Y)."""

    arch: str = "sm_80"

    def __post_init__(self):
        if not re.fullmatch(r"sm_\d{2,3}[a-z]?", self.arch):
            raise CompileError(f"CUDA architecture {self.arch!r} is not of the form sm_XY")

    @classmethod
    def from_capability(cls, major, minor):
        """The target of a device of compute capability ``major.minor``."""
        return cls(f"sm_{major}{minor}")

    def isa(self):
        """The name shown in cell dumps, as the CPU's ISA is."""
        return self.arch


@dataclasses.dataclass(frozen=True)
class Device:
    """The launch-relevant properties of a GPU."""

    max_threads_per_block: int = 1024
    sm_count: int = 132
    max_threads_per_sm: int = 2048
