"""The gradient-check cases: every op type with a gradient rule, over several shapes (sizes
that are not multiples of the vector width) and broadcasts, plus composites (softmax, layer
norm, ...) and graphs that sum several contributions.

Each entry of :data:`CASES` is a :class:`gradcheck.Case`; inputs are drawn inside the op's
domain, away from points where it is not differentiable.
"""

import numpy as np

import myelin
from gradcheck import Case, Input
from jitcheck import registry_domains

# Element-wise ops with a gradient and no attributes: the registry's (low, high) of their
# inputs (of each input for binary ops).
UNARY = {op_type: domain for op_type, domain in registry_domains(1).items()
         if myelin.ops.lookup(op_type).gradient and not myelin.ops.lookup(op_type).attrs}
UNARY["Dropout"] = (-3, 3)
BINARY = {op_type: domain for op_type, domain in registry_domains(2).items()
          if myelin.ops.lookup(op_type).gradient and not myelin.ops.lookup(op_type).attrs}
# Shapes of the two inputs of a binary op: equal, and broadcast in several ways.
BROADCASTS = [((2, 9), (2, 9)), ((3, 7), (7,)), ((5, 1), (1, 6)), ((), (9,)),
              ((4, 1, 3), (2, 3))]


def _unary(op_type, low, high):
    return Case(op_type, [Input("x", (7,), low, high), Input("z", (3, 11), low, high)],
                lambda b, x, z: (b.op(op_type, [x]), b.op(op_type, [z])))


def _binary(op_type, ranges):
    inputs = []
    for i, shapes in enumerate(BROADCASTS):
        inputs += [Input(f"x{i}", shapes[0], *ranges[0]), Input(f"y{i}", shapes[1], *ranges[1])]

    def build(b, *xs):
        return tuple(b.op(op_type, [xs[i], xs[i + 1]]) for i in range(0, len(xs), 2))
    return Case(op_type, inputs, build)


def _ints(b, values):
    return b.const(np.array(values), "int32")


