"""The Builder: SLING's Python API for adding variables and ops to one function of a flow.

::

    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    W = f.array("W", np.random.rand(64, 256).astype(np.float32))
    x = f.var("x", myelin.DT_FLOAT, [1, 64])
    y = f.softmax(f.relu(f.matmul(x, W)), name="y")

Naming: variables are ``<func>/<name>``; ops are ``<func>/<OpType>`` made unique with ``_N``;
op outputs are ``<opname>:<i>``. An op helper's ``name`` renames its output to ``<func>/<name>``
(``<func>/<name>:<i>`` for several outputs). Constants are ``<func>/const``, ``<func>/const_1``...

Output types come from the op registry's shape rules, so a shape error is raised by the helper
that builds the bad op, and a helper that fails leaves the flow as it was. An op type the
registry does not know gets SLING's generic rule: the type of the first input and the shape of
the highest-rank input.

Methods keep SLING's signatures; parameters SLING does not have come after them and are
keyword-only (``softmax(x, name=None, *, axis=-1)``). Differences from SLING, on purpose:
``softmax`` is the real softmax (SLING's Python builder divides by the L2 norm) and
``normalize`` divides by the sum like SLING's C++ ``FlowBuilder``; ``count`` passes ``name``
correctly; ``mean`` is one ``Mean`` op; a duplicate variable raises FlowError. Like SLING,
the builder sets no IN/OUT flags: ``flow.infer_inputs_and_outputs()`` (called by the compiler)
decides them.
"""

import numpy as np

from myelin import ops
from myelin.builder.control import ControlFlow
from myelin.flow import dtypes
from myelin.flow.dtypes import DT_BOOL, DT_FLOAT, DT_FLOAT32, DT_INT32
from myelin.flow.graph import Function, Variable, atomic

_LITERAL_DEFAULTS = {"b": DT_BOOL, "i": DT_INT32, "u": DT_INT32, "f": DT_FLOAT32}
_NUMERIC = dtypes.FLOAT_TYPES | dtypes.INTEGER_TYPES


def _literal_dtype(value, like):
    """The type a Python number or list takes as an operand of an element-wise op next to
    numeric variable ``like``: ``like``'s type when the value fits it, else None (default)."""
    if like is None or isinstance(value, bool):
        return None
    kind = np.asarray(value).dtype.kind
    if kind in "iu" or (kind == "f" and dtypes.is_float(like.dtype)):
        return like.dtype
    return None


