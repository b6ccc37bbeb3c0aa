"""Generated CUDA kernels run in host emulation against the float64 reference: every
element-wise op type, reductions at every thread width, fused Calculate recipes, matrix
products, data movement, views and Assign.

Each suite is one flow of many small functions, so one module (one g++ and, in
:mod:`test_nvrtc`, one NVRTC compile per architecture) covers many kernels. :data:`SUITES`
names them all; :mod:`test_nvrtc` compiles the very same modules. Inputs are fresh random
values each run, in the domains the CPU back end's tests use.
"""

import functools
import itertools

import numpy as np
import pytest

import emulator
import myelin
import test_jit_elementwise as cpu_elementwise
import test_jit_fused as cpu_fused
import test_jit_indexing as cpu_indexing
import test_jit_reduction as cpu_reduction
from jitcheck import random_array
from myelin.codegen.cuda import expressions, planner
from myelin.codegen.cuda.kernels import GemmCall, KernelCode

# 5 x 333 elements: more than the 1024 threads the emulated device keeps resident, so
# grid-stride loops take several rounds.
SHAPE = (5, 333)
TOLERANCE = {"float16": 1e-3, "float32": 3e-6, "float64": 1e-12}
FLOAT16_OPS = ["Add", "Mul", "Div", "Maximum", "Exp", "Tanh", "Sqrt", "Neg", "Sigmoid", "Gelu"]
INT_DTYPES = ["int8", "int64", "uint8", "uint32"]
BITWISE = ["BitwiseAnd", "BitwiseOr", "BitwiseXor"]
# Reduction shapes: units of 1 thread, a warp, and blocks of 128 and 256 threads (more rows
# than the emulated device's resident blocks), reduced over the CPU's axis choices; the
# float32 suite takes all of them, the others fewer.
REDUCTION_SHAPES = [(7,), (4, 33), (17, 8), (2, 3, 127), (2, 9, 4, 5), (20, 300), (6, 5000)]
FEWER_REDUCTION_SHAPES = [(7,), (4, 33), (20, 300), (6, 5000)]
# (rows, columns) of Calculate domains: rows of 1 thread, a warp, and blocks.
CALCULATE_SIZES = [(1, 1), (3, 5), (4, 33), (2, 127), (20, 300), (2, 1000)]


class Suite:
    """A flow of many functions with the inputs and tolerance of each; ``check(plan)``, if
    set, asserts what the plan must contain."""

    def __init__(self, tolerance=0.0):
        self.flow = myelin.Flow()
        self.feeds = {}
        self.tolerances = {}
        self.default = tolerance
        self.check = None

    def function(self, name=None, feed=None, tolerance=None):
        """A Builder of a new function whose inputs get ``feed(rng, var)`` (default, or where
        it returns None: random_array in [-3, 3])."""
        name = name or f"f{len(self.feeds)}"
        self.feeds[name] = feed
        self.tolerances[name] = self.default if tolerance is None else tolerance
        return myelin.Builder(self.flow, name)

    def op(self, op_type, inputs, attrs=None, feed=None, tolerance=None):
        """A function of one ``op_type`` op on variables made of (name, dtype, shape)."""
        f = self.function(f"{op_type}{len(self.feeds)}", feed, tolerance)
        return f.op(op_type, [f.var(*spec) for spec in inputs], attrs=attrs)

    def inputs(self, rng):
        """Fresh values of every function's inputs (the variables no op produces)."""
        result = {}
        for name, feed in self.feeds.items():
            values = result[name] = {}
            for op in self.flow.funcs[name].ops:
                for var in op.inputs:
                    if var.producer is None and not var.constant and var not in values:
                        value = feed(rng, var) if feed else None
                        values[var] = (random_array(rng, var.dtype, var.shape)
                                       if value is None else value)
        return result


def uniform(low, high, **by_name):
    """A feed of random_array values in [low, high), or in by_name[v] for variable v."""
    def feed(rng, var):
        lo, hi = by_name.get(var.name.split("/")[-1], (low, high))
        return random_array(rng, var.dtype, var.shape, lo, hi)
    return feed


def with_nans(rng, var):
    """Values in [-3, 3], every 7th one NaN."""
    values = random_array(rng, var.dtype, var.shape)
    values.reshape(-1)[rng.integers(7)::7] = np.nan
    return values


