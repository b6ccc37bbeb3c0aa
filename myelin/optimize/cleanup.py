"""Dead code and common subexpression elimination, and the graph surgery other passes share.

Variables a pass must keep (:func:`pinned`) are function inputs and outputs, globals
(constants and learnable parameters) and connector links: they keep their names and are never
deleted. :func:`forward` removes an op whose outputs equal existing variables and keeps pinned
outputs alive under their own names.
"""


import numpy as np

from myelin.ops import registry


def pinned(var):
    """True if passes must keep ``var`` (and its name): an input, output, global or link."""
    return (var.is_input or var.is_output or var.is_global
            or any(var in cnx.links for cnx in var.flow.cnxs.values()))


def is_stateful(op):
    """True for ops passes must neither merge nor evaluate early: ops with no outputs (Assign)
    and ops the registry does not know."""
    opdef = registry.find(op.type)
    return not op.outputs or opdef is None or opdef.outputs == 0


def _repointable(source, func):
    """True if the producer of ``source`` may write a pinned variable instead of it."""
    producer = source.producer
    return not pinned(source) and producer is not None and producer.func is func


def forward(flow, op, sources):
    """Delete ``op`` and let ``sources`` (existing variables with the types of its outputs, one
    per output) stand in for its outputs. Readers of an unpinned output read its source; a
    pinned output is written by its source's producer instead when the source is a local value
    of the same function, else by a new Identity op. Returns False, changing nothing, for an
    Identity op that would only be replaced by itself."""
    func = op.func
    if op.type == "Identity" and pinned(op.outputs[0]) and not _repointable(sources[0], func):
        return False
    outputs = list(op.outputs)
    flow.delete_op(op)
    for out, source in zip(outputs, sources):
        if not pinned(out):
            for consumer in list(out.consumers):
                consumer.replace_input(out, source)
            flow.delete_var(out)
        elif _repointable(source, func):
            source.producer.replace_output(source, out)
            for consumer in list(source.consumers):
                consumer.replace_input(source, out)
            flow.delete_var(source)
        else:
            flow.op(flow.unique_op_name(f"{op.name}/Identity"), "Identity", func, [source],
                    [out])
    return True


def apply_rules(flow, ctx, rules, pass_name):
    """Call ``rules[op.type](flow, op)`` for every op of every function, in order; a rule
    returns True when it rewrote the op. Returns True if any rule did."""
    changed = False
    for func in flow.funcs.values():
        for op in flow.order(func):
            rule = rules.get(op.type)
            if rule is not None and rule(flow, op):
                ctx.log(f"{pass_name}: rewrote {op.name} ({op.type})")
                changed = True
    return changed


def _live_ops(func):
    """The ops of ``func`` that are stateful, write a pinned variable, or feed a live op (or
    an op of another function)."""
    live = set()
    for op in reversed(func.flow.order(func)):
        if is_stateful(op) or any(
                pinned(var) or any(c.func is not func or id(c) in live for c in var.consumers)
                for var in op.outputs):
            live.add(id(op))
    return live


def eliminate_dead_code(flow, ctx):
    """Remove ops whose results nothing uses, then variables nothing produces or reads
    (pinned ones stay). Returns True if anything was removed."""
    changed = False
    for func in flow.funcs.values():
        live = _live_ops(func)
        for op in [op for op in func.ops if id(op) not in live]:
            ctx.log(f"eliminate_dead_code: removed {op.name} ({op.type})")
            flow.delete_op(op)
            changed = True
    for var in list(flow.vars.values()):
        if var.producer is None and not var.consumers and not pinned(var):
            flow.delete_var(var)
            changed = True
    return changed


def _constant_key(var):
    """Type, shape and a sample of the bytes of a constant: the same for equal constants,
    rarely for different ones (which :func:`_same_bytes` then tells apart)."""
    flat = _bytes(var)
    return var.dtype, var.shape, flat[::max(1, flat.size // 256)].tobytes()


def _bytes(var):
    return np.ascontiguousarray(var.data).reshape(-1).view(np.uint8)


def _merge_constants(flow, ctx):
    """Make readers of a constant read the first constant with the same type, shape and bytes
    (constants that stateful ops read are left alone)."""
    first = {}           # key -> the constants kept with that key
    changed = False
    for var in list(flow.vars.values()):
        if not var.fixed or any(map(is_stateful, var.consumers)):
            continue
        candidates = first.setdefault(_constant_key(var), [])
        kept = next((c for c in candidates if np.array_equal(_bytes(c), _bytes(var))), None)
        if kept is None:
            candidates.append(var)
        elif var.consumers:
            ctx.log(f"eliminate_common_subexpressions: {var.name} is {kept.name}")
            for consumer in list(var.consumers):
                consumer.replace_input(var, kept)
            changed = True
    return changed


def _merge_ops(flow, func, ctx):
    """Replace each op by an earlier one of ``func`` with the same type, attributes, inputs
    and output types."""
    written = {id(var) for op in func.ops if is_stateful(op) for var in op.inputs}
    first = {}
    changed = False
    for op in flow.order(func):
        if is_stateful(op) or any(id(var) in written for var in op.inputs):
            continue
        key = (op.type, tuple(sorted(op.attrs.items())), tuple(id(var) for var in op.inputs),
               tuple((var.dtype, var.shape) for var in op.outputs))
        kept = first.setdefault(key, op)
        if kept is not op and forward(flow, op, kept.outputs):
            ctx.log(f"eliminate_common_subexpressions: {op.name} is {kept.name}")
            changed = True
    return changed


def eliminate_common_subexpressions(flow, ctx):
    """Merge identical constants, then identical ops within each function (the first one
    stays). Returns True if anything was merged."""
    changed = _merge_constants(flow, ctx)
    for func in flow.funcs.values():
        changed |= _merge_ops(flow, func, ctx)
    return changed
