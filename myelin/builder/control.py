"""Control flow in the Builder: functions with signatures, calls, tuples, branches and loops.

A function becomes callable when it has a signature: ``param`` adds its parameters in order,
``ret`` sets its results (``returns`` declares their types first, which a function that calls
itself needs: calls read the types of the declared results). Then:

- ``call(function, *args)`` runs it (an op ``Call``); ``function(name)`` makes it a value
  that can be passed, returned and called, ``partial(function, *args)`` binds its first
  parameters (a closure);
- ``tuple(*values)`` makes one value of several (tensors, function values, tuples), which
  functions take, return and keep as loop state like any value; ``tuple_get(t, i)`` reads
  element ``i`` back; ``param_like(name, value)`` declares a parameter of ``value``'s type;
- ``if_else(condition, then_fn, else_fn)`` runs one of two branches, each built by a Python
  function into a function of its own (an op ``If``). A branch may read any variable of the
  functions around it: those are its free variables, passed to it by the ``If`` op (a closure);
- ``while_loop(cond_fn, body_fn, state)`` repeats ``body_fn`` while ``cond_fn`` holds. It is
  lowered to a tail-recursive function, rotated so that the body and the next test are one
  straight-line piece (one cell per iteration): ``loop(s) = (s' = body(s); if cond(s') then
  loop(s') else s')``, called as ``if cond(state) then loop(state) else state``. The loop's
  free variables become trailing parameters passed along each call.

The ops are defined in :mod:`myelin.ops.control`; :mod:`myelin.control` compiles and runs such
flows, and :mod:`myelin.reference` interprets them.
"""

from myelin.errors import FlowError, ShapeError
from myelin.flow.graph import Function, Variable, atomic
from myelin.ops import control


def free_variables(functions, bound=(), used=()):
    """The variables that the ops of ``functions`` read, that they give as results or that
    are in ``used``, which none of them produces: not constants or learnable globals, not in
    ``bound``; in first-use order."""
    produced = {id(v) for func in functions for op in func.ops for v in op.outputs}
    produced.update(id(v) for v in bound)
    found = {}
    for var in [v for func in functions for op in func.ops for v in op.inputs] + \
            [v for func in functions for v in func.results or []] + list(used):
        if id(var) not in produced and not var.is_global:
            found.setdefault(id(var), var)
    return list(found.values())


