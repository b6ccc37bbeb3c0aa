"""What a converter sees of the ATen node it converts: its arguments by schema name (flow
variables for tensors, Python values for the rest), PyTorch's type and shape of its result,
and a way to add myelin ops (folded at once when all their inputs are constants)."""

import math

import numpy as np
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from myelin.flow import dtypes
from myelin.flow.graph import Variable
from myelin.importers.context import ConverterContext
from myelin.importers.torch import types

_DEFAULT_PROMOTION = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT


class NodeContext(ConverterContext):
    """One ATen node during conversion (building ops: :class:`ConverterContext`).

    ``args`` maps each argument of the op's schema to its value: a Variable for a tensor, a
    list for a tensor list, a Python number, bool, list of ints, dtype or None otherwise;
    ``meta`` is PyTorch's value of the result (a FakeTensor, or a tuple of them).
    """

    def __init__(self, importer, node, args):
        self.importer = importer
        self.node = node
        self.b = importer.builder
        self.args = args
        self.meta = node.meta.get("val")

    @property
    def name(self):
        return self.node.name

    @property
    def op_type(self):
        return str(self.node.target)

    def __getitem__(self, name):
        return self.args[name]

    def get(self, name, default=None):
        value = self.args.get(name)
        return default if value is None else value

    def tensor(self, name):
        """Argument ``name`` as a Variable (a Python number becomes a constant of the
        result's type); ShapeError if it is absent."""
        value = self.args.get(name)
        if value is None:
            raise self.error(f"argument {name} is missing")
        if isinstance(value, Variable):
            return value
        return self.scalar(value, self.out_dtype)

    def scalar(self, value, dtype):
        """A constant scalar of ``dtype`` holding the Python number ``value``."""
        return self.const(np.asarray(value, dtypes.to_numpy(dtype)), dtype)

    def operand(self, value, dtype):
        """``value`` (a Variable or a Python number) as a Variable of ``dtype``."""
        if isinstance(value, Variable):
            return self.cast(value, dtype)
        return self.scalar(value, dtype)

    # PyTorch's result.
    def out(self, index=0):
        """PyTorch's FakeTensor of result ``index``."""
        meta = self.meta
        return meta[index] if isinstance(meta, (list, tuple)) else meta

    @property
    def out_dtype(self):
        """myelin's type of PyTorch's (first) result."""
        return self.importer.retype(types.to_myelin(self.out().dtype,
                                                    f"node {self.name} ({self.op_type})"))

    @property
    def out_shape(self):
        return tuple(int(d) for d in self.out().shape)

    def dtype_of(self, value):
        """The myelin type of argument value ``value`` (a Variable or a Python number, whose
        type is PyTorch's default for it)."""
        if isinstance(value, Variable):
            return value.dtype
        if isinstance(value, bool):
            return "bool"
        if isinstance(value, int):
            return "int64"
        return self.importer.retype(types.to_myelin(torch.get_default_dtype()))

    def promoted(self, *values):
        """The type PyTorch gives an element-wise op on ``values`` (Variables, Python
        numbers; None is left out): its type promotion, where tensors of rank 0 count as
        scalars beside tensors of higher rank."""
        args = []
        for value in values:
            if isinstance(value, Variable):
                args.append(torch.empty((1,) * value.rank, dtype=types.to_torch(value.dtype)))
            elif value is not None:
                args.append(value)
        _, dtype = elementwise_dtypes(*args, type_promotion_kind=_DEFAULT_PROMOTION)
        return self.importer.retype(types.to_myelin(dtype))

    # Axes.
    def axis(self, axis, rank):
        """``axis`` counted from the end when negative; ShapeError unless it is in range
        (a scalar has one axis for this, as in PyTorch)."""
        axis = int(axis)
        size = max(rank, 1)
        if not -size <= axis < size:
            raise self.error(f"dim {axis} is out of range for rank {rank}")
        return axis + size if axis < 0 else axis

    def axes(self, dims, rank):
        """The sorted axes of ``dims`` (an int, a list, or None or [] for all axes)."""
        if dims is None:
            return list(range(rank))
        if isinstance(dims, int):
            dims = [dims]
        if not dims:
            return list(range(rank))
        return sorted({self.axis(d, rank) for d in dims})

    # Building.
    def broadcast(self, var, shape):
        """``var`` broadcast to ``shape`` (itself if it has it)."""
        shape = tuple(int(d) for d in shape)
        if var.shape == shape:
            return var
        return self.op("BroadcastTo", [var], {"shape": list(shape)})

    def slice(self, x, axis, start, stop):
        """``x[..., start:stop, ...]`` along ``axis`` (in range, step 1)."""
        if start == 0 and stop == x.shape[axis]:
            return x
        begins = [0] * x.rank
        sizes = list(x.shape)
        begins[axis], sizes[axis] = int(start), int(stop - start)
        return self.op("Slice", [x, self.const(begins, "int32"), self.const(sizes, "int32")])

    def concat(self, parts, axis):
        """``parts`` joined along ``axis`` (empty parts left out)."""
        kept = [p for p in parts if p.shape[axis] != 0] or parts[:1]
        if len(kept) == 1:
            return kept[0]
        return self.op("Concat", kept + [self.const(axis, "int32")], {"N": len(kept)})

    def float_of(self, var):
        """``var`` in a float type: itself if it is one, else float32 (PyTorch's default)."""
        if dtypes.is_float(var.dtype):
            return var
        return self.cast(var, self.importer.retype(types.to_myelin(torch.get_default_dtype())))


def numel(shape):
    return math.prod(int(d) for d in shape)
