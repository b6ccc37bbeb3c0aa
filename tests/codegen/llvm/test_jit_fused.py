"""Compiled fused ops (Calculate, FusedMatMul) against the float64 reference interpreter."""

import numpy as np
import pytest

import myelin
from jitcheck import PRESETS, poison, random_array, relative_error, run_and_compare
from myelin import reference
from myelin.ops import registry

TOLERANCE = {"float32": 2e-5, "float64": 1e-12}
# (rows, columns) of Calculate domains: odd sizes around the vector widths.
SIZES = [(1, 1), (3, 3), (2, 7), (5, 8), (3, 9), (4, 17), (2, 33), (3, 64), (2, 127)]
# (m, k, n) of FusedMatMul products.
PRODUCTS = [(1, 1, 1), (3, 7, 9), (7, 8, 17), (8, 9, 33), (17, 3, 64), (9, 33, 127),
            (33, 17, 8), (5, 64, 3)]


def _fused(flow, func, op_type, inputs, attrs):
    """Add a fused op to a new function ``func``; inputs are (name, dtype, shape) triples."""
    f = myelin.Builder(flow, func)
    variables = [f.var(name, dtype, shape) for name, dtype, shape in inputs]
    op = flow.op(f.opname(op_type), op_type, f.func, variables, attrs=attrs)
    for i, out in enumerate(registry.infer(op)):
        op.add_output(flow.var(f.varname(f"out{i}"), out.dtype, out.shape))
    return op


def _calculate_cases(m, n):
    """(expr, attrs, input shapes, value range) of Calculate ops over an [m, n] domain."""
    last = {"axis": -1}
    return [
        # Several element-wise outputs; inputs [m,n], [n], [m,1] and a scalar; $0 read twice.
        ("$0=Add(%0,%1);@0=Mul($0,%2);@1=Tanh(Sub($0,%3));@2=Maximum(@0,%0)", {},
         [(m, n), (n,), (m, 1), ()], (-3, 3)),
        # The middle of a softmax: exponentials and their row sums.
        ("@0=Exp(Sub(%0,%1));@1=Sum(@0)", dict(last, keepdims=True), [(m, n), (m, 1)], (-3, 3)),
        # Mean and Max rows, with and without keepdims, axis given as rank - 1.
        ("@0=Mean(Mul(%0,%1));@1=Max(%0)", {"axis": 1, "keepdims": False}, [(m, n), (n,)],
         (0.5, 3)),
        ("@0=Max(Add(%0,%1));@1=Mean(%0);@2=Sigmoid(%0)", dict(last, keepdims=True),
         [(m, n), (m, 1)], (0.5, 3)),
        # A temporary read twice, feeding an element-wise output and two reductions.
        ("$0=Sub(%0,%1);@0=Mul($0,$0);@1=Min($0);@2=Sum(Square($0))", dict(last),
         [(m, n), (1, n)], (0.5, 3)),
        ("@0=Product(%0)", dict(last, keepdims=True), [(m, n)], (0.95, 1.05)),
        # A rank-1 domain reduced without an axis attribute.
        ("@0=Sum(Mul(%0,%1));@1=Add(%0,%1)", {}, [(n,), ()], (0.5, 3)),
        # Batch dimensions before the reduced axis.
        ("@0=Min(Mul(%0,%1));@1=Mul(%0,%1)", dict(last, keepdims=False), [(2, m, n), (m, 1)],
         (-3, 3)),
    ]


def _inputs(flow, ranges, dtype, rng):
    return {name: {var: random_array(rng, dtype, var.shape, *ranges[name])
                   for var in func.ops[0].inputs}
            for name, func in flow.funcs.items()}