CASES = [_unary(t, *r) for t, r in UNARY.items()] + [_binary(t, r) for t, r in BINARY.items()]
CASES += [
    Case("Gelu", [Input("x", (13,), -3, 3), Input("z", (2, 9), -3, 3)],
         lambda b, x, z: (b.gelu(x), b.gelu(z, approximate="tanh"))),
    Case("QuickGelu", [Input("x", (13,), -3, 3), Input("z", (2, 9), -3, 3)],
         lambda b, x, z: (b.quick_gelu(x), b.quick_gelu(z, alpha=1.0))),
    Case("Cast", [Input("x", (3, 5))],     # through float32 and back: linear, so a wide eps
         lambda b, x: b.cast(b.mul(b.cast(x, "float32"), 3.0), "float64"),
         eps=1e-2, tolerance=1e-5),
    Case("Cond", [Input("a", (3, 1)), Input("x", (1, 7)), Input("y", (7,)),
                  Input("p", (2, 5)), Input("q", (2, 5))],
         lambda b, a, x, y, p, q: (b.cond(b.greater(a, 0.0), x, y),
                                   b.cond(b.less(p, q), p, q))),
    Case("Select", [Input("a", (3, 7)), Input("x", (7,))],
         lambda b, a, x: b.select(b.greater(a, 0.0), x)),
    Case("Sum", [Input("x", (2, 3, 5)), Input("y", (4, 9))],
         lambda b, x, y: (b.sum(x), b.sum(x, 1), b.sum(x, [0, 2], keepdims=True),
                          b.sum(y, -1))),
    Case("Mean", [Input("x", (2, 3, 5))],
         lambda b, x: (b.mean(x), b.mean(x, -1), b.mean(x, [0, 1], keepdims=True))),
    Case("Max", [Input("x", (2, 3, 5))], lambda b, x: (b.max(x), b.max(x, 1, keepdims=True))),
    Case("Min", [Input("x", (2, 3, 5))], lambda b, x: (b.min(x), b.min(x, [0, 2]))),
    Case("MatMul", [Input("a", (3, 5)), Input("b", (5, 4)), Input("at", (5, 3)),
                    Input("bt", (4, 5))],
         lambda b, a, w, at, wt: (b.matmul(a, w), b.matmul(at, w, transpose_a=True),
                                  b.matmul(a, wt, transpose_b=True),
                                  b.matmul(at, wt, transpose_a=True, transpose_b=True))),
    Case("BatchMatMul", [Input("a", (2, 3, 5)), Input("b", (5, 4)), Input("c", (2, 1, 3, 5)),
                         Input("d", (3, 2, 5))],
         lambda b, a, w, c, d: (b.matmul(a, w), b.matmul(c, d, transpose_b=True))),
    Case("Transpose", [Input("x", (2, 3, 5)), Input("y", (3, 4))],
         lambda b, x, y: (b.transpose(x, [2, 0, 1]), b.transpose(y))),
    Case("Reshape", [Input("x", (3, 4))],
         lambda b, x: (b.reshape(x, [2, 6]), b.reshape(b.exp(x), [-1]))),
    Case("Concat", [Input("x", (2, 3)), Input("y", (2, 1)), Input("z", (2, 4))],
         lambda b, x, y, z: (b.concat([x, y, z], axis=1), b.concat([b.sin(x), x], axis=0))),
    Case("Split", [Input("x", (6, 5))],    # part 1 reaches no float output: zeros there
         lambda b, x: (lambda p: (b.mul(p[0], p[2]), b.cast(p[1], "int32")))(
             b.split(x, 3, axis=0))),
    Case("Slice", [Input("x", (4, 7))],
         lambda b, x: (b.slice(x, [1, 2], [2, 3]), b.slice(x, [0, 5], [3, -1]))),
    Case("Pad", [Input("x", (3, 5)), Input("v", ())],
         lambda b, x, v: (b.op("Pad", [x], attrs={"pads": [1, 0, 2, 1]}),
                          b.op("Pad", [x, v], attrs={"pads": [-1, 1, 0, -2]}))),
    Case("Tile", [Input("x", (2, 3))], lambda b, x: b.op("Tile", [x], attrs={"repeats": [2, 3]})),
    Case("BroadcastTo", [Input("x", (3, 1))],
         lambda b, x: b.op("BroadcastTo", [x], attrs={"shape": [2, 3, 4]})),
    Case("CumSum", [Input("x", (3, 5))],
         lambda b, x: (b.op("CumSum", [x], attrs={"axis": 1}),
                       b.op("CumSum", [x], attrs={"axis": 0, "exclusive": True}),
                       b.op("CumSum", [x], attrs={"axis": -1, "reverse": True}))),
    Case("Gather", [Input("p", (5, 3)), Input("q", (4, 3)), Input("oov", (3,)),
                    Input("r", (2, 6, 3))],
         lambda b, p, q, oov, r: (b.gather(p, _ints(b, [[0, 2, 2], [4, 0, 1]])),
                                  b.gather(q, _ints(b, [0, 7, -1, 2, 0]), oov),
                                  b.op("Gather", [r, _ints(b, [[1, 5], [1, 0]])],
                                       attrs={"axis": 1}),
                                  b.op("Gather", [r, _ints(b, 4)], attrs={"axis": 1}))),
    Case("GatherSum", [Input("p", (6, 4)), Input("q", (5, 2, 3))],
         lambda b, p, q: (b.gather_sum(p, _ints(b, [[0, 2, 2, -1], [5, 1, -1, 3]])),
                          b.gather_sum(q, _ints(b, [3, 3, 0])))),
    Case("GatherAvg", [Input("p", (6, 4))],
         lambda b, p: (b.gather_avg(p, _ints(b, [[0, 2, 2, -1], [5, 1, 4, 3], [-1, 0, 0, 0]])),
                       b.gather_avg(p, _ints(b, [1, 1, 0])))),
    Case("GatherElements", [Input("x", (3, 4))],
         lambda b, x: b.op("GatherElements", [x, _ints(b, [[2, 0, 1, 2], [2, 2, 0, -1]])])),
    Case("GatherND", [Input("x", (3, 4, 2))],
         lambda b, x: b.op("GatherND", [x, _ints(b, [[0, 1], [2, 3], [0, 1]])])),
    Case("TopK", [Input("x", (3, 7))],
         lambda b, x: b.op("TopK", [x], attrs={"k": 3})[0]),
    Case("Trilu", [Input("x", (4, 5))],
         lambda b, x: (b.op("Trilu", [x], attrs={"k": 1}),
                       b.op("Trilu", [x], attrs={"upper": False}))),
    Case("Conv", [Input("x", (2, 3, 7, 6)), Input("w", (4, 3, 3, 2)), Input("bias", (4,)),
                  Input("u", (2, 4, 5, 5)), Input("v", (6, 2, 2, 3)), Input("s", (2, 3, 9)),
                  Input("k", (2, 3, 3))],
         lambda b, x, w, bias, u, v, s, k: (
             b.op("Conv", [x, w, bias], attrs={"strides": [2, 1], "pads": [1, 0, 1, 1],
                                               "dilations": [1, 2]}),
             b.op("Conv", [u, v], attrs={"group": 2, "auto_pad": "SAME_UPPER",
                                         "strides": [2, 2]}),
             b.op("Conv", [s, k], attrs={"strides": [2]}))),
    Case("GlobalAveragePool", [Input("x", (2, 3, 4, 5))],
         lambda b, x: b.op("GlobalAveragePool", [x])),
    Case("Softmax", [Input("x", (3, 7))], lambda b, x: (b.softmax(x), b.log_softmax(x))),
    Case("LayerNorm", [Input("x", (3, 7)), Input("gamma", (7,)), Input("beta", (7,))],
         lambda b, x, gamma, beta: b.layer_norm(x, gamma, beta)),
    Case("Norm", [Input("x", (9,), 0.5, 2)], lambda b, x: (b.norm(x), b.normalize(x))),
    Case("SharedUses", [Input("x", (3, 5)), Input("y", (5,))],   # several contributions
         lambda b, x, y: b.add(b.mul(x, b.exp(x)), b.mul(b.add(x, y), y))),
    Case("Learnable", [Input("x", (4, 5)), Input("W", (5, 3), learnable=True),
                       Input("bias", (3,), learnable=True)],
         lambda b, x, w, bias: b.tanh(b.add(b.matmul(x, w), bias))),
]
