"""The table of ATen op converters: one function per ATen op (an overload such as
``aten.add.Tensor``, or every overload of an op, ``aten.add``).

A converter takes a :class:`~myelin.importers.torch.context.NodeContext` and returns the
variable of the node's result (a list for ops with several results, None where a result is not
computed), built from myelin's registry ops through the context's Builder. Output shapes come
from the registry's shape rules; the importer checks each result against PyTorch's own shape
and type for the node. Converters of ops outside core ATen (``linear``, ``matmul``,
``scaled_dot_product_attention``, ``layer_norm``, ...) are registered with ``preserve=True``:
export keeps those ops whole instead of decomposing them (:mod:`..export`), since their direct
translation is better (a matrix product on the weight as stored, one Attention op).
Importing this package registers every converter (each module below covers one family).
"""

import torch

_CONVERTERS = {}          # op name ("aten.add.Tensor" or "aten.add") -> converter
_PRESERVED = set()        # op overload names export must not decompose


def converter(*names, preserve=False):
    """Decorator registering a function as the converter of the ATen ops ``names``
    (``aten.op.overload``, or ``aten.op`` for all its overloads). ``preserve``: the ops are
    not core ATen, and export keeps them whole (each name must then be an overload)."""
    def register(fn):
        for name in names:
            if name in _CONVERTERS:
                raise ValueError(f"ATen op {name} already has a converter")
            _CONVERTERS[name] = fn
            if preserve:
                _PRESERVED.add(name)
        return fn
    return register


def op_name(target):
    """``aten.add.Tensor`` for the op overload ``target`` (other callables: their name)."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__qualname__", None) or str(target)


def find(target):
    """The converter of the op overload ``target``, or None."""
    name = op_name(target)
    found = _CONVERTERS.get(name)
    if found is None:
        found = _CONVERTERS.get(name.rsplit(".", 1)[0])
    return found


def preserved():
    """The names of the op overloads export keeps whole."""
    return set(_PRESERVED)


def supported():
    """The ATen ops that have a converter (``aten.op`` for every overload, or one overload)."""
    return sorted(_CONVERTERS)


from myelin.importers.torch.converters import (  # noqa: E402,F401
    array, attention, conv, elementwise, indexing, linalg, norm, reduce, resize)