def _calculate_flow(dtype):
    flow, ranges = myelin.Flow(), {}
    for m, n in SIZES:
        for expr, attrs, shapes, value_range in _calculate_cases(m, n):
            name = f"f{len(ranges)}"
            _fused(flow, name, "Calculate",
                   [(f"x{i}", dtype, shape) for i, shape in enumerate(shapes)],
                   dict(attrs, expr=expr))
            ranges[name] = value_range
    return flow, ranges


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_calculate(dtype, features):
    flow, ranges = _calculate_flow(dtype)
    net = run_and_compare(flow, _inputs(flow, ranges, dtype, np.random.default_rng()),
                          TOLERANCE[dtype], features)
    assert _kernels(net, flow) == {"Calculate"}


def _kernels(net, flow):
    """The kernel names of the compiled steps of every function."""
    return {step.kernel.kernel_name(step) for name in flow.funcs for step in net.cell(name).steps}


@pytest.mark.parametrize("dtype", ["int32", "uint32"])
def test_calculate_int(dtype):
    # Unsigned values above 2^31 check that Max and Min compare without a sign.
    value_range = (0, 2**31 + 2**30) if dtype == "uint32" else (-100, 100)
    recipes = {"int32": ["$0=Mul(%0,%1);@0=Add($0,%2);@1=Sum($0);@2=Max(@0)",
                         "@0=Sub(Mul(%0,%1),%2);@1=Neg(%0)"],
               "uint32": ["@0=Max(Maximum(%0,%1));@1=Min(Minimum(%0,%2))"]}[dtype]
    flow, ranges = myelin.Flow(), {}
    for m, n in SIZES:
        for expr in recipes:
            name = f"f{len(ranges)}"
            _fused(flow, name, "Calculate",
                   [("x", dtype, (m, n)), ("y", dtype, (n,)), ("z", dtype, (m, 1))],
                   {"expr": expr, "axis": -1})
            ranges[name] = value_range
    run_and_compare(flow, _inputs(flow, ranges, dtype, np.random.default_rng()), 0,
                    exact=True)


def _matmul_cases(m, k, n):
    """(expr, attrs, input shapes) of FusedMatMul ops with an [m, n] product."""
    return [
        ("@0=Relu(Add(%0,%1))", {}, [(m, k), (k, n), (n,)]),
        ("@0=Add(Mul(%0,%2),%1)", {}, [(m, k), (k, n), (m, n), ()]),
        ("$0=Add(%0,%1);@0=Sub(Mul($0,Sigmoid($0)),%2)", {"transpose_b": True},
         [(m, k), (n, k), (n,), (m, 1)]),
        ("@0=Tanh(Add(%0,%1))", {"transpose_a": True}, [(k, m), (k, n), (1, n)]),
        ("@0=Add(Add(%0,%1),%2)", {}, [(2, m, k), (2, k, n), (n,), (2, m, n)]),
        ("@0=Maximum(Add(%0,%1),%2)", {"transpose_b": True},
         [(3, m, k), (n, k), (m, n), (3, 1, 1)]),
        (GELU, {}, [(m, k), (k, n), (n,), (), (), ()]),
    ]


# A costly epilogue (GELU with erf, after a bias), which the kernels call as a function.
GELU = "$0=Add(%0,%1);@0=Mul(Mul($0,Add(Erf(Mul($0,%2)),%3)),%4)"