def rounded(rng, var):
    """Few distinct values, so that comparisons meet equal pairs often."""
    return np.round(random_array(rng, var.dtype, var.shape))


def broadcast_pairs(every=False):
    """(x, y) shapes: equal, and (``every``) the CPU's broadcasts both ways round, or one of
    them (the kernel's broadcasting does not depend on the op)."""
    pairs = cpu_elementwise.BROADCASTS if every else cpu_elementwise.BROADCASTS[-1:]
    return [(SHAPE, SHAPE)] + pairs + [(y, x) for x, y in pairs]


def kernel_items(plan):
    return [item for cell in plan.cells for _, items in cell.work for item in items]


SUITES = {}


def suite(*params):
    """Register a suite builder in :data:`SUITES`, once per parameter."""
    def register(build):
        for param in params:
            SUITES[f"{build.__name__}-{param}"] = functools.partial(build, param)
        return build
    return register


@suite("float32", "float64")
def float_ops(dtype):
    tolerance = TOLERANCE[dtype]
    s = Suite(tolerance)
    for op_type, (low, high) in cpu_elementwise.UNARY_FLOAT.items():
        loose = op_type in ("Acosh", "Asech", "Acoth")
        s.op(op_type, [("x", dtype, SHAPE)], feed=uniform(low, high),
             tolerance=tolerance * 10 if loose else None)
    s.op("Gelu", [("x", dtype, SHAPE)], {"approximate": "tanh"}, uniform(-6, 6))
    for op_type, (x_range, y_range) in cpu_elementwise.BINARY_FLOAT.items():
        for xs, ys in broadcast_pairs(op_type == "Add"):
            s.op(op_type, [("x", dtype, xs), ("y", dtype, ys)],
                 feed=uniform(*x_range, y=y_range),
                 tolerance=tolerance * 10 if op_type == "Pow" else None)
    for op_type in ("Minimum", "Maximum"):
        s.op(op_type, [("x", dtype, SHAPE), ("y", dtype, SHAPE)], feed=with_nans)
    s.op("Sign", [("x", dtype, SHAPE)], feed=with_nans)
    for op_type in cpu_elementwise.COMPARISONS:
        for xs, ys in broadcast_pairs()[:2]:
            s.op(op_type, [("x", dtype, xs), ("y", dtype, ys)], feed=rounded)
    for fmod in (0, 1):
        s.op("Mod", [("x", dtype, SHAPE), ("y", dtype, SHAPE[1:])], {"fmod": fmod},
             cpu_indexing._elementwise_feed)
    s.op("IsNaN", [("x", dtype, SHAPE)], feed=cpu_indexing._elementwise_feed)
    for negative, positive in itertools.product((0, 1), repeat=2):
        s.op("IsInf", [("x", dtype, SHAPE)],
             {"detect_negative": negative, "detect_positive": positive},
             cpu_indexing._elementwise_feed)
    condition = ("c", "bool", SHAPE)
    s.op("Cond", [condition, ("x", dtype, SHAPE), ("y", dtype, SHAPE[1:])])
    s.op("Select", [condition, ("x", dtype, SHAPE)])
    for target in ["int32", "int64", "uint8", "bool", "float16",
                   "float64" if dtype == "float32" else "float32"]:
        s.op("Cast", [("x", dtype, SHAPE)], {"dtype": target},
             uniform(0 if target[0] == "u" else -100, 100),
             tolerance=TOLERANCE.get(target, 1e-7))
    return s


@suite("float16")
def float16_ops(dtype):
    s = Suite(TOLERANCE[dtype])
    ranges = {**cpu_elementwise.UNARY_FLOAT, **cpu_elementwise.BINARY_FLOAT}
    for op_type in FLOAT16_OPS:
        if op_type in cpu_elementwise.BINARY_FLOAT:
            x_range, y_range = ranges[op_type]
            for xs, ys in broadcast_pairs():
                s.op(op_type, [("x", dtype, xs), ("y", dtype, ys)],
                     feed=uniform(*x_range, y=y_range))
        else:
            s.op(op_type, [("x", dtype, SHAPE)], feed=uniform(*ranges[op_type]))
    s.op("Less", [("x", dtype, SHAPE), ("y", dtype, SHAPE)], feed=rounded)
    s.op("IsNaN", [("x", dtype, SHAPE)], feed=cpu_indexing._elementwise_feed)
    for target in ["float32", "int32"]:
        s.op("Cast", [("x", dtype, SHAPE)], {"dtype": target})
    s.op("Cast", [("x", "float32", SHAPE)], {"dtype": dtype})
    return s


