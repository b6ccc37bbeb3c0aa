"""The reference interpreter: evaluates a flow function op by op with the registry's NumPy
reference implementations. It is the oracle the compiled code is checked against.

::

    values = myelin.reference.run(flow, "f", {"f/x": x})   # {output name: array}

Values are computed in float64: float inputs (first rounded to their variables' declared types)
and constants are widened on entry, and every float result is kept as float64
(``precision="native"`` instead rounds each float result to its variable's declared type, and
returns arrays of the declared types). Integer and bool values
keep their declared types. Every value is a private copy, so ops never see aliased arrays and
``Assign`` writes only its target.

The interpreter does not change the flow: the function's inputs are the variables its ops read
that no op of the function produces and that are not constants or learnable; its default
outputs are the variables :meth:`Flow.infer_inputs_and_outputs` would mark OUT (computed here
without setting flags). ``Call`` and ``If`` ops (:mod:`myelin.ops.control`) run their function
or branch with this interpreter, recursively; a function value (``Function``, ``Partial``) is a
(Function, bound values) pair, and a tuple (``Tuple``) a Python tuple of values. Learnable
variables live in the :class:`Interpreter`'s ``state`` (initialized from their data, else
zeros) and keep their values across runs, so ``Assign`` to a learnable variable is seen by
later runs. Values are freed after their last use.
"""

import numpy as np

from myelin import limits
from myelin.errors import FlowError, InputError, ShapeError
from myelin.flow import dtypes
from myelin.flow.graph import Function, Variable
from myelin.ops import control, registry
from myelin.ops.common import shape_fits

PRECISIONS = ("float64", "native")

# Types whose values are NumPy arrays of that type (others, e.g. string, pass through as given).
_ARRAY_TYPES = dtypes.FLOAT_TYPES | dtypes.INTEGER_TYPES | {"bool"}


def run(flow, func, inputs=None, outputs=None, precision="float64"):
    """Evaluate function ``func`` (a Function or its name) of ``flow``.

    ``inputs`` maps variables, names or aliases to arrays (a -1 dimension accepts any size);
    ``outputs`` lists the variables to return (any computed or given ones, intermediates
    included), by default the function's outputs. Only the ops these depend on run (and ops
    without outputs, such as Assign), so only their inputs are needed. Returns
    {variable name: array}.
    """
    return Interpreter(flow, precision).run(func, inputs, outputs)


def _inputs(order):
    """{id: variable} of the variables the ops of ``order`` read and do not produce."""
    produced = {id(v) for op in order for v in op.outputs}
    return {id(v): v for op in order for v in op.inputs if id(v) not in produced}


def _needed(order, wanted):
    """The ops of ``order`` that ``wanted`` depends on, plus ops without outputs (Assign) and
    what they depend on."""
    needed_vars = {id(v) for v in wanted}
    needed_ops = []
    for op in reversed(order):
        if not op.outputs or any(id(v) in needed_vars for v in op.outputs):
            needed_ops.append(op)
            needed_vars.update(id(v) for v in op.inputs)
    return needed_ops[::-1]