class ControlFlow:
    """The control-flow methods of :class:`~myelin.builder.Builder`."""

    def param(self, name, dtype, shape=()):
        """A new parameter ``<func>/<name>`` of the function, after those it has."""
        var = self.var(name, dtype, shape)
        if self.func.params is None:
            self.func.params = []
        self.func.params.append(var)
        return var

    def function_param(self, name, like):
        """A new parameter taking function values of the type of ``like`` (a function name,
        a Function with a signature, or a function value)."""
        if isinstance(like, Variable):
            return self.param_like(name, like)
        var = self.param(name, control.FUNCTION)
        control.set_value_type(var, control.signature_type(self._callable(like)))
        return var

    def param_like(self, name, value):
        """A new parameter of the type of ``value`` (a variable holding a tensor, a function
        value or a tuple)."""
        return self._typed(self.param(name, value.dtype, value.shape), value)

    def returns(self, *types):
        """Declare the types of the function's results before its body is built, each as
        ``(dtype, shape)`` or a variable of that type: a function that calls itself needs
        them. ``ret`` must then give values of these types."""
        if self.func.results is not None:
            raise FlowError(f"function {self.func.name} has its results already")
        self.func.params = self.func.params or []
        placeholders = []                                 # until ret()
        for kind in types:
            if isinstance(kind, Variable):
                var = self.flow.var(self.varname("result"), kind.dtype, kind.shape)
                placeholders.append(self._typed(var, kind))
            else:
                placeholders.append(self.flow.var(self.varname("result"), *kind))
        self.func.results = placeholders

    def ret(self, *values):
        """Set the function's results to ``values`` (variables, or numbers made constants),
        which must have the types ``returns`` declared, if it did."""
        values = [self._value(v) for v in values]
        self.func.params = self.func.params or []
        declared = self.func.results
        if declared is not None:
            if _types(values) != _types(declared):
                raise ShapeError(f"function {self.func.name} returns "
                                 f"{[v.type_string() for v in values]} where it declared "
                                 f"{[v.type_string() for v in declared]}")
            for placeholder in declared:
                if placeholder.producer is None and not placeholder.consumers \
                        and all(placeholder is not v for v in values):
                    self.flow.delete_var(placeholder)
        self.func.results = values

    def call(self, function, *args, name=None):
        """The results of ``function`` (a name or Function with a signature, or a function
        value) on ``args``: one variable, or a list when it has several results."""
        args = [self._value(a) for a in args]
        if isinstance(function, Variable):
            return self._control_op("Call", [function] + args, name)
        return self._control_op("Call", args, name, {"function": self._callable(function).name})

    def function(self, function, name=None):
        """The function ``function`` (a name or Function with a signature) as a value, to
        pass to other functions, return, or call."""
        return self._control_op("Function", [], name,
                                {"function": self._callable(function).name})

    def partial(self, function, *args, name=None):
        """The function value ``function`` (or the function of that name) with its first
        parameters bound to ``args``: a closure taking the rest."""
        if not isinstance(function, Variable):
            function = self.function(function)
        return self._control_op("Partial", [function] + [self._value(a) for a in args], name)

    def tuple(self, *values, name=None):
        """One tuple value of ``values`` (variables, or numbers made constants)."""
        return self._control_op("Tuple", [self._value(v) for v in values], name)

    def tuple_get(self, value, index, name=None):
        """Element ``index`` of the tuple ``value`` (ShapeError if it is not a tuple or has
        no such element)."""
        return self._control_op("TupleGet", [value], name, {"index": int(index)})

    @atomic
    def if_else(self, condition, then_fn, else_fn, name=None):
        """``then_fn(b)`` if the scalar ``condition`` holds, else ``else_fn(b)``: each is
        called once with a Builder ``b`` of a new branch function and returns its results (a
        variable, a number, or a tuple or list of them). Returns the results of the branch
        taken: one variable, or a list. ShapeError if the condition is not a scalar or the
        branches give different types."""
        condition = self._value(condition)
        if tuple(condition.shape) not in ((), (1,)) or control.is_value(condition):
            raise ShapeError(f"if_else in {self.func.name}: the condition {condition.name} "
                             f"must be a scalar, not {condition.type_string()}")
        branches = [self._branch("then", then_fn), self._branch("else", else_fn)]
        captured = free_variables(branches)
        for branch in branches:
            branch.params = captured
        return self._control_op("If", [condition] + captured, name,
                                {"then_branch": branches[0].name,
                                 "else_branch": branches[1].name})

    @atomic
    def while_loop(self, cond_fn, body_fn, state, name=None):
        """Repeat ``state = body_fn(b, *state)`` while ``cond_fn(b, *state)`` (a scalar) holds;
        returns the final state (a variable, or a list like ``state``). ``state`` is a variable
        or a list of them; ``body_fn`` returns values of the same types."""
        single = isinstance(state, Variable)
        state = self._values(state)
        loop = self.flow.func(self.flow.unique_func_name(f"{self.func.name}/while"))
        body = type(self)(self.flow, loop)
        params = [body.param_like(f"state{i}", v) for i, v in enumerate(state)]
        new = body._values(body_fn(body, *params))
        if _types(new) != _types(params):
            raise ShapeError(f"while_loop in {self.func.name}: the body gives "
                             f"{[v.type_string() for v in new]} for a state of "
                             f"{[p.type_string() for p in params]}")
        again = cond_fn(body, *new)
        # The loop's free variables become parameters after the state, passed along.
        free = free_variables([loop], params, used=new)
        loop.params = params + free
        loop.results = params            # their types, for the recursive call
        loop.results = body._values(body.if_else(
            again, lambda branch: branch.call(loop, *new, *free), lambda _: new))
        result = self.if_else(cond_fn(self, *state),
                              lambda branch: branch.call(loop, *state, *free),
                              lambda _: state, name=name)
        return result if single or isinstance(result, list) else [result]

    # Helpers.
    def _control_op(self, optype, args, name, attrs=None):
        """Add a control-flow op; its outputs that are function values or tuples get their
        types as attributes. Returns its output, or the list of them."""
        op = self._make(optype, args, name, attrs)
        for var, text in zip(op.outputs, control.output_types(op)):
            control.set_value_type(var, text)
        return op.outputs[0] if len(op.outputs) == 1 else op.outputs

    def _value(self, value):
        return value if isinstance(value, Variable) else self.const(value)

    @staticmethod
    def _typed(var, like):
        """``var``, given the value type of ``like`` if that is a function value or tuple."""
        control.set_value_type(var, control.value_type(like))
        return var

    def _values(self, values):
        values = values if isinstance(values, (list, tuple)) else [values]
        return [self._value(v) for v in values]

    def _callable(self, function):
        func = function if isinstance(function, Function) else self.flow.funcs.get(function)
        if func is None or func.results is None:
            raise FlowError(f"{getattr(function, 'name', function)!r} is not a function with "
                            f"a signature (give it param()s and ret() or returns())")
        return func

    def _branch(self, kind, build):
        func = self.flow.func(self.flow.unique_func_name(f"{self.func.name}/{kind}"))
        branch = type(self)(self.flow, func)
        func.results = branch._values(build(branch))
        return func


def _types(variables):
    return [control.value_type(v) for v in variables]