class Builder(ControlFlow):
    """Adds variables and operations to function ``func`` (a name or a Function) of ``flow``;
    control flow (functions with signatures, calls, branches, loops) comes from
    :class:`~myelin.builder.control.ControlFlow`."""

    def __init__(self, flow, func):
        self.flow = flow
        self.func = func if isinstance(func, Function) else flow.func(func)

    # Names.
    def _name(self, suffix):
        return f"{self.func.name}/{suffix}"

    def opname(self, optype):
        """A new unique op name ``<func>/<optype>[_N]``."""
        return self.flow.unique_op_name(self._name(optype))

    def varname(self, var):
        """A new unique variable name ``<func>/<var>[_N]``."""
        return self.flow.unique_var_name(self._name(var))

    def rename(self, var, new_suffix):
        """Rename ``var`` to ``<func>/<new_suffix>``."""
        self.flow.rename_var(var, self._name(new_suffix))
        return var

    # Variables and constants.
    def var(self, name, dtype=DT_FLOAT, shape=()):
        """A new variable ``<func>/<name>``; -1 in ``shape`` is a dynamic size."""
        return self.flow.var(self._name(name), dtype, shape)

    def array(self, name, value):
        """A constant ``<func>/<name>`` holding a NumPy array or buffer-protocol object.

        The constant refers to ``value``'s memory where it can (no copy), as SLING does.
        """
        return self._constant(self._name(name), np.asarray(value))

    def const(self, value, dtype=None, shape=None, *, copy=True):
        """A new constant ``<func>/const[_N]`` from a number, list, array or buffer.

        Python floats default to float32, ints to int32, bools to bool; arrays keep their type.
        ``copy=False`` refers to an array's memory where it can, as :meth:`array` does.
        """
        array = np.asarray(value)
        if isinstance(value, (bool, int, float, list, tuple)):
            default = _LITERAL_DEFAULTS.get(array.dtype.kind)
        else:
            default = dtypes.from_numpy(array.dtype)
        array = np.array(array, dtype=dtypes.to_numpy(dtype or default), copy=copy or None)
        if shape is not None:
            array = array.reshape(shape)
        return self._constant(self.varname("const"), array)

    def _constant(self, name, array):
        """A constant variable holding ``array`` (copied only if it is not contiguous)."""
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        var = self.flow.var(name, dtypes.from_numpy(array.dtype), array.shape)
        var.data = array  # not set_data: its np.ascontiguousarray makes a scalar shape [1]
        return var

    def cnx(self, name, args):
        """A connector ``<func>/<name>`` linking the variables ``args``."""
        return self.flow.cnx(self._name(name), args)

    # Operations.
    def rawop(self, optype, name=None):
        """A new op with no inputs or outputs, named ``<func>/<name or optype>[_N]``."""
        return self.flow.op(self.opname(name or optype), optype, self.func)

    def op(self, optype, args, name=None, attrs=None):
        """Add an op of type ``optype`` reading ``args`` (non-variables become constants).

        Returns the output variable, or the list of outputs when there are several.
        """
        outputs = self._make(optype, args, name, attrs).outputs
        return outputs[0] if len(outputs) == 1 else outputs

    @atomic
    def _make(self, optype, args, name=None, attrs=None):
        """Add an op and its output variables; on any error leave the flow as it was."""
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a string, got {name!r}")
        opdef = ops.find(optype)
        elementwise = opdef is not None and opdef.kind in (ops.Kind.ELEMWISE,
                                                           ops.Kind.BROADCAST)
        like = next((a for a in args if isinstance(a, Variable) and a.dtype in _NUMERIC), None)
        inputs = [arg if isinstance(arg, Variable)
                  else self.const(arg, _literal_dtype(arg, like) if elementwise else None)
                  for arg in args]
        name_is_op_name = opdef is not None and opdef.outputs == 0 and name is not None
        op = self.flow.op(self.opname(name if name_is_op_name else optype), optype, self.func,
                          inputs, attrs=attrs)
        types = ops.infer(op) if opdef is not None else [self._generic_type(inputs)]
        if name is not None and len(types) == 1:
            names = [self._name(name)]
        else:
            base = self._name(name) if name is not None else op.name
            names = [self.flow.unique_var_name(f"{base}:{i}") for i in range(len(types))]
        for out_name, out_type in zip(names, types):
            op.add_output(self.flow.var(out_name, out_type.dtype, out_type.shape))
        return op

    @staticmethod
    def _generic_type(inputs):
        """SLING's rule for unknown ops: first input's type, highest-rank input's shape."""
        shape = max((v.shape for v in inputs), key=len, default=())
        return ops.TensorType(inputs[0].dtype if inputs else DT_FLOAT, shape)

    # Math the one-op helpers the registry gives (_install_helpers, below) do not cover.
    def cast(self, x, dtype, name=None):
        """``x`` converted to ``dtype``."""
        return self.op("Cast", [x], name, {"dtype": dtype})

    def cond(self, c, x, y, name=None):
        """``where(c, x, y)`` with broadcasting."""
        return self.op("Cond", [c, x, y], name)

    def select(self, c, x, name=None):
        """``where(c, x, 0)``."""
        return self.op("Select", [c, x], name)

    def gelu(self, x, approximate="none", name=None):
        """GELU, exact (``approximate="none"``) or with the tanh approximation."""
        return self.op("Gelu", [x], name, {"approximate": approximate})

    # Reductions.
    def reduce(self, optype, x, axis=None, keepdims=None, name=None):
        """A reduction over ``axis`` (an int, a list, or None for all axes)."""
        return self.op(optype, [x], name, self._reduce_attrs(axis, keepdims))

    @staticmethod
    def _reduce_attrs(axis, keepdims):
        attrs = {}
        if axis is not None:
            attrs["axis"] = axis
        if keepdims is not None:
            attrs["keepdims"] = keepdims
        return attrs

    def count(self, p, axis=None, dtype=DT_FLOAT32, name=None, *, keepdims=None):
        """The number of true values of bool ``p`` over ``axis``, as ``dtype``."""
        attrs = dict(self._reduce_attrs(axis, keepdims), dtype=dtype)
        return self.op("Count", [p], name, attrs)

    def argmax(self, x, name=None, *, axis=None, keepdims=False):
        """int32 index of the maximum (of the flattened ``x`` when ``axis`` is None)."""
        return self.op("ArgMax", [x], name, self._reduce_attrs(axis, keepdims or None))

    def argmin(self, x, name=None, *, axis=None, keepdims=False):
        """int32 index of the minimum (of the flattened ``x`` when ``axis`` is None)."""
        return self.op("ArgMin", [x], name, self._reduce_attrs(axis, keepdims or None))

    # Composite functions built from primitive ops.
    @atomic
    def norm(self, x, name=None):
        """The L2 norm of all of ``x``: ``Sqrt(Sum(Square(x)))``."""
        return self.sqrt(self.sum(self.square(x)), name)

    @atomic
    def normalize(self, x, name=None):
        """``x / sum(x)`` as ``Mul(x, Reciprocal(Sum(x)))`` (SLING's C++ FlowBuilder rule)."""
        return self.mul(x, self.rcp(self.sum(x)), name)

    @atomic
    def softmax(self, x, name=None, *, axis=-1):
        """Softmax along ``axis``: Max, Sub, Exp, Sum, Reciprocal, Mul (fusable primitives)."""
        e = self.exp(self.sub(x, self.max(x, axis, keepdims=True)))
        return self.mul(e, self.rcp(self.sum(e, axis, keepdims=True)), name)

    @atomic
    def log_softmax(self, x, name=None, *, axis=-1):
        """``x - max - log(sum(exp(x - max)))`` along ``axis``."""
        shifted = self.sub(x, self.max(x, axis, keepdims=True))
        return self.sub(shifted, self.log(self.sum(self.exp(shifted), axis, keepdims=True)), name)

    @atomic
    def layer_norm(self, x, gamma=None, beta=None, axis=-1, epsilon=1e-5, name=None):
        """Layer normalization over ``axis``, optionally scaled by ``gamma`` and shifted by
        ``beta``, built from Mean, Sub, Square, Add, Rsqrt, Mul."""
        centered = self.sub(x, self.mean(x, axis, keepdims=True))
        variance = self.mean(self.square(centered), axis, keepdims=True)
        scale = self.rsqrt(self.add(variance, self.const(epsilon, x.dtype)))
        steps = [("Mul", scale)]
        steps += [("Mul", gamma)] if gamma is not None else []
        steps += [("Add", beta)] if beta is not None else []
        y = centered
        for i, (optype, operand) in enumerate(steps):
            y = self.op(optype, [y, operand], name if i == len(steps) - 1 else None)
        return y

    # Linear algebra and array ops.
    def matmul(self, x, y, name=None, *, transpose_a=False, transpose_b=False):
        """Matrix product (batched over leading axes), optionally transposing either input."""
        attrs = {}
        if transpose_a:
            attrs["transpose_a"] = True
        if transpose_b:
            attrs["transpose_b"] = True
        return self.op("MatMul", [x, y], name, attrs)

    def transpose(self, x, perm=None, name=None):
        """``x`` with axes permuted by ``perm`` (default reversed); an identity permutation
        gives an Identity op."""
        effective = list(perm) if perm is not None else list(reversed(range(x.rank)))
        if effective == list(range(x.rank)):
            return self.identity(x, name)
        return self.op("Transpose", [x], name, {"perm": perm} if perm is not None else None)

    t = transpose

    @atomic
    def reshape(self, x, shape, name=None):
        """``x`` in ``shape`` (a list, with at most one -1, or an int32 vector variable)."""
        return self.op("Reshape", [x, self._ints(shape)], name)

    @atomic
    def concat(self, args, name=None, *, axis=1):
        """Concatenation of ``args`` along ``axis`` (SLING's default axis is 1)."""
        args = list(args)
        return self.op("Concat", args + [self._ints(axis)], name, {"N": len(args)})

    @atomic
    def split(self, x, splits, axis=0, name=None):
        """The list of ``splits`` equal parts of ``x`` along ``axis``."""
        return self._make("Split", [x, self._ints(splits), self._ints(axis)], name).outputs

    @atomic
    def slice(self, x, begin, size, name=None):
        """The block of ``x`` at ``begin`` with extent ``size`` (-1: to the end of the axis)."""
        return self.op("Slice", [x, self._ints(begin), self._ints(size)], name)

    def gather(self, params, indices, oov=None, name=None):
        """Rows of ``params`` at ``indices``; bad indices read row ``oov`` when given."""
        return self.op("Gather", [params, indices] + ([oov] if oov is not None else []), name)

    def pooling_gather(self, optype, params, indices, name=None):
        """A pooling gather (GatherSum, GatherAvg, GatherMax) of the rows at ``indices``."""
        return self.op(optype, [params, indices], name)

    def gather_sum(self, params, indices, name=None):
        """Sum of the rows of ``params`` at ``indices`` (a negative index ends the list)."""
        return self.pooling_gather("GatherSum", params, indices, name)

    def gather_max(self, params, indices, name=None):
        """Maximum of the rows of ``params`` at ``indices`` (a negative index ends the list)."""
        return self.pooling_gather("GatherMax", params, indices, name)

    def gather_avg(self, params, indices, name=None):
        """Mean of the rows of ``params`` at ``indices`` (a negative index ends the list)."""
        return self.pooling_gather("GatherAvg", params, indices, name)

    def shape(self, x, name=None):
        """The shape of ``x`` as an int32 vector."""
        return self.op("Shape", [x], name)

    def size(self, x, name=None):
        """The element count of ``x`` as an int32 scalar."""
        return self.op("Size", [x], name)

    def rank(self, x, name=None):
        """The rank of ``x`` as an int32 scalar."""
        return self.op("Rank", [x], name)

    def assign(self, x, y, name=None):
        """Write ``y`` into ``x``; returns the Assign op (it has no outputs)."""
        return self._make("Assign", [x, y], name)

    def _ints(self, value):
        """``value`` as an int32 constant, unless it already is a variable."""
        return value if isinstance(value, Variable) else self.const(value, DT_INT32)


