"""ONNX control flow: If, Loop and Scan, onto myelin's functions with signatures, ``If`` and
``Call`` ops (:mod:`myelin.builder.control`), which :mod:`myelin.control` compiles and runs.

Subgraphs (``then_branch``, ``else_branch``, ``body``) are imported into functions of their
own; the names of the graphs around them that they read become the functions' free
variables (captured by the If op, passed along each iteration of a loop).

- **If** with a condition known at import (a constant, or computed from constants or from
  graph inputs the importer specialized on) imports only the branch taken, inline. Otherwise
  both branches become branch functions of an ``If`` op; they must give outputs of the same
  types (myelin needs static shapes), and sequences cannot leave them. A branch may not be
  valid for the shapes given at all (silero-vad's 8 kHz branch on a 16 kHz frame): when one
  cannot be imported and the condition is computed only from settings, graph inputs that are
  integer or bool tensors of at most ``SETTING_ELEMENTS`` elements (a sample rate, a flag),
  the model is specialized on their values, so the branch taken is imported alone.
- **Loop** becomes a Builder ``while_loop`` (a tail-recursive function) over (iteration
  number, condition, loop-carried values, scan outputs so far), running while i < M and the
  condition holds. M and the condition may be run-time values. Scan
  outputs are stacked along a new first axis, so their length must be known at import: then M
  must be known at import (a constant, or computed from graph inputs, which makes the importer
  specialize on their values), as the initial condition, and the body must pass its condition
  through unchanged (or give true). Each scan output is a preallocated tensor of that length,
  given along the loop, a row of which ScatterND writes at each iteration (exact; the rows' types
come from importing the body once into a scratch function first). As the VM
  copies values between iterations, that costs O(length^2) copies of a row; from
  ``BLOCKED_FROM`` iterations on, the loop runs as two nested loops (blocks of ~sqrt(length)
  rows, then the blocks), O(length^1.5).
- **Scan** (opset 8 with its batch axis, opset 9 and later with ``scan_input_axes``,
  ``scan_input_directions``, ``scan_output_axes``, ``scan_output_directions``) is the same
  loop over the scan length (static: the scan inputs' length along their axes): each
  iteration reads row t (or length-1-t in reverse) of each scan input with a Gather, and writes
  its scan output rows as Loop does; outputs on another axis are transposed after the loop.

A loop whose body cannot be imported once for all iterations (a value it needs at import, such
as a Slice's start, depends on the iteration number; a loop-carried value changes shape; the
condition changes at run time...) is unrolled instead when it runs a number of iterations
known at import, at most ``UNROLL_LIMIT``: each iteration is imported with its iteration
number as a constant, and a condition must then be known at import after each iteration.
"""

import math

import numpy as np

from myelin.errors import ShapeError, UnsupportedTypeError
from myelin.flow import dtypes
from myelin.importers.onnx.context import NeedsInputValues, Sequence
from myelin.importers.onnx.converters import converter

UNROLL_LIMIT = 64        # loops of at most this many iterations may be unrolled
SETTING_ELEMENTS = 16    # integer or bool graph inputs this small deciding an If: settings
BLOCKED_FROM = 65        # loops with scan outputs and this many iterations or more run blocked


# If.
@converter("If")
def _if(ctx):
    condition = _one_element(ctx, ctx.input(0), "condition")
    if condition.data is not None:
        branch = "then_branch" if _truth(condition) else "else_branch"
        outputs = ctx.subgraph(branch, ctx.b, [])
        _check_count(ctx, outputs, branch)
        return outputs
    built = {}

    def branch(attribute):
        def build(b):
            outputs = ctx.subgraph(attribute, b, [])
            _check_count(ctx, outputs, attribute)
            for index, var in enumerate(outputs):
                if isinstance(var, Sequence):
                    raise UnsupportedTypeError(
                        f"node {ctx.name} (If): output {index} of {attribute} is a sequence; "
                        f"myelin supports sequences only inside a graph, or in an If whose "
                        f"condition is known at import")
            if "then_branch" in built and _types(built["then_branch"]) != _types(outputs):
                raise ctx.error(f"the branches give different types: then "
                                f"({_describe(built['then_branch'])}), else "
                                f"({_describe(outputs)}); myelin needs one static type for "
                                f"each output")
            built[attribute] = outputs
            return outputs
        return build

    try:
        results = ctx.b.if_else(condition, branch("then_branch"), branch("else_branch"))
    except ShapeError:
        settings = ctx.importer.graph_inputs_feeding(condition)
        if settings and all((dtypes.is_integer(var.dtype) or var.dtype == "bool")
                            and var.elements <= SETTING_ELEMENTS for var in settings.values()):
            raise NeedsInputValues(settings) from None
        raise
    return results if isinstance(results, list) else [results]


