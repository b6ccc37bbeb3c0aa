"""Where an imported model first goes wrong: its intermediate values against ONNX Runtime.

:func:`localize` runs a model in myelin and in ONNX Runtime on the same inputs and finds the
first node (in the graph's order) whose output differs, in two ways:

1. **Every value an output.** The model is compiled once with every node output of the main
   graph made a graph output, and each is compared with ONNX Runtime's. This finds a wrong
   kernel, but changes what the compiler fuses: a value that is a graph output is stored,
   so it can no longer stay in registers inside a fused kernel.
2. **Cut models.** When every value agrees that way but the model's outputs still differ, the
   fault is in a fused form. The model is cut after node *k* (its only outputs are node
   *k*'s), which leaves the fusion of everything before *k* as it is, and the first *k*
   whose outputs differ is found by bisection (a handful of compiles).

Values are compared with an absolute floor as well as a relative bound: ``|a - b| <=
atol + rtol * |b|`` elementwise (integers must be equal), so outputs near zero, such as
ONNX Runtime's float32 sigmoid tail, do not count as wrong. ``myelin compare MODEL`` prints
the report.
"""

import dataclasses

import numpy as np
import onnx

from myelin.errors import InputError
from myelin.importers.onnx import proto
from myelin.importers.onnx.model import OnnxModel


@dataclasses.dataclass
class ValueReport:
    """One compared value: the node that computes it, and how far myelin is from ONNX
    Runtime (``error``: the largest ``|a - b| / (atol + rtol |b|)``, above 1 is wrong;
    ``mismatched``: how many elements are wrong; ``worst``: the largest ``|a - b|``)."""
    node: str
    op_type: str
    value: str
    shape: tuple
    error: float
    mismatched: int
    worst: float

    @property
    def wrong(self):
        return self.error > 1


@dataclasses.dataclass
class Report:
    """What :func:`localize` found: ``first`` is the first wrong value (None when none is
    wrong), ``method`` how it was found ("outputs": every value made an output; "cut": cut
    models, the fault being in a fused form), ``values`` every value compared."""
    first: ValueReport
    method: str
    values: list

    def __str__(self):
        lines = [f"{'op':20} {'error':>9} {'wrong':>9}  value"]
        for v in self.values:
            mark = "  <- first wrong" if v is self.first else ""
            lines.append(f"{v.op_type[:20]:20} {v.error:9.3g} {v.mismatched:9d}  {v.value}{mark}")
        if self.first is None:
            lines.append("every value agrees with ONNX Runtime")
        else:
            how = ("with every value an output" if self.method == "outputs" else
                   "only in fused code: each value agrees when it is a graph output, "
                   "found by cutting the model after each node")
            lines.append(f"first wrong: {self.first.value} of node {self.first.node} "
                         f"({self.first.op_type}), {self.first.mismatched} elements wrong, "
                         f"largest difference {self.first.worst:.3g} ({how})")
        return "\n".join(lines)