def _helper(opdef):
    """The Builder method of ``opdef``'s op: ``method(x, [y,] name=None, **attrs)`` for an
    element-wise op, ``method(x, axis=None, keepdims=None, name=None)`` for a reduction."""
    optype = opdef.type
    if opdef.kind == ops.Kind.REDUCTION:
        def method(self, x, axis=None, keepdims=None, name=None):
            return self.reduce(optype, x, axis, keepdims, name)
    elif opdef.inputs == (1, 1):
        def method(self, x, name=None, **attrs):
            return self.op(optype, [x], name, attrs or None)
    else:
        def method(self, x, y, name=None, **attrs):
            return self.op(optype, [x, y], name, attrs or None)
    return method


def _install_helpers():
    """A method for each registered op the registry gives one (:func:`myelin.ops.helper`),
    unless the Builder defines it itself (``cast``, ``gelu``, ``count``, ...)."""
    for optype in ops.types():
        opdef = ops.lookup(optype)
        method_name = ops.helper(opdef)
        if method_name is None or method_name in Builder.__dict__:
            continue
        method = _helper(opdef)
        method.__name__ = method_name
        method.__qualname__ = f"Builder.{method_name}"
        method.__doc__ = f"A {optype} op: {opdef.doc}."
        setattr(Builder, method_name, method)


_install_helpers()