class Interpreter:
    """Runs functions of ``flow``; ``state`` holds the learnable variables across runs."""

    def __init__(self, flow, precision="float64"):
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        self.flow = flow
        self.precision = precision
        self.state = {}

    def run(self, func, inputs=None, outputs=None):
        """Evaluate ``func`` on ``inputs``; see :func:`run`."""
        func = self._function(func)
        order = self.flow.order(func)
        registry.check_supported(order)
        for op in order:
            registry.check_arity(op, registry.lookup(op.type))

        wanted = (self._outputs(order) if outputs is None
                  else [self._variable(key) for key in outputs])
        accepted = _inputs(order)
        if func.params is not None:       # a signature: its parameters are inputs, read or not
            accepted.update((id(v), v) for v in func.params)
        order = _needed(order, wanted)
        produced = {id(v) for op in order for v in op.outputs}
        for var in wanted:
            if id(var) not in produced and id(var) not in accepted and not var.is_global:
                raise InputError(f"variable {var.name} is not computed by function {func.name}")
        read = _inputs(order)
        read.update((id(v), v) for v in wanted if id(v) not in produced)
        env = self._bind(func, accepted, read, inputs or {})
        keep = {id(v) for v in wanted}

        last_use = {id(v): i for i, op in enumerate(order) for v in op.inputs}
        for i, op in enumerate(order):
            self._execute(op, env)
            for var in op.inputs + op.outputs:
                if last_use.get(id(var), i) <= i and id(var) not in keep:
                    env.pop(id(var), None)
        return {var.name: self._result(var, env[id(var)]) for var in wanted}

    # Setup.
    def _function(self, func):
        if isinstance(func, Function):
            return func
        if func not in self.flow.funcs:
            raise FlowError(f"flow has no function named {func}")
        return self.flow.funcs[func]

    def _variable(self, key):
        if isinstance(key, Variable):
            return key
        var = self.flow.var_named(key)
        if var is None:
            raise InputError(f"flow has no variable named {key}")
        return var

    def _bind(self, func, accepted, read, inputs):
        """The starting values of the variables in ``read``: given inputs (which may be any
        variables in ``accepted``), constants and learnable state."""
        env = {}
        for key, value in inputs.items():
            var = self._variable(key)
            if id(var) not in accepted or var.fixed:
                raise InputError(f"variable {var.name} is not an input of function {func.name}")
            if control.is_value(var):     # a function value or tuple
                if id(var) in read:
                    env[id(var)] = self._value(control.value_type(var), value)
                continue
            array = np.asarray(value)
            if not shape_fits(array.shape, var.shape):
                raise InputError(f"input {var.name} has shape {list(array.shape)}, expected "
                                 f"{list(var.shape)}")
            if var.dtype in _ARRAY_TYPES and not np.can_cast(array.dtype,
                                                             dtypes.to_numpy(var.dtype),
                                                             "same_kind"):
                raise InputError(f"input {var.name} has type {array.dtype}, expected {var.dtype}")
            stored = self._store(var, array)
            if var.learnable:
                self.state[var.name] = stored
            if id(var) in read:
                env[id(var)] = stored
        missing = []
        for key, var in read.items():
            if key in env:
                continue
            if var.learnable:
                env[key] = self._learnable(var)
            elif var.constant:
                env[key] = self._store(var, var.data)
            else:
                missing.append(var.name)
        if missing:
            raise InputError(f"function {func.name} needs inputs {', '.join(missing)}")
        return env

    def _learnable(self, var):
        if var.name not in self.state:
            if var.data is None and not var.shape_defined:
                raise InputError(f"learnable variable {var.name} has no data and shape "
                                 f"{list(var.shape)}; give its value in inputs")
            if var.data is None:
                _check_size(var)
            initial = var.data if var.data is not None else np.zeros(var.shape,
                                                                     dtypes.to_numpy(var.dtype))
            self.state[var.name] = self._store(var, initial)
        return self.state[var.name]

    def _outputs(self, order):
        """The variables infer_inputs_and_outputs would mark OUT among those ``order`` makes."""
        linked = {id(v) for cnx in self.flow.cnxs.values() for v in cnx.links}
        found = []
        for op in order:
            overridden = "input" in op.attrs or "output" in op.attrs
            for var in op.outputs:
                if var.is_global:
                    continue
                if overridden:
                    out = op.attrs.get_bool("output", False)
                else:
                    out = not var.consumers
                if out or var.is_output or (id(var) in linked and var.ref and var.consumers):
                    found.append(var)
        return found

    # Values.
    def _store(self, var, value, rounded=True):
        """A private copy of ``value`` in the interpreter's representation for ``var``: of the
        declared type, or float64 for floats (first rounded to the declared type if
        ``rounded``)."""
        if control.is_value(var):
            return value               # a (function, bound values) pair, or a tuple
        return self._array(var.dtype, value, rounded)

    def _value(self, kind, value):
        """A function value or tuple of type ``kind`` (text) in the interpreter's
        representation: a tuple's tensors (given by the caller, or already kept) as
        :meth:`_store` keeps them, without rounding."""
        if control.is_tuple_type(kind):
            return tuple(self._value(element, item)
                         for element, item in zip(control.tuple_elements(kind), value))
        if control.is_function_type(kind):
            return value
        return self._array(control.tensor_type(kind).dtype, value, rounded=False)

    @staticmethod
    def _array(dtype, value, rounded):
        array = np.asarray(value)
        if dtype not in _ARRAY_TYPES:
            return np.array(array)
        declared = dtypes.to_numpy(dtype)
        if declared.kind != "f":
            return np.array(array, dtype=declared)
        if rounded:
            array = array.astype(declared)
        return array.astype(np.float64)

    def _result(self, var, array):
        if self.precision == "native" and var.dtype in dtypes.FLOAT_TYPES:
            return array.astype(dtypes.to_numpy(var.dtype))
        return array.copy() if var.learnable else array

    def _control(self, op, arguments):
        """The results of a control-flow op: a function value, a (function, bound values)
        pair, a tuple or its element, or the results of the function a Call or If runs, by
        this interpreter."""
        if op.type == "Function":
            return [(control.signature(op, "function"), ())]
        if op.type == "Partial":
            func, bound = arguments[0]
            return [(func, bound + tuple(arguments[1:]))]
        if op.type == "Tuple":
            return [tuple(arguments)]
        if op.type == "TupleGet":
            return [arguments[0][op.attrs.get_int("index")]]
        if op.type == "Call" and "function" in op.attrs:
            func = control.signature(op, "function")
        elif op.type == "Call":
            (func, bound), arguments = arguments[0], list(arguments[0][1]) + arguments[1:]
        else:
            taken = bool(np.asarray(arguments[0]).reshape(-1)[0])
            func = control.signature(op, "then_branch" if taken else "else_branch")
            arguments = arguments[1:]
        values = self.run(func, dict(zip(func.params, arguments)), func.results)
        return [values[var.name] for var in func.results]

    def _execute(self, op, env):
        for var in op.outputs:
            _check_size(var)
        arguments = [env[id(v)] for v in op.inputs]
        if control.is_control(op):
            results = self._control(op, arguments)
        else:
            with np.errstate(all="ignore"):
                results = registry.lookup(op.type).reference(op, arguments)
        if len(results) != len(op.outputs):
            raise ShapeError(f"op {op.name} ({op.type}): reference gave {len(results)} values "
                             f"for {len(op.outputs)} outputs")
        for var, value in zip(op.outputs, results):
            value = self._store(var, value, rounded=self.precision == "native")
            if not control.is_value(var) and not shape_fits(value.shape, var.shape):
                raise ShapeError(f"op {op.name} ({op.type}): reference gave shape "
                                 f"{list(value.shape)} for {var.name}, declared "
                                 f"{list(var.shape)}")
            env[id(var)] = value


def _check_size(var):
    """LimitError if ``var``, a tensor of known shape, is over the size limit as the
    interpreter keeps it (floats as float64)."""
    if var.dtype in _ARRAY_TYPES and var.shape_defined:
        itemsize = 8 if var.dtype in dtypes.FLOAT_TYPES else dtypes.itemsize(var.dtype)
        limits.check_tensor(var.shape, itemsize, f"tensor {var.name} ({var.type_string()})")
