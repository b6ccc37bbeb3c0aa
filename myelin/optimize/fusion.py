"""Operator fusion: groups of ops become one fused op, so their values stay in registers.

The rules follow NNVM's OpFusion, by the fusion kind of each op in the registry:

1. Element-wise and broadcast ops of one element type join their producers' group when the
   value passes at the group's shape (its *domain*), or when a smaller group's only result is
   broadcast into the consumer (it is then recomputed per element; loop-invariant code motion
   hoists it out of the inner loop). A merge that would make a cycle through an outside op is
   refused. A ``Cond`` or ``Select`` joins a group with the comparison that computes its
   condition from values of the group's type (a ReLU's gradient, ``Select(Greater(y, 0), dy)``),
   when nothing else reads the condition: the bool stays in registers.
2. A ``MatMul`` (or ``Conv``) read only by one one-output element-wise group of the
   product's shape (by one or more of its ops: SiLU reads it twice) absorbs it as an epilogue: ``FusedMatMul`` (bias, activation, residual
   add, ...) or ``FusedConv`` (whose other inputs must have the output's shape or one element).
3. A reduction over the last axis of a group's domain joins the group as a trailing reduction
   (as in Myelin's ``@0=Exp(Sub(%0,%1));@1=Sum(@0)``).

Each group of two or more ops becomes a ``Calculate`` op (or a fused product) whose ``expr``
recipe (:mod:`myelin.ops.recipe`) lists what it computes; the output variables keep their
names.
"""

import heapq

from myelin.ops import recipe as recipes
from myelin.ops import registry
from myelin.ops.fused import TRAILING_REDUCTIONS
from myelin.ops.reduction import reduced_axes
from myelin.ops.registry import Kind

_FUSED_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16",
                          "float32", "float64"})
_CONDITIONAL = frozenset({"Cond", "Select"})   # ops whose first input is a bool condition
_INLINE_DEPTH = 32   # a recipe nests expressions at most this deep (else a temporary)
_MAX_GROUP = 256     # ops of one element-wise group (fusing is linear in a group's size)


class Group:
    """Ops fused into one kernel, in topological order."""

    def __init__(self, op):
        self.ops = [op]
        self.domain = op.outputs[0].shape
        self.dtype = op.outputs[0].dtype
        self.host = None      # the MatMul or Conv whose epilogue the group is
        self.reduction_attrs = None   # (axis, keepdims) shared by the trailing reductions

    def members(self):
        return set(map(id, self.ops + ([self.host] if self.host else [])))

    def external_outputs(self):
        """Member outputs read outside the group or returned by the function."""
        members = self.members()
        return [v for op in self.ops for v in op.outputs
                if v.is_output or any(id(c) not in members for c in v.consumers)]


def _fusable_kind(op, ctx):
    """True if ``op`` is one element-wise or broadcast op with default attributes that the back
    end can fuse."""
    opdef = registry.find(op.type)
    if opdef is None or opdef.kind not in (Kind.ELEMWISE, Kind.BROADCAST):
        return False
    if len(op.outputs) != 1 or not op.inputs or not _default_attributes(op, opdef):
        return False
    return ctx.fusable is None or ctx.fusable(op.type)


def _elementwise(op, ctx):
    """True if ``op`` may be part of a fused element-wise group."""
    if not _fusable_kind(op, ctx):
        return False
    out = op.outputs[0]
    if out.dtype not in _FUSED_TYPES or out.is_input or out.is_global or out.ref:
        return False
    data = op.inputs[1:] if op.type in _CONDITIONAL else op.inputs
    if not data or any(v.dtype != out.dtype for v in data):
        return False
    return op.type not in _CONDITIONAL or _predicate(op, ctx) is not None


def _predicate(op, ctx):
    """The op computing the condition of ``op`` (a Cond or Select) from values of ``op``'s
    element type, if it can be computed inside ``op``'s group: nothing else reads the
    condition. Else None."""
    condition = op.inputs[0]
    producer = condition.producer
    if (producer is None or condition.is_output or condition.ref
            or any(c is not op for c in condition.consumers)):
        return None
    if not _fusable_kind(producer, ctx):
        return None
    if any(v.dtype != op.outputs[0].dtype for v in producer.inputs):
        return None
    return producer


def _default_attributes(op, opdef):
    """True if every attribute of ``op`` has its default value (a recipe part has none)."""
    return all(key in ("input", "output") or
               (key in opdef.attrs and registry.attribute(op, key) == opdef.attrs[key])
               for key in op.attrs)