@suite(*INT_DTYPES)
def int_ops(dtype):
    """Integer arithmetic wraps (values up to 50, so int8 products overflow); division and
    remainders meet zero divisors; bit operations and shifts take the whole range."""
    s = Suite()
    feed = cpu_indexing._elementwise_feed
    for op_type in cpu_elementwise.UNARY_INT + ["BitwiseNot"]:
        s.op(op_type, [("x", dtype, SHAPE)], feed=feed)
    binary = cpu_elementwise.BINARY_INT + cpu_elementwise.COMPARISONS + BITWISE
    for op_type in binary:
        for xs, ys in broadcast_pairs()[:2]:
            s.op(op_type, [("x", dtype, xs), ("y", dtype, ys)], feed=feed)
    for fmod in (0, 1):
        s.op("Mod", [("x", dtype, SHAPE), ("y", dtype, SHAPE[1:])], {"fmod": fmod}, feed)
    for direction in ("LEFT", "RIGHT"):
        s.op("BitShift", [("x", dtype, SHAPE), ("y", dtype, SHAPE)], {"direction": direction},
             feed)
    for target in ["float32", "float64", "bool", "int8", "uint32"]:
        s.op("Cast", [("x", dtype, SHAPE)], {"dtype": target}, feed)
    return s


@suite("bool")
def bool_ops(dtype):
    s = Suite()
    for op_type in ["And", "Or", "Xor", "Equal", "NotEqual"]:
        for xs, ys in broadcast_pairs():
            s.op(op_type, [("x", dtype, xs), ("y", dtype, ys)])
    s.op("Not", [("x", dtype, SHAPE)])
    s.op("Cond", [("c", dtype, SHAPE), ("x", dtype, SHAPE), ("y", dtype, SHAPE)])
    s.op("Cast", [("x", dtype, SHAPE)], {"dtype": "float32"})
    return s


@suite("float32", "float64", "float16", "int32", "bool")
def reductions(dtype):
    """Every reduction type of ``dtype``, keepdims alternating."""
    op_types = {"int32": ["Sum", "Max", "Min", "Product"], "bool": ["All", "Any", "Count"],
                "float16": ["Sum", "Max", "Mean"]}.get(dtype, cpu_reduction.FLOAT_OPS)
    s = Suite()
    for op_type in op_types:
        # Products stay near 1; sums of positive values are well conditioned.
        low, high = {"Product": (0.9, 1.1), "Sum": (0.5, 3), "Mean": (0.5, 3)}.get(
            op_type, (-3, 3))
        if dtype == "int32":
            low, high = (-2, 3) if op_type == "Product" else (-1000, 1000)
        tolerance = TOLERANCE.get(dtype, 0) * {"Sum": 4, "Mean": 4, "Product": 10}.get(op_type, 1)
        for shape in REDUCTION_SHAPES if dtype == "float32" else FEWER_REDUCTION_SHAPES:
            for axis in cpu_reduction._axes_cases(len(shape)):
                f = s.function(feed=uniform(low, high), tolerance=tolerance)
                keepdims = len(s.feeds) % 2 == 0 if axis is not None else None
                f.reduce(op_type, f.var("x", dtype, shape), axis=axis, keepdims=keepdims)

    def check(plan):
        widths = {item.launch.unit_threads for item in kernel_items(plan)
                  if item.name.startswith(f"k_{op_types[0]}_")}
        assert widths == {1, 32, 128, 256}
    s.check = check
    return s