def compare_values(got, want, rtol, atol):
    """(error, mismatched elements, largest absolute difference) of ``got`` against
    ``want``; error above 1 means some element is outside ``atol + rtol * |want|`` (integer
    and bool values must be equal; NaN must meet NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return float("inf"), max(got.size, want.size), float("inf")
    if got.size == 0:
        return 0.0, 0, 0.0
    if not np.issubdtype(want.dtype, np.floating):
        wrong = got != want
        difference = np.abs(got.astype(np.float64) - want.astype(np.float64))
        worst = float(difference.max())
        return (2.0 if wrong.any() else 0.0), int(wrong.sum()), worst
    got, want = got.astype(np.float64), want.astype(np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore"):
        difference = np.where(same, 0.0, np.abs(got - want))
    ratio = difference / (atol + rtol * np.abs(np.where(np.isfinite(want), want, 0.0)))
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    return float(ratio.max()), int((ratio > 1).sum()), float(difference.max())


def localize(model, feeds, rtol=1e-4, atol=1e-5, base_dir=None, ort_optimizations=True,
             **options):
    """The :class:`Report` of ``model`` (a path, bytes or ModelProto) on ``feeds`` (input
    name -> array); ``options`` go to :class:`~myelin.importers.onnx.model.OnnxModel`.
    ``ort_optimizations=False`` runs ONNX Runtime without its graph optimizations, each
    node as the ONNX spec computes it: its fused int8 kernels (QDQ groups run as QLinearConv
    and the like) requantize in their own arithmetic, which differs from the spec's by a
    quantization step in some elements. Needs ONNX Runtime."""
    try:
        import onnxruntime
    except ImportError:
        raise InputError("localizing needs ONNX Runtime (pip install onnxruntime)") from None
    model = proto.load(model, base_dir)
    nodes = _computed_values(model)
    if not nodes:
        raise InputError("the model's graph has no nodes to compare")

    session_options = onnxruntime.SessionOptions()
    session_options.log_severity_level = 3          # errors only: not its graph warnings
    if not ort_optimizations:
        session_options.graph_optimization_level = \
            onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL

    def ort_values(m, names):
        try:
            session = onnxruntime.InferenceSession(m.SerializeToString(), session_options,
                                                   providers=["CPUExecutionProvider"])
            return dict(zip(names, session.run(names, feeds)))
        except Exception as error:   # ONNX Runtime raises its own types
            raise InputError(f"ONNX Runtime cannot run the model: {error}") from None

    def reports(m, names):
        want = ort_values(m, names)
        typed = _with_outputs(m, names, want)
        got = dict(zip(names, OnnxModel(typed, **options).run(feeds)))
        found = []
        for name in names:
            node = nodes[name]
            found.append(ValueReport(node.name or name, node.op_type, name,
                                     tuple(np.shape(want[name])),
                                     *compare_values(got[name], want[name], rtol, atol)))
        return found

    names = list(nodes)
    values = reports(_with_outputs(model, names), names)
    first = next((v for v in values if v.wrong), None)
    if first is not None:
        return Report(first, "outputs", values)
    outputs = [o.name for o in model.graph.output]
    final = reports(model, outputs) if all(o in nodes for o in outputs) else []
    if not any(v.wrong for v in final):
        return Report(None, "outputs", values)
    return _bisect(model, nodes, reports, values)


def _bisect(model, nodes, reports, values):
    """The first node whose outputs are wrong in the model cut after it (the outputs of
    the last node are wrong: the model's are)."""
    order = list(dict.fromkeys(id(node) for node in nodes.values()))
    by_id = {id(node): node for node in nodes.values()}
    outputs_of = {}
    for name, node in nodes.items():
        outputs_of.setdefault(id(node), []).append(name)
    checked = {}

    def wrong(position):
        node = by_id[order[position]]
        if position not in checked:
            names = outputs_of[id(node)]
            checked[position] = reports(_cut(model, names), names)
        return next((v for v in checked[position] if v.wrong), None)

    low, high = 0, len(order) - 1
    if wrong(high) is None:
        # The model's outputs are wrong but the last node's are not: they come from earlier.
        high = max(i for i, key in enumerate(order)
                   if any(o.name in outputs_of[key] for o in model.graph.output))
    while low < high:
        middle = (low + high) // 2
        if wrong(middle) is not None:
            high = middle
        else:
            low = middle + 1
    first = wrong(low)
    replaced = {v.value: v for position in checked for v in checked[position]}
    return Report(first, "cut", [replaced.get(v.value, v) for v in values])


def _computed_values(model):
    """Node output name -> node, for the main graph's nodes in order (values that are
    tensors; outputs left empty are skipped)."""
    values = {}
    for node in model.graph.node:
        for name in node.output:
            if name:
                values[name] = node
    return values


def _with_outputs(model, names, arrays=None):
    """A copy of ``model`` whose graph outputs are ``names``, of the element types of
    ``arrays`` (name -> array) or of no declared type (for ONNX Runtime to infer)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.output[:]
    for name in names:
        if arrays is None:
            copy.graph.output.append(onnx.ValueInfoProto(name=name))
        else:
            elem_type = onnx.helper.np_dtype_to_tensor_dtype(np.asarray(arrays[name]).dtype)
            copy.graph.output.append(onnx.helper.make_tensor_value_info(name, elem_type, None))
    return copy


def _cut(model, names):
    """A copy of ``model`` that computes only ``names`` (and what they need)."""
    copy = _with_outputs(model, names)
    needed, keep = set(names), []
    for node in reversed(copy.graph.node):
        if needed & set(node.output):
            keep.append(node)
            needed |= {name for name in node.input if name}
            needed |= {name for g in proto.subgraphs(node) for name in proto.free_names(g)}
    del copy.graph.node[:]
    copy.graph.node.extend(reversed(keep))
    return copy


__all__ = ["Report", "ValueReport", "compare_values", "localize"]