def _check_count(ctx, outputs, attribute):
    if len(outputs) != ctx.num_outputs:
        raise ctx.error(f"{attribute} gives {len(outputs)} outputs, the node has "
                        f"{ctx.num_outputs}")


# Loop.
@converter("Loop")
def _loop(ctx):
    body = ctx.attr("body")
    state = [ctx.input(i) for i in range(2, len(ctx))]
    scans = len(body.output) - 1 - len(state)
    if len(body.input) != 2 + len(state) or scans < 0:
        raise ctx.error(f"the body takes {len(body.input)} inputs and gives {len(body.output)} "
                        f"outputs; with {len(state)} loop-carried values it must take "
                        f"{2 + len(state)} and give at least {1 + len(state)}")
    limit = ctx.cast(_one_element(ctx, ctx.input(0), "trip count M"), "int64") \
        if ctx.has(0) else None
    condition = ctx.cast(_one_element(ctx, ctx.input(1), "condition"), "bool") \
        if ctx.has(1) else None
    if limit is None and condition is None:
        raise ctx.error("it has neither a trip count M nor a condition: it would never end")
    if limit is not None and limit.data is not None:
        trip = max(int(limit.data), 0)
    else:
        trip = None
    if condition is not None and condition.data is not None and not _truth(condition):
        trip = 0
    if scans:
        # Stacked outputs need a length known at import.
        if limit is None:
            raise ctx.error(f"it has {scans} scan outputs but no trip count M: their length is "
                            f"known only at run time, and myelin needs static shapes")
        trip = max(int(_known(ctx, 0, "trip count M", scans)), 0)
        if condition is not None and not _truth(_known(ctx, 1, "condition", scans)):
            trip = 0

    def step(c, index, flag, carried):
        cond_in = flag if flag is not None else c.const(np.bool_(True))
        outputs = c.subgraph("body", c.b, [index, cond_in] + list(carried))
        cond_out = outputs[0]
        if isinstance(cond_out, Sequence):
            raise ctx.error("the body's condition output is a sequence")
        cond_out = c.cast(_one_element(c, cond_out, "body's condition output"), "bool")
        return (cond_out if condition is not None else None,
                outputs[1:1 + len(state)], outputs[1 + len(state):])

    final, stacked = _iterate(ctx, state, step, trip=trip, limit=limit, condition=condition,
                              scans=scans, reverse=[False] * scans)
    return final + stacked


# Scan.
@converter("Scan")
def _scan(ctx):
    if ctx.opset < 9:
        return _scan8(ctx)
    count = ctx.attr("num_scan_inputs")
    inputs = ctx.inputs
    if not 1 <= count <= len(inputs):
        raise ctx.error(f"num_scan_inputs {count} must be in [1, {len(inputs)}]")
    states, xs = inputs[:len(inputs) - count], inputs[len(inputs) - count:]
    axes = list(ctx.attr("scan_input_axes", [0] * count))
    directions = list(ctx.attr("scan_input_directions", [0] * count))
    final, outputs = _scan_core(ctx, states, xs, axes, directions)
    scans = len(outputs)
    out_axes = list(ctx.attr("scan_output_axes", [0] * scans))
    if len(out_axes) != scans:
        raise ctx.error(f"scan_output_axes {out_axes} must have {scans} entries")
    for index, (stacked, axis) in enumerate(zip(outputs, out_axes)):
        if not -stacked.rank <= axis < stacked.rank:
            raise ctx.error(f"scan_output_axes[{index}] = {axis} is out of range for scan "
                            f"output rank {stacked.rank}")
        axis %= stacked.rank
        if axis:
            perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, stacked.rank))
            outputs[index] = ctx.op("Transpose", [stacked], {"perm": perm})
    return final + outputs