def _reaches(starts, targets, blocked, group_of, horizon=None):
    """True if an op in ``targets`` is reachable from the consumers of ``starts``' outputs
    through ops not in ``blocked`` (a path leaving the group and coming back). An op of
    another group stands for its whole group, which fused reads all its inputs before it
    writes any output: two groups that each feed the other (HRNet's exchange units) would
    make a cycle. While groups form, in topological order, they hold only ops up to the one
    being placed, ``horizon`` (a pair: the ops' positions, and that op's): no path to a
    target goes through an op after it, so the search stops there."""
    stack = [c for op in starts for v in op.outputs for c in v.consumers if id(c) not in blocked]
    seen = set()
    while stack:
        op = stack.pop()
        if horizon is not None and horizon[0].get(id(op), horizon[1] + 1) > horizon[1]:
            continue
        group = group_of.get(id(op))
        ops = group.ops + ([group.host] if group.host else []) if group else [op]
        if any(id(member) in seen for member in ops):
            continue
        seen.update(map(id, ops))
        for consumer in (c for member in ops for v in member.outputs for c in v.consumers):
            if id(consumer) in targets:
                return True
            if id(consumer) not in blocked:
                stack.append(consumer)
    return False


def _broadcasts_to(shape, domain):
    if len(shape) > len(domain):
        return False
    return all(s in (1, d) for s, d in zip(shape[::-1], domain[::-1]))


def _form_elementwise_groups(order, ctx, position):
    group_of = {}
    for index, op in enumerate(order):
        if not _elementwise(op, ctx):
            continue
        group = Group(op)
        group_of[id(op)] = group
        reads = [(op, var) for var in op.inputs]     # (reader, value) pairs
        if op.type in _CONDITIONAL:
            predicate = _predicate(op, ctx)
            group.ops.insert(0, predicate)
            group_of[id(predicate)] = group
            reads = [(predicate, var) for var in predicate.inputs] + reads[1:]
        for reader, var in reads:
            producer = var.producer
            other = group_of.get(id(producer)) if producer is not None else None
            if other is None or other is group or other.dtype != group.dtype:
                continue
            if other.domain == group.domain:
                pass
            elif not (_broadcasts_to(other.domain, group.domain) and not var.is_output
                      and other.external_outputs() == [var]
                      and all(c is reader for c in var.consumers)):
                continue
            if len(other.ops) + len(group.ops) > _MAX_GROUP:
                continue
            members = group.members() | other.members()
            horizon = (position, index)
            if (_reaches(other.ops, group.members(), members, group_of, horizon)
                    or _reaches(group.ops, other.members(), members, group_of, horizon)):
                continue
            group.ops = list(heapq.merge(other.ops, group.ops, key=lambda o: position[id(o)]))
            for member in other.ops:
                group_of[id(member)] = group
    return group_of


_FUSED_HOSTS = {"MatMul": "FusedMatMul", "Conv": "FusedConv"}


def _outside_inputs(group):
    """The variables the group's ops read from outside the group."""
    made = {id(v) for op in group.ops for v in op.outputs}
    return [v for op in group.ops for v in op.inputs if id(v) not in made]


def _absorb_epilogues(order, group_of):
    for op in order:
        if op.type not in _FUSED_HOSTS or len(op.outputs) != 1:
            continue
        product = op.outputs[0]
        if product.is_output or not product.consumers:
            continue
        group = group_of.get(id(product.consumers[0]))
        if any(group_of.get(id(c)) is not group for c in product.consumers[1:]):
            continue
        if (group is None or group.host is not None or group.domain != product.shape
                or group.dtype != product.dtype or len(group.external_outputs()) != 1):
            continue
        if op.type == "Conv" and not all(
                v is product or v.shape == product.shape or all(d == 1 for d in v.shape)
                for v in _outside_inputs(group)):
            continue
        if _reaches(group.ops, {id(op)}, group.members(), group_of):
            continue
        group.host = op
        group_of[id(op)] = group


