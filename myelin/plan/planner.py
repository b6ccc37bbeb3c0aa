"""Planning a flow for a back end: a copy of the flow optimized by the pass pipeline
(:mod:`myelin.optimize`), then each function's ops in order, a kernel picked for each step by
the back end, its tensors specified (:class:`~myelin.plan.cell.TensorSpec`) and its instance
memory planned (:mod:`myelin.plan.memory`). The CPU compiler (:class:`myelin.compiler.Compiler`)
and the CUDA planner (:mod:`myelin.codegen.cuda.planner`) both plan through a :class:`Planner`.
"""

import dataclasses
import time

from myelin import limits, optimize
from myelin.builder import verify
from myelin.errors import CompileError, ShapeError, UnsupportedOpError
from myelin.flow import dtypes
from myelin.ops import control, registry
from myelin.optimize import loops
from myelin.plan import memory
from myelin.plan.assign import fold_assigns
from myelin.plan.cell import (
    CONSTANT,
    INPUT,
    LEARNABLE,
    LOCAL,
    OUTPUT,
    Repeat,
    Step,
    TensorSpec,
)
from myelin.plan.concat import fold_concats
from myelin.plan.slices import fold_slices
from myelin.plan.kernel import EMPTY


class Planner:
    """Plans flows for one back end. ``select(step, target)`` picks each step's kernel (None
    where it has none; its ``backend`` attribute names the back end in errors) and
    ``fusable(op)`` says which element-wise ops the back end's fused kernels compute;
    ``channel_block(target)``, where given, the channels per block of the images its
    convolutions read (:mod:`myelin.optimize.layout`; 0 for none). The other options are the
    :class:`~myelin.compiler.Compiler`'s of the same names; ``progress(phase, done, total)``
    is told as each phase starts."""

    def __init__(self, select, fusable, opt_level=optimize.DEFAULT_LEVEL, reuse_memory=True,
                 alignment=64, disable_passes=(), dump_flow=False, debug=None, loops=None,
                 progress=None, channel_block=None, weights=None):
        self.select = select
        self.weights = weights
        self.fusable = fusable
        self.channel_block = channel_block
        self.opt_level = opt_level
        self.reuse_memory = reuse_memory
        self.alignment = alignment
        self.disable_passes = tuple(disable_passes)
        self.dump_flow = dump_flow
        self.debug = debug
        self.loops = dict(loops or {})
        self.progress = progress or (lambda phase, done, total: None)
        self.timings = {}
        self.report = None

    def prepare(self, flow, target):
        """Optimize a copy of ``flow`` and plan its functions for ``target``: returns (the
        optimized flow, a :class:`PlannedCell` per function, its globals by name); the
        phases' seconds are in ``timings``, the passes run in ``report``."""
        self.progress("optimize", 0, 0)
        start = time.perf_counter()
        calls = [op.name for op in flow.ops.values() if control.is_control(op)]
        if calls:
            raise CompileError(f"the flow has control flow ({', '.join(calls[:3])}"
                               f"{', ...' if len(calls) > 3 else ''}): compile it with "
                               f"myelin.control.compile, which runs it on the VM")
        flow.infer_inputs_and_outputs()
        verify.check(flow)
        flow = flow.copy()
        for name, (_, feedback) in self.loops.items():
            loops.project_rows(flow, flow.funcs[name], {state for _, state in feedback})
        self.report = optimize.optimize(flow, self.opt_level, self.disable_passes,
                                        self.dump_flow, self.debug,
                                        fusable=self.fusable, weights=self.weights,
                                        channel_block=(self.channel_block(target)
                                                       if self.channel_block else 0))
        verify.check(flow)
        self.timings["optimize"] = time.perf_counter() - start

        self.progress("plan", 0, 0)
        start = time.perf_counter()
        globals_ = {}
        planned = [self._plan_function(flow, func, globals_, target)
                   for func in flow.funcs.values()]
        self._check_supported(planned)
        self.timings["plan"] = time.perf_counter() - start
        return flow, planned, globals_

    def _plan_function(self, flow, func, globals_, target):
        tensors, specs = [], {}

        def spec_of(var):
            if var.is_global:
                spec = globals_.get(var.name)
                if spec is None:
                    spec = self._make_spec(var, CONSTANT if var.constant else LEARNABLE)
                    globals_[var.name] = spec
                if spec not in tensors:
                    tensors.append(spec)
                return spec
            spec = specs.get(var.name)
            if spec is None:
                kind = INPUT if var.is_input else OUTPUT if var.is_output else LOCAL
                spec = self._make_spec(var, kind)
                specs[var.name] = spec
                tensors.append(spec)
            return spec

        steps = []
        looping = func.name in self.loops
        order = flow.order(func)
        if looping:      # what does not change from round to round first, run once
            state = {state for _, state in self.loops[func.name][1]}
            invariant = loops.invariant_ops(flow, func, state)
            hoisted = set(map(id, invariant))
            order = invariant + [op for op in order if id(op) not in hoisted]
        for op in order:
            step = Step(op.name, op.type, [spec_of(v) for v in op.inputs],
                        [spec_of(v) for v in op.outputs], op.attrs, op=op)
            step.kernel = EMPTY if step.empty else self.select(step, target)
            if step.kernel is not None:
                step.variant = step.kernel.variant(step, target)
                if step.kernel.view(step) and self._may_view(step, looping):
                    step.outputs[0].view_of = step.inputs[0]
            steps.append(step)
        start = len(invariant) if looping else None
        sizes = None
        if all(step.kernel is not None for step in steps):
            if not looping:     # (a value computed once could not stand for an Assign per round)
                steps = fold_slices(fold_concats(fold_assigns(steps)))
            sizes = memory.plan(steps, tensors, self.reuse_memory, start)
            limits.check(sizes[0], f"the instance of cell {func.name}")
        repeat = self._repeat(func.name, tensors, start) if looping else None
        return PlannedCell(func.name, steps, tensors, sizes, repeat)

    @staticmethod
    def _may_view(step, looping):
        source, out = step.inputs[0], step.outputs[0]
        root = source.root()
        if (root.is_global or root.ref or root.kind == INPUT or looping) \
                and out.kind in (OUTPUT, INPUT):
            return False       # an output of its own, not an input's or a global's bytes
        return out.kind != INPUT       # (nor, in a loop, an input's it is copied over)

    def _repeat(self, name, tensors, start):
        """The :class:`Repeat` of looping function ``name``, its loop from step ``start``."""
        condition, feedback = self.loops[name]
        specs = {spec.name: spec for spec in tensors}

        def spec(var, kinds):
            found = specs.get(var)
            if found is None or found.kind not in kinds or found.ref:
                raise CompileError(f"the loop of cell {name} needs {var} as a "
                                   f"{' or '.join(kinds)} of its own, which it is not")
            return found

        condition = spec(condition, (OUTPUT,))
        if condition.elements != 1:
            raise CompileError(f"the loop condition {condition.name} of cell {name} has "
                               f"{condition.elements} elements, not one")
        pairs = []
        for output, state in feedback:
            output, state = spec(output, (OUTPUT,)), spec(state, (INPUT,))
            if (output.dtype, output.elements) != (state.dtype, state.elements):
                raise CompileError(f"the loop of cell {name} copies {output.type_string()} "
                                   f"{output.name} over {state.type_string()} {state.name}")
            pairs.append((output, state))
        return Repeat(condition, pairs, start)

    def _make_spec(self, var, kind):
        if not var.dtype:
            raise CompileError(f"variable {var.name} has no data type")
        dtypes.canonical(var.dtype)
        # A dimension of 0 stays (an empty tensor); a dynamic one (-1) takes the flow's batch
        # size, which must have been given: it is never guessed.
        shape = var.shape
        if any(d < 0 for d in shape):
            batch = var.flow.batch_size
            if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int)
                                      or batch < 0):
                raise ShapeError(f"flow.batch_size is {batch!r}: a size is an int >= 0")
            if batch is None:
                raise ShapeError(
                    f"variable {var.name} has a dynamic dimension (-1) in its shape "
                    f"{list(shape)}, whose size myelin does not guess: give every -1 a size with "
                    f"flow.batch_size = N before compiling, or make the variable with its sizes")
            shape = tuple(batch if d < 0 else d for d in shape)
        ref = kind == INPUT and var.ref
        spec = TensorSpec(var.name, dtypes.canonical(var.dtype), shape, kind,
                          aliases=list(var.aliases), is_output=var.is_output,
                          alignment=8 if ref else self.alignment, ref=ref)
        spec.var = var
        if kind != CONSTANT:
            limits.check(spec.size, f"tensor {var.name} ({spec.type_string()})")
        return spec

    def _check_supported(self, planned):
        backend = getattr(self.select, "backend", "CPU")
        missing = []
        for cell in planned:
            for step in cell.steps:
                if step.kernel is None:
                    known = registry.find(step.type) is not None
                    why = f"no {backend} kernel supports" if known else "unknown op type"
                    shapes = ", ".join(t.type_string() for t in step.inputs)
                    missing.append(f"{step.name} ({step.type}: {why} inputs {shapes})")
        if missing:
            raise UnsupportedOpError(f"{len(missing)} ops cannot be compiled: "
                                     + "; ".join(missing), ops=missing)


@dataclasses.dataclass
class PlannedCell:
    """A function planned for code generation: its steps in order, its tensors, its
    (instance size, size without reuse) and its :class:`Repeat` if it loops."""
    name: str
    steps: list
    tensors: list
    sizes: tuple
    repeat: Repeat = None