def _scan8(ctx):
    """Scan of opset 8: every input and output has a batch axis first, the scan axis second;
    the body runs on each batch entry apart (one loop per entry, stacked after)."""
    count = ctx.attr("num_scan_inputs")
    inputs = [ctx.input(i) for i in range(1, len(ctx))]
    if not 1 <= count <= len(inputs):
        raise ctx.error(f"num_scan_inputs {count} must be in [1, {len(inputs)}]")
    if any(var.rank < 1 for var in inputs) or any(var.rank < 2 for var in inputs[-count:]):
        raise ctx.error("opset 8 Scan inputs need a batch axis (and scan inputs a scan axis)")
    batch = inputs[0].shape[0]
    if any(var.shape[0] != batch for var in inputs):
        raise ctx.error(f"inputs have different batch sizes "
                        f"{[var.shape[0] for var in inputs]}")
    if ctx.has(0):
        lengths = ctx.ints(0)
        full = inputs[-1].shape[1]
        if any(n != full for n in lengths):
            raise ctx.error(f"sequence_lens {lengths} other than the full length {full} are "
                            f"not supported")
    directions = list(ctx.attr("directions", [0] * count))
    entries = []
    for entry in range(batch):
        index = ctx.const(np.int64(entry))
        parts = [ctx.op("Gather", [var, index], {"axis": 0}) for var in inputs]
        entries.append(_scan_core(ctx, parts[:-count], parts[-count:], [0] * count,
                                  directions))
    results = []
    for position in range(len(entries[0][0]) + len(entries[0][1])):
        parts = [(final + outputs)[position] for final, outputs in entries]
        results.append(_stack(ctx, parts))
    return results


def _scan_core(ctx, states, xs, axes, directions):
    """(final states, stacked scan outputs [length, ...]) of the node's body run over ``xs``
    along ``axes`` (reversed where ``directions`` is 1)."""
    body = ctx.attr("body")
    if len(axes) != len(xs) or len(directions) != len(xs):
        raise ctx.error(f"scan input axes {axes} and directions {directions} must have "
                        f"{len(xs)} entries")
    axes = list(axes)
    for index, (x, axis) in enumerate(zip(xs, axes)):
        if not -x.rank <= axis < x.rank:
            raise ctx.error(f"scan input axis {axis} is out of range for input {index} of "
                            f"rank {x.rank}")
        axes[index] = axis % x.rank
    lengths = {x.shape[axis] for x, axis in zip(xs, axes)}
    if len(lengths) != 1:
        raise ctx.error(f"scan inputs have different lengths {sorted(lengths)} along their "
                        f"axes")
    length = lengths.pop()
    scans = len(body.output) - len(states)
    if len(body.input) != len(states) + len(xs) or scans < 0:
        raise ctx.error(f"the body takes {len(body.input)} inputs and gives "
                        f"{len(body.output)} outputs; with {len(states)} states and {len(xs)} "
                        f"scan inputs it must take {len(states) + len(xs)} and give at least "
                        f"{len(states)}")
    reverse = list(ctx.attr("scan_output_directions", [0] * scans)) if ctx.opset >= 9 \
        else [0] * scans
    if len(reverse) != scans:
        raise ctx.error(f"scan_output_directions {reverse} must have {scans} entries")

    def step(c, index, flag, carried):
        rows = []
        for x, axis, backwards in zip(xs, axes, directions):
            position = c.op("Sub", [c.const(np.int64(length - 1)), index]) if backwards \
                else index
            rows.append(c.op("Gather", [x, position], {"axis": axis}))
        outputs = c.subgraph("body", c.b, list(carried) + rows)
        return None, outputs[:len(states)], outputs[len(states):]

    return _iterate(ctx, states, step, trip=length, limit=ctx.const(np.int64(length)),
                    condition=None, scans=scans, reverse=[bool(r) for r in reverse])