@suite("float32", "float64")
def calculate(dtype):
    """The CPU's Calculate recipes (several outputs, broadcasts, row reductions) and the
    Builder's softmax and layer norm, over rows of every thread width."""
    s = Suite(TOLERANCE[dtype] * 10)
    for m, n in CALCULATE_SIZES:
        for expr, attrs, shapes, (low, high) in cpu_fused._calculate_cases(m, n):
            name = f"c{len(s.feeds)}"
            s.function(name, uniform(low, high))
            cpu_fused._fused(s.flow, name, "Calculate",
                             [(f"x{i}", dtype, shape) for i, shape in enumerate(shapes)],
                             dict(attrs, expr=expr))
        f = s.function(feed=uniform(-5, 5))
        f.softmax(f.var("x", dtype, [m, n]), name="y")
        f = s.function()
        x = f.var("x", dtype, [m, n])
        f.layer_norm(x, f.var("gamma", dtype, [n]), f.var("beta", dtype, [n]), name="y")
        f = s.function()
        x, b = f.var("x", dtype, [m, n]), f.var("b", dtype, [n])
        f.tanh(f.mul(f.add(f.exp(x), b), x), name="y")

    def check(plan):
        rows = [item for item in kernel_items(plan) if item.name.startswith("k_Calculate")]
        assert {item.launch.unit_threads for item in rows} == {1, 32, 128}
        assert any("__syncthreads" in item.source for item in rows)
    s.check = check
    return s


MATMUL_SHAPES = [(1, 1, 1), (3, 7, 9), (17, 3, 64), (9, 33, 5), (33, 17, 8)]
BATCHES = [((8,), (8,)), ((2, 4), (2, 4)), ((3,), ()), ((), (4,))]


@suite("float32", "float64", "float16")
def matmul(dtype):
    """Products with every transpose, batched ones (some with an operand shared by every
    batch entry), and FusedMatMul with bias and ReLU epilogues."""
    s = Suite({"float16": 3e-3, "float32": 3e-5, "float64": 1e-12}[dtype])
    feed = uniform(-2, 2)
    for transpose_a, transpose_b in itertools.product((False, True), repeat=2):
        shapes = [(m, k, n, (), ()) for m, k, n in MATMUL_SHAPES]
        shapes += [(5, 7, 9) + batches for batches in BATCHES]
        for m, k, n, batch_a, batch_b in shapes:
            f = s.function(feed=feed)
            a = f.var("a", dtype, batch_a + ((k, m) if transpose_a else (m, k)))
            b = f.var("b", dtype, batch_b + ((n, k) if transpose_b else (k, n)))
            f.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
        f = s.function(feed=feed)
        x = f.var("x", dtype, (k, 6) if transpose_a else (6, k))
        w = f.var("w", dtype, (33, k) if transpose_b else (k, 33))
        product = f.matmul(x, w, transpose_a=transpose_a, transpose_b=transpose_b)
        f.relu(f.add(product, f.var("bias", dtype, [33])), name="y")

    def check(plan):
        items = kernel_items(plan)
        calls = [item for item in items if isinstance(item, GemmCall)]
        assert {(c.transpose_a, c.transpose_b) for c in calls} == set(
            itertools.product((False, True), repeat=2))
        assert {c.batch for c in calls} >= {1, 8}
        # Some operands are shared by every batch entry (stride 0), others are not.
        assert {0} < {c.stride_a for c in calls} and {0} < {c.stride_b for c in calls}
        if dtype != "float16":      # (the optimizer does not fuse float16 epilogues)
            assert sum(isinstance(item, KernelCode) and "Epilogue" in item.name
                       for item in items) == 4
    s.check = check
    return s


# Every permutation of these in float32, the last two in other dtypes.
TRANSPOSE_SHAPES = [(3, 5), (1, 33), (2, 3, 4), (5, 1, 7), (2, 3, 4, 5), (3, 37, 29)]


