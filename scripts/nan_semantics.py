"""How NaN and infinities go through ops that compare: myelin against ONNX Runtime (CPU) and
ONNX's NumPy reference implementation (``onnx.reference``), one ONNX node at a time.

    python scripts/nan_semantics.py            # a Markdown table, one row per op
    python scripts/nan_semantics.py --values   # also the differing values

Inputs are rows of numbers with NaN, +inf, -inf and signed zeros in various places. A row
reads "same" where the outputs are equal (NaN equal to NaN, floats to a relative 1e-6), else
where they first differ.
The README's NaN section summarizes this script's output.
"""

import argparse
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from onnx.reference import ReferenceEvaluator

import myelin.onnx

NAN, INF = np.nan, np.inf
X = np.array([[NAN, 1, 2, 3, 4, 5, 6, 7, 8], [1, 2, NAN, 3, 4, 5, 6, 7, 8],
              [1, 2, 3, 4, 5, 6, 7, 8, NAN], [INF, -INF, 1, 2, 3, -0.0, 0.0, 6, 7],
              [-INF] * 9, [NAN] * 9, [9, NAN, INF, 1, 1, 1, 1, 1, 1],
              [-1.5, 0.5, -0.0, NAN, -INF, 2, 3, -3, 0]], np.float32)
Y = np.roll(X, 3, axis=1)[::-1].copy()
AXES = np.array([1], np.int64)
K = np.array([3], np.int64)

# (row name, ONNX op, inputs, outputs, attributes, opset)
CASES = [
    ("Relu", "Relu", {"x": X}, 1, {}, 18),
    ("LeakyRelu", "LeakyRelu", {"x": X}, 1, {"alpha": 0.1}, 18),
    ("PRelu", "PRelu", {"x": X, "s": np.full(9, 0.2, np.float32)}, 1, {}, 18),
    ("Elu", "Elu", {"x": X}, 1, {}, 18),
    ("Selu", "Selu", {"x": X}, 1, {}, 18),
    ("Celu", "Celu", {"x": X}, 1, {}, 18),
    ("HardSigmoid", "HardSigmoid", {"x": X}, 1, {}, 18),
    ("HardSwish", "HardSwish", {"x": X}, 1, {}, 18),
    ("ThresholdedRelu", "ThresholdedRelu", {"x": X}, 1, {}, 18),
    ("Shrink", "Shrink", {"x": X}, 1, {}, 18),
    ("Abs", "Abs", {"x": X}, 1, {}, 18),
    ("Sign", "Sign", {"x": X}, 1, {}, 18),
    ("Clip", "Clip", {"x": X, "lo": np.array(-1, np.float32), "hi": np.array(1, np.float32)},
     1, {}, 18),
    ("Clip, NaN bound", "Clip",
     {"x": X, "lo": np.array(NAN, np.float32), "hi": np.array(1, np.float32)}, 1, {}, 18),
    ("Max (variadic)", "Max", {"x": X, "y": Y}, 1, {}, 18),
    ("Min (variadic)", "Min", {"x": X, "y": Y}, 1, {}, 18),
    ("Greater", "Greater", {"x": X, "y": Y}, 1, {}, 18),
    ("Less", "Less", {"x": X, "y": Y}, 1, {}, 18),
    ("GreaterOrEqual", "GreaterOrEqual", {"x": X, "y": Y}, 1, {}, 18),
    ("Equal", "Equal", {"x": X, "y": Y}, 1, {}, 18),
    ("Where", "Where", {"c": X > 0, "x": X, "y": Y}, 1, {}, 18),
    ("ReduceMax", "ReduceMax", {"x": X, "a": AXES}, 1, {"keepdims": 0}, 18),
    ("ReduceMin", "ReduceMin", {"x": X, "a": AXES}, 1, {"keepdims": 0}, 18),
    ("ReduceSum", "ReduceSum", {"x": X, "a": AXES}, 1, {"keepdims": 0}, 18),
    ("ArgMax", "ArgMax", {"x": X}, 1, {"axis": 1}, 18),
    ("ArgMin", "ArgMin", {"x": X}, 1, {"axis": 1}, 18),
    ("ArgMax, last index", "ArgMax", {"x": X}, 1, {"axis": 1, "select_last_index": 1}, 18),
    ("TopK", "TopK", {"x": X, "k": K}, 2, {"axis": 1}, 18),
    ("TopK, smallest", "TopK", {"x": X, "k": K}, 2, {"axis": 1, "largest": 0}, 18),
    ("Softmax", "Softmax", {"x": X}, 1, {"axis": 1}, 18),
    ("MaxPool", "MaxPool", {"x": X.reshape(1, 1, 8, 9)}, 1, {"kernel_shape": [2, 2]}, 18),
    ("MaxPool 1x3 / 3", "MaxPool", {"x": X.reshape(1, 1, 8, 9)}, 1,
     {"kernel_shape": [1, 3], "strides": [1, 3]}, 18),
    ("MaxPool, Indices", "MaxPool", {"x": X.reshape(1, 1, 8, 9)}, 2,
     {"kernel_shape": [1, 3], "strides": [1, 3]}, 18),
    ("GlobalMaxPool", "GlobalMaxPool", {"x": X.reshape(1, 8, 9, 1)}, 1, {}, 18),
]


def _model(op, inputs, outputs, attrs, opset):
    def info(name, array):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype),
                                             list(array.shape))
    names = [f"out{i}" for i in range(outputs)]
    node = helper.make_node(op, list(inputs), names, **attrs)
    graph = helper.make_graph([node], op, [info(k, v) for k, v in inputs.items()],
                              [helper.make_empty_tensor_value_info(n) for n in names])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    for output in model.graph.output:      # (ONNX Runtime needs the outputs' types)
        output.type.CopyFrom(inferred[output.name].type)
    return model


def _differ(a, b):
    """None if ``a`` equals ``b`` (NaN equal to NaN, floats to a relative 1e-6), else (index,
    a value, b value)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return ("shape", a.shape, b.shape)
    same = (np.isclose(a, b, rtol=1e-6, atol=1e-30, equal_nan=True) if a.dtype.kind == "f"
            else a == b)
    if same.all():
        return None
    index = tuple(int(i) for i in np.argwhere(~same)[0])
    return (index, a[index], b[index])


def _run(name, op, inputs, outputs, attrs, opset):
    model = _model(op, inputs, outputs, attrs, opset)
    ours = myelin.onnx.load(model).run(inputs)
    theirs = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = ReferenceEvaluator(model).run(None, inputs)
    return ([_differ(m, o) for m, o in zip(ours, theirs)],
            [_differ(m, r) for m, r in zip(ours, reference)])


def _cell(differences, values):
    found = [d for d in differences if d is not None]
    if not found:
        return "same"
    index, ours, theirs = found[0]
    return f"differs at {list(index)}: {ours} vs {theirs}" if values else "differs"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", action="store_true", help="show the first difference")
    args = parser.parse_args()
    print("| op | myelin vs ONNX Runtime | myelin vs onnx.reference (NumPy) |")
    print("|---|---|---|")
    for case in CASES:
        runtime, reference = _run(*case)
        print(f"| {case[0]} | {_cell(runtime, args.values)} | {_cell(reference, args.values)} |")


if __name__ == "__main__":
    main()