def _add_trailing_reductions(order, group_of):
    for op in order:
        if op.type not in TRAILING_REDUCTIONS or len(op.inputs) != 1 or id(op) in group_of:
            continue
        source, out = op.inputs[0], op.outputs[0]
        group = group_of.get(id(source.producer)) if source.producer is not None else None
        if group is None or group.host is not None or source.shape != group.domain:
            continue
        rank = len(group.domain)
        if rank == 0 or out.dtype != group.dtype or out.is_input or out.ref:
            continue
        if tuple(reduced_axes(op, rank)) != (rank - 1,):
            continue
        attrs = (rank - 1, op.attrs.get_bool("keepdims", False))
        if group.reduction_attrs not in (None, attrs):
            continue
        if _reaches([op], group.members(), group.members(), group_of):
            continue
        group.ops.append(op)
        group.reduction_attrs = attrs
        group_of[id(op)] = group


def _recipe(group, inputs):
    """The recipe of ``group`` and its output variables; ``inputs`` is filled with the
    variables read from outside, in order of first use (for a fused product, after it)."""
    outputs = group.external_outputs()
    uses = {}
    for op in group.ops:
        for var in op.inputs:
            uses[id(var)] = uses.get(id(var), 0) + 1
    refs, assignments, depths = {}, [], {}
    if group.host is not None:
        refs[id(group.host.outputs[0])] = recipes.Ref("%", 0)
        inputs.append(None)     # the product is %0
    temporaries = 0

    def operand(var):
        """The value of ``var`` in the recipe: a reference or an inlined expression."""
        if id(var) not in refs:
            refs[id(var)] = recipes.Ref("%", len(inputs))
            inputs.append(var)
        return refs[id(var)]

    for op in group.ops:
        expr = recipes.Call(op.type, tuple(operand(v) for v in op.inputs))
        depth = 1 + max(depths.get(id(v), 0) for v in op.inputs)
        var = op.outputs[0]
        if var in outputs:
            target = recipes.Ref("@", outputs.index(var))
        elif uses.get(id(var), 0) > 1 or depth >= _INLINE_DEPTH:
            target = recipes.Ref("$", temporaries)
            temporaries += 1
        else:
            refs[id(var)] = expr         # used once: inlined into its consumer
            depths[id(var)] = depth
            continue
        assignments.append((target, expr))
        refs[id(var)] = target
    return recipes.Recipe(tuple(assignments)), outputs


def _rewrite(flow, func, group):
    inputs = []
    recipe, outputs = _recipe(group, inputs)
    members = group.ops + ([group.host] if group.host else [])
    if group.host is not None:
        host = group.host
        op_type, base = _FUSED_HOSTS[host.type], host.name
        inputs = list(host.inputs[:2 if host.type == "MatMul" else 3]) + inputs[1:]
        if host.type == "MatMul":
            attrs = {k: v for k, v in host.attrs.items()
                     if k in ("transpose_a", "transpose_b", "weights")}
        else:
            attrs = dict(host.attrs.items(), bias=len(host.inputs) == 3)
    else:
        attrs = {}
        if group.reduction_attrs is not None:
            attrs = {"axis": group.reduction_attrs[0], "keepdims": group.reduction_attrs[1]}
        op_type, base = "Calculate", f"{func.name}/Calculate"
    attrs["expr"] = str(recipe)
    position = func.ops.index(members[0])
    for op in members:
        flow.delete_op(op)
    internal = {id(v) for op in members for v in op.outputs} - set(map(id, outputs))
    name = flow.unique_op_name(base)
    fused = flow.op(name, op_type, None, inputs, outputs, attrs)
    fused.func = func
    func.ops.insert(position, fused)
    for var in list(flow.vars.values()):
        if id(var) in internal and var.producer is None and not var.consumers:
            flow.delete_var(var)
    return fused


def fuse(flow, ctx):
    """Fuse ops in every function of ``flow``; returns True if any group was formed."""
    changed = False
    for func in flow.funcs.values():
        order = flow.order(func)
        position = {id(op): index for index, op in enumerate(order)}
        group_of = _form_elementwise_groups(order, ctx, position)
        _absorb_epilogues(order, group_of)
        _add_trailing_reductions(order, group_of)
        groups = list({id(g): g for g in group_of.values()}.values())
        for group in groups:
            if len(group.ops) + (group.host is not None) < 2:
                continue
            group.ops.sort(key=lambda o: position[id(o)])
            fused = _rewrite(flow, func, group)
            ctx.log(f"fused {len(group.ops) + (group.host is not None)} ops into "
                    f"{fused.name}: {fused.attrs['expr']}")
            changed = True
        if changed:
            func.ops = flow.order(func)
    return changed