@suite("float32", "int64", "float16", "bool")
def movement(dtype):
    """Transposes, Concat, Split, Slice, Gather (oov rows, axis 1), reshape views and
    Assign; :func:`test_gather_status` and :func:`test_assign` use its functions
    ``gather`` and ``assign``."""
    s = Suite()
    for shape in TRANSPOSE_SHAPES:
        perms = list(itertools.permutations(range(len(shape))))
        for perm in perms if dtype == "float32" else perms[-2:]:
            f = s.function()
            f.transpose(f.var("x", dtype, shape), list(perm))
    f = s.function()
    f.concat([f.var("a", dtype, [3, 5]), f.var("b", dtype, [3, 700]),
              f.var("c", dtype, [3, 1])], axis=1)
    f = s.function()
    f.concat([f.var("a", dtype, [2, 3, 4]), f.var("b", dtype, [2, 2, 4])], axis=-2)
    f = s.function()
    f.split(f.var("x", dtype, [4, 900]), 3, axis=1)
    f = s.function()
    f.split(f.var("x", dtype, [6, 5]), 2, axis=0)
    f = s.function()
    f.slice(f.var("x", dtype, [5, 617]), [1, 3], [3, 600])
    f = s.function()
    f.slice(f.var("x", dtype, [4, 5, 6]), [2, 0, 1], [2, 5, 4])
    for rows, row, count in [(10, (4,), 3), (50, (33,), 700), (7, (2, 3), 5)]:
        f = s.function(feed=indices(rows))
        params = f.var("params", dtype, (rows,) + row)
        f.gather(params, f.var("indices", "int32", [count]))
        f = s.function(feed=indices(rows, out_of_range=True))
        f.gather(f.var("params", dtype, (rows,) + row), f.var("indices", "int64", [count]),
                 f.var("oov", dtype, row))
    f = s.function(feed=indices(9))
    f.op("Gather", [f.var("params", dtype, [4, 9, 5]), f.var("indices", "int32", [7])],
         attrs={"axis": 1})
    f = s.function("gather", indices(10))
    f.gather(f.var("params", dtype, [10, 33]), f.var("indices", "int32", [50]), name="y")
    f = s.function("views")
    y = f.transpose(f.reshape(f.var("x", dtype, [4, 6]), [2, 12]), [1, 0], name="y")
    f.reshape(y, [24], name="z")
    f = s.function("assign")
    w = f.var("w", dtype, [3, 400])
    w.learnable = True
    f.assign(w, f.var("x", dtype, [3, 400]))

    def check(plan):
        views = plan.cell("views")
        assert [step.type for step, items in views.work if items] == ["Transpose"]
        spec = {t.name: t for t in views.tensors}
        assert spec["views/z"].root() is spec["views/y"].root()
        assert [step.type for step, _ in plan.cell("assign").work] == ["Assign"]
    s.check = check
    return s


def indices(rows, out_of_range=False):
    """A feed of valid indices into ``rows`` rows (with ``out_of_range``, some are negative
    or too large)."""
    def feed(rng, var):
        if var.name.split("/")[-1] != "indices":
            return None
        low, high = (-3, rows + 3) if out_of_range else (0, rows)
        return rng.integers(low, high, var.shape).astype(var.dtype)
    return feed


@pytest.mark.parametrize("name", sorted(SUITES))
def test_suite(name, compare, rng):
    s = SUITES[name]()
    plan = compare(s.flow, s.inputs(rng), s.tolerances)
    if s.check:
        s.check(plan)


def test_every_op_type_has_a_case():
    """Each op type with a CUDA C expression is a planned step of some suite."""
    covered = set()
    for build in SUITES.values():
        covered |= {step.type for cell in planner.plan(build().flow).cells
                    for step in cell.steps}
    assert expressions.op_types() - covered == set()


def test_gather_status(tmp_path, rng):
    """An index out of range without an oov row writes zeros and sets the status word; the
    other rows are gathered."""
    emulator.require_gxx()
    s = movement("float32")
    inputs = {var.name: (var, value) for var, value in s.inputs(rng)["gather"].items()}
    params, index = inputs["gather/params"][1], inputs["gather/indices"][1]
    bad = rng.choice(50, 3, replace=False)
    index[bad] = [-1, 10, 1 << 30]
    _, memories = emulator.run(s.flow, {"gather": dict(inputs.values())}, tmp_path, rng)
    memory = memories["gather"]
    assert memory.status[0] == 1
    want = params[np.clip(index, 0, 9)]
    want[bad] = 0
    np.testing.assert_array_equal(memory.view(memory.spec("gather/y")), want)


def test_assign(tmp_path, rng):
    """Assign writes its value into the learnable variable's global storage."""
    emulator.require_gxx()
    s = movement("float32")
    inputs = s.inputs(rng)["assign"]
    x = next(v for v in inputs if v.name == "assign/x")
    _, memories = emulator.run(s.flow, {"assign": {x: inputs[x]}}, tmp_path, rng)
    np.testing.assert_array_equal(memories["assign"].globals["assign/w"], inputs[x])
