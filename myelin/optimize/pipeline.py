"""The pass pipeline: which graph passes run at which opt level, in what order.

A pass is a plain function ``pass_(flow, ctx) -> bool`` that rewrites every function of the flow
and says whether it changed anything. :data:`PIPELINE` lists the stages in order; a stage is a
:class:`Pass` or a :class:`Fixpoint` (a group repeated until none of its passes changes the
flow). Each pass has a minimum opt level, as in NNVM's table:

====  ==========================================================================
0     required lowering only: type inference, inference-mode simplification
1     + dead code elimination and operator fusion (attention first)
2     + constant folding (precompute), common subexpressions, algebraic rules
3     + FoldScaleAxis (scales folded into weights), the channel-blocked layout
====  ==========================================================================

:func:`optimize` runs the pipeline; in debug mode (option or ``MYELIN_DEBUG=1``) the flow is
verified after each pass; ``dump`` (or ``MYELIN_DUMP_FLOW=1``) prints the flow after each pass
that changed it; passes named in ``disable`` (or ``MYELIN_DISABLE_PASSES=a,b``) are skipped.
"""

import dataclasses
import os
import sys
import time
from typing import Callable

from myelin.builder import verify
from myelin.optimize import (attention, cleanup, fold, fusion, inference, infer, layout,
                             quantized, quantized_conv, simplify, weight_storage)

DEFAULT_LEVEL = 3
MAX_LEVEL = 3


@dataclasses.dataclass(frozen=True)
class Pass:
    """A named pass and the lowest opt level that runs it."""

    name: str
    run: Callable
    level: int


@dataclasses.dataclass(frozen=True)
class Fixpoint:
    """Passes repeated, in order, until a round changes nothing (at most ``rounds`` rounds)."""

    passes: tuple
    rounds: int = 8


PIPELINE = (
    Pass("infer_types", infer.infer_types, 0),
    Pass("simplify_inference", inference.simplify_inference, 0),
    Fixpoint((
        Pass("fold_constants", fold.fold_constants, 2),
        Pass("simplify_algebra", simplify.simplify_algebra, 2),
        Pass("eliminate_common_subexpressions", cleanup.eliminate_common_subexpressions, 2),
        Pass("eliminate_dead_code", cleanup.eliminate_dead_code, 1),
    )),
    Pass("fold_scale_axis", inference.fold_scale_axis, 3),
    Fixpoint((
        Pass("fold_constants", fold.fold_constants, 2),
        Pass("eliminate_dead_code", cleanup.eliminate_dead_code, 1),
    )),
    Pass("fuse_integer_matmul", quantized.fuse_integer_matmul, 2),
    Pass("fuse_integer_conv", quantized_conv.fuse_integer_conv, 2),
    Pass("block_channels", layout.block_channels, 3),
    Pass("fuse_attention", attention.fuse_attention, 1),
    Pass("absorb_attention_transposes", attention.absorb_transposes, 1),
    Pass("fuse", fusion.fuse, 1),
    Pass("eliminate_dead_code", cleanup.eliminate_dead_code, 1),    # what fusion left unused
    Pass("store_weights", weight_storage.store_weights, 0),     # only with the option
)


def pass_names():
    """The names of every pass in the pipeline (for ``disable``)."""
    names = []
    for stage in PIPELINE:
        for item in (stage.passes if isinstance(stage, Fixpoint) else (stage,)):
            if item.name not in names:
                names.append(item.name)
    return names


@dataclasses.dataclass
class PassRun:
    """One execution of a pass: how long it took and whether it changed the flow."""

    name: str
    seconds: float
    changed: bool


class Context:
    """What passes may read besides the flow: options, and a log of what they did."""

    def __init__(self, level=DEFAULT_LEVEL, fold_limit=1 << 22, verbose=False, fusable=None,
                 channel_block=0, weights=None):
        self.level = level
        self.weights = weights
        self.fold_limit = fold_limit
        self.fusable = fusable
        self.channel_block = channel_block
        self.verbose = verbose
        self.messages = []

    def log(self, message):
        self.messages.append(message)
        if self.verbose:
            print(f"myelin: {message}", file=sys.stderr)


def _env_flag(name):
    return os.environ.get(name, "").lower() not in ("", "0", "false", "no")


class Report:
    """The passes run by :func:`optimize`, in order, with times; ``str()`` gives a table."""

    def __init__(self):
        self.runs = []
        self.dumps = []

    def seconds(self, name=None):
        return sum(r.seconds for r in self.runs if name is None or r.name == name)

    def __str__(self):
        lines = [f"{'pass':<36}{'runs':>5}{'changed':>9}{'ms':>10}"]
        for name in dict.fromkeys(r.name for r in self.runs):
            runs = [r for r in self.runs if r.name == name]
            lines.append(f"{name:<36}{len(runs):>5}{sum(r.changed for r in runs):>9}"
                         f"{sum(r.seconds for r in runs) * 1e3:>10.2f}")
        return "\n".join(lines)


def optimize(flow, level=DEFAULT_LEVEL, disable=(), dump=False, debug=None, fold_limit=1 << 22,
             fusable=None, channel_block=0, weights=None):
    """Run the pipeline on ``flow`` (in place) at opt ``level``; returns a :class:`Report`.

    ``dump`` True prints the flow after each pass that changed it to stderr; a callable
    receives ``(pass_name, text)`` instead. ``debug`` verifies the flow after every pass.
    ``fusable(op_type)`` tells fusion which element-wise ops the back end can fuse (all when
    None). ``channel_block`` is the channels per block of the back end's blocked images (0:
    it has none; see :mod:`myelin.optimize.layout`). ``weights`` is the type constant
    weights of float32 products are stored in (None: float32; see
    :mod:`myelin.optimize.weight_storage`).
    """
    if not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"opt level {level} is not in 0..{MAX_LEVEL}")
    disabled = set(disable) | {n for n in os.environ.get("MYELIN_DISABLE_PASSES", "").split(",")
                               if n}
    unknown = disabled - set(pass_names())
    if unknown:
        raise ValueError(f"unknown passes {', '.join(sorted(unknown))}; the passes are "
                         f"{', '.join(pass_names())}")
    debug = _env_flag("MYELIN_DEBUG") if debug is None else debug
    if not dump and _env_flag("MYELIN_DUMP_FLOW"):
        dump = True
    if weights is not None and weights not in weight_storage.STORAGE_TYPES:
        raise ValueError(f"weights must be one of {', '.join(weight_storage.STORAGE_TYPES)} "
                         f"or None, not {weights!r}")
    ctx = Context(level, fold_limit, fusable=fusable, channel_block=channel_block,
                  weights=weights)
    report = Report()
    flow.infer_inputs_and_outputs()

    def run(item):
        if item.level > level or item.name in disabled:
            return False
        start = time.perf_counter()
        changed = bool(item.run(flow, ctx))
        report.runs.append(PassRun(item.name, time.perf_counter() - start, changed))
        if debug:
            verify.check(flow)
        if changed and dump:
            text = str(flow)
            if callable(dump):
                dump(item.name, text)
            else:
                print(f"--- flow after {item.name} ---\n{text}", file=sys.stderr)
        return changed

    for stage in PIPELINE:
        if isinstance(stage, Pass):
            run(stage)
            continue
        for _ in range(stage.rounds):
            if not any([run(item) for item in stage.passes]):
                break
    report.messages = ctx.messages
    return report