# The loop, built once or unrolled.
def _iterate(ctx, state, step, *, trip, limit, condition, scans, reverse):
    """(final loop-carried values, stacked scan outputs) of a loop running ``step`` while
    the iteration number is below ``limit`` (a variable, or None) and ``condition`` holds
    (None: no condition). ``step(c, index, flag, carried)`` imports one iteration with the
    NodeContext ``c`` (of the function it builds) and returns (condition or None, new
    loop-carried values, scan output rows). ``trip`` is the number of iterations when it is
    known at import (needed when ``scans`` > 0), else None."""
    mark = ctx.b.flow.mark()
    try:
        if scans and trip >= BLOCKED_FROM:
            return _blocked(ctx, state, step, trip, scans, reverse)
        return _rolled(ctx, state, step, trip, limit, condition, scans, reverse)
    except (ShapeError, UnsupportedTypeError) as error:
        if trip is None or trip > UNROLL_LIMIT:
            raise
        mark.undo()
        try:
            return _unrolled(ctx, state, step, trip, condition, reverse)
        except (ShapeError, UnsupportedTypeError):
            raise error from None


def _rolled(ctx, state, step, trip, limit, condition, scans, reverse):
    """The loop as a Builder ``while_loop`` over (iteration number, condition, loop-carried
    values, scan outputs so far)."""
    b = ctx.b
    rows = _row_types(ctx, state, step, condition) if scans else []
    buffers = [ctx.const(np.zeros((trip,) + shape, dtypes.to_numpy(dtype)))
               for dtype, shape in rows] if trip else []
    flagged = condition is not None
    initial = [ctx.const(np.int64(0))] + ([condition] if flagged else []) + state + buffers

    def going(lb, counter, *rest):
        test = lb.less(counter, limit) if limit is not None else None
        if flagged:
            test = rest[0] if test is None else lb.logical_and(test, rest[0])
        return test

    def body(bb, counter, *rest):
        flag = rest[0] if flagged else None
        carried = list(rest[flagged:flagged + len(state)])
        c = ctx.using(bb)
        cond_out, new, outputs = step(c, counter, flag, carried)
        for index, var in enumerate(list(new) + list(outputs)):
            if isinstance(var, Sequence):
                raise UnsupportedTypeError(f"node {ctx.name} ({ctx.op_type}): body output "
                                           f"{index} is a sequence, which a loop cannot "
                                           f"carry or stack")
        if _types(new) != _types(carried):
            raise ctx.error(f"the body gives loop-carried values of types ({_describe(new)}) "
                            f"for ({_describe(carried)}); myelin needs them to keep their "
                            f"types")
        if scans and cond_out is not None and cond_out is not flag and not (
                cond_out.data is not None and _truth(cond_out)):
            raise ctx.error("its condition may end it before the trip count, so the length "
                            "of its scan outputs is known only at run time")
        written = []
        for buffer, row, backwards in zip(rest[flagged + len(state):], outputs, reverse):
            position = c.op("Sub", [c.const(np.int64(trip - 1)), counter]) if backwards \
                else counter
            written.append(c.op("ScatterND", [buffer, c.reshape(position, (1, 1)),
                                              c.reshape(row, (1,) + row.shape)]))
        return [bb.add(counter, 1)] + ([cond_out] if flagged else []) + list(new) + written

    final = b.while_loop(going, body, initial)
    start = 1 + flagged
    stacked = final[start + len(state):] if trip else [
        ctx.const(np.zeros((0,) + shape, dtypes.to_numpy(dtype))) for dtype, shape in rows]
    return final[start:start + len(state)], stacked


def _row_types(ctx, state, step, condition):
    """(dtype, shape) of the scan output rows of ``step``, imported once into a scratch
    function and removed again."""
    flow = ctx.b.flow
    mark = flow.mark()
    try:
        scratch = type(ctx.b)(flow, flow.func(flow.unique_func_name(f"{ctx.b.func.name}/rows")))
        counter = scratch.param("iteration", "int64")
        flag = scratch.param("condition", "bool") if condition is not None else None
        carried = [scratch.param(f"state{i}", v.dtype, v.shape) for i, v in enumerate(state)]
        _, _, rows = step(ctx.using(scratch), counter, flag, carried)
        return [(row.dtype, tuple(row.shape)) for row in rows]
    finally:
        mark.undo()