@pytest.mark.parametrize("features", PRESETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_matmul(dtype, features):
    flow, count = myelin.Flow(), 0
    for m, k, n in PRODUCTS:
        for expr, attrs, shapes in _matmul_cases(m, k, n):
            _fused(flow, f"f{count}", "FusedMatMul",
                   [(f"x{i}", dtype, shape) for i, shape in enumerate(shapes)],
                   dict(attrs, expr=expr))
            count += 1
    ranges = {name: (-2, 2) for name in flow.funcs}
    # (a floor of 1, the inputs' scale: a 1x1 product whose epilogue cancels it, as SiLU(x) - c
    # may, has a norm near 0 and only its absolute error to show)
    net = run_and_compare(flow, _inputs(flow, ranges, dtype, np.random.default_rng()),
                          TOLERANCE[dtype], features, floor=1.0)
    assert _kernels(net, flow) == {"FusedMatMul"}


@pytest.mark.parametrize("n", [127, 128])
def test_a_costly_epilogue_is_not_emitted_at_every_store(n):
    """A GELU's erf is emitted once in a loop over a whole tile's vectors, and as one function
    that the stores of a partial vector call; not at each of a tile's stores (where it made
    a kernel five times as large): the kernel's IR is hardly larger than with a ReLU."""
    sizes = {}
    for expr, extras in ((GELU, [(), (), ()]), ("@0=Relu(Add(%0,%1))", [])):
        flow = myelin.Flow()
        shapes = [(9, 33), (33, n), (n,)] + extras
        _fused(flow, "f", "FusedMatMul", [(f"x{i}", "float32", shape)
                                          for i, shape in enumerate(shapes)], {"expr": expr})
        sizes[expr] = len(myelin.Compiler(cache=False, dump=True).compile(flow).dumps["llvm"])
    assert sizes[GELU] < 1.5 * sizes["@0=Relu(Add(%0,%1))"]


def test_unsupported_calculate_is_rejected():
    flow = myelin.Flow()
    cases = [
        ("@0=Sum(%0)", {"axis": 0}, [(4, 5)]),                  # not the last axis
        ("@0=Sum(%0)", {}, [(4, 5)]),                           # all axes of a 2-D domain
        ("@0=Sum(%0);@1=Add(@0,%0)", {"axis": -1, "keepdims": True}, [(4, 5)]),  # read again
        ("@0=Exp(Sum(%0))", {"axis": -1}, [(4, 5)]),            # not a trailing part
        ("@0=Sum(%1)", {"axis": -1}, [(4, 5), (4, 1)]),         # argument not of the domain
    ]
    for i, (expr, attrs, shapes) in enumerate(cases):
        _fused(flow, f"f{i}", "Calculate",
               [(f"x{j}", "float32", shape) for j, shape in enumerate(shapes)],
               dict(attrs, expr=expr))
    with pytest.raises(myelin.UnsupportedOpError) as error:
        myelin.Compiler().compile(flow)
    assert len(error.value.ops) == len(cases)


@pytest.mark.parametrize("features", ["host", "sse"])
def test_fused_in_place(features):
    """Fused ops whose inputs die at them: outputs take their space only where that is safe."""
    flow, (m, n) = myelin.Flow(), (3, 17)
    f = myelin.Builder(flow, "f")
    x, v, w = (f.var(name, "float32", shape) for name, shape in [("x", (m, n)), ("v", (n,)),
                                                                 ("w", (n, n))])
    a, b = f.var("a", "float32", (m, 5)), f.var("b", "float32", (5, n))
    same = f.op("Calculate", [f.op("Exp", [x]), v],
                attrs={"expr": "@0=Mul(%0,%1);@1=Sum(%0)", "axis": -1})
    # The [n] input is read by every row: the [n] row sums must not overwrite it.
    rows = f.op("Calculate", [w, f.op("Exp", [v])],
                attrs={"expr": "@0=Sum(Mul(%0,%1))", "axis": -1})
    product = f.op("FusedMatMul", [a, b, f.op("Exp", [x])], attrs={"expr": "@0=Add(%0,%1)"})
    for value in same + [rows, product]:
        f.op("Neg", [value])
    rng = np.random.default_rng()
    inputs = {var: random_array(rng, "float32", var.shape, -1, 1) for var in (x, v, w, a, b)}
    # Without graph passes, which would fuse the producers into the fused ops.
    net = myelin.Compiler(features=features, opt_level=0).compile(flow)
    data = net.cell("f").instance()
    poison(data)
    for var, value in inputs.items():
        data[var] = value
    data.compute()
    for name, want in reference.run(flow, "f", inputs).items():
        assert relative_error(np.asarray(data[name]), want) <= TOLERANCE["float32"], name
    shared = {step.outputs[0].name for step in net.cell("f").steps
              if step.outputs[0].shares is not None}
    assert shared >= {same[0].name, product.name} and rows.name not in shared, shared