def _blocked(ctx, state, step, trip, scans, reverse):
    """A long loop with scan outputs as two loops, so that it copies its scan outputs
    O(trip^1.5) times rather than O(trip^2) (each iteration of a rolled loop copies them
    whole): the inner one runs ``size`` ~ sqrt(trip) iterations and stacks their rows in a
    block, the outer one runs the inner one per block and stacks the blocks. The condition,
    if any, is true on entry and must stay true (the step gets no flag)."""
    size = math.isqrt(trip - 1) + 1
    blocks = -(-trip // size)

    def outer_step(c, block, flag, carried):
        base = c.op("Mul", [block, c.const(np.int64(size))])
        limit = c.op("Minimum", [c.op("Sub", [c.const(np.int64(trip)), base]),
                                 c.const(np.int64(size))])

        def inner_step(ci, index, inner_flag, inner_carried):
            return step(ci, ci.op("Add", [base, index]), None, inner_carried)

        final, rows = _rolled(c, carried, inner_step, size, limit, None, scans,
                              [False] * scans)
        return None, final, rows

    final, stacked = _rolled(ctx, state, outer_step, blocks, ctx.const(np.int64(blocks)), None,
                             scans, [False] * scans)
    outputs = []
    for rows, backwards in zip(stacked, reverse):
        rows = ctx.reshape(rows, (blocks * size,) + rows.shape[2:])
        indices = np.arange(trip - 1, -1, -1) if backwards else np.arange(trip)
        if backwards or trip < blocks * size:
            rows = ctx.op("Gather", [rows, ctx.const(indices.astype(np.int64))], {"axis": 0})
        outputs.append(rows)
    return final, outputs


def _unrolled(ctx, state, step, trip, condition, reverse):
    """The loop imported once per iteration into the node's function, the iteration number a
    constant; the condition must be known at import before each iteration."""
    carried, flag, rows = list(state), condition, []
    for iteration in range(trip):
        if flag is not None:
            if flag.data is None:
                raise ctx.error(f"its condition before iteration {iteration} is computed at "
                                f"run time")
            if not _truth(flag):
                break
        cond_out, carried, outputs = step(ctx, ctx.const(np.int64(iteration)), flag, carried)
        flag = cond_out if flag is not None else None
        rows.append(outputs)
    stacked = []
    for index, backwards in enumerate(reverse):
        parts = [outputs[index] for outputs in rows]
        if not parts:
            raise ctx.error("it runs no iteration, so the shape of its scan outputs is "
                            "unknown")
        if any(isinstance(part, Sequence) for part in parts):
            raise UnsupportedTypeError(f"node {ctx.name} ({ctx.op_type}): scan output "
                                       f"{index} is a sequence")
        if len(set(_types(parts))) != 1:
            raise ctx.error(f"scan output {index} changes type between iterations: "
                            f"{_describe(parts)}")
        stacked.append(_stack(ctx, parts[::-1] if backwards else parts))
    return list(carried), stacked


# Helpers.
def _one_element(ctx, var, what):
    """``var`` as a scalar; ShapeError unless it has exactly one element."""
    if var.elements != 1:
        raise ctx.error(f"the {what} must have one element, not shape {list(var.shape)}")
    return ctx.reshape(var, ()) if var.shape != () else var


def _truth(var):
    return bool(np.asarray(var.data).reshape(-1)[0])


def _known(ctx, index, what, scans):
    """The value of input ``index``, which the length of the scan outputs depends on."""
    try:
        return np.asarray(ctx.value(index)).reshape(-1)[0]
    except ShapeError:
        raise ctx.error(f"it has {scans} scan outputs, so its {what} must be known at import "
                        f"(a constant, or computed from graph inputs); it is computed at run "
                        f"time") from None


def _stack(ctx, parts):
    """``parts`` (of one type) stacked along a new first axis."""
    parts = [ctx.reshape(part, (1,) + part.shape) for part in parts]
    if len(parts) == 1:
        return parts[0]
    return ctx.op("Concat", parts + [ctx.const(0, "int32")], {"N": len(parts)})


def _types(variables):
    return [(var.dtype, tuple(var.shape)) for var in variables]


def _describe(variables):
    return ", ".join(f"{var.dtype}{list(var.shape)}" for var in variables)
