"""The graph passes one by one: the op structure each leaves (before/expected), names of
function inputs and outputs kept, the same results from the reference interpreter before and
after on fresh random inputs, and False from a pass with nothing to do. Also the
BatchNormalization and Dropout ops against NumPy."""

import numpy as np
import pytest

import myelin
from myelin import reference
from myelin.builder import verify
from myelin.errors import ShapeError
from myelin.optimize import Context
from myelin.optimize.cleanup import eliminate_common_subexpressions, eliminate_dead_code
from myelin.optimize.fold import fold_constants
from myelin.optimize.inference import fold_scale_axis, simplify_inference
from myelin.optimize.simplify import simplify_algebra

F32 = np.float32


def build(make, seed=0):
    """A flow with function "f" made by ``make(f, rng)``, with IN/OUT flags set."""
    flow = myelin.Flow()
    make(myelin.Builder(flow, "f"), np.random.default_rng(seed))
    flow.infer_inputs_and_outputs()
    return flow


def apply(flow, *passes, ctx=None):
    """Run ``passes`` in order, verifying the flow after each; True if any changed it."""
    ctx = ctx or Context()
    changed = False
    for pass_ in passes:
        changed |= pass_(flow, ctx)
        verify.check(flow)
    return changed


def types(flow, func="f"):
    return [op.type for op in flow.order(flow.funcs[func])]


def interface(flow, func="f"):
    f = flow.funcs[func]
    return sorted(v.name for v in f.inputs()), sorted(v.name for v in f.outputs())


def random_value(var, rng):
    shape = [max(d, 1) for d in var.shape]
    if var.dtype in myelin.flow.dtypes.FLOAT_TYPES:
        return rng.uniform(-2, 2, shape).astype(var.dtype)
    return rng.integers(-5, 5, shape).astype(var.dtype)


def assert_equivalent(before, after, func="f", trials=3):
    """Same outputs (by name) from ``before`` and ``after`` on fresh random inputs."""
    assert interface(before, func) == interface(after, func)
    inputs, outputs = interface(before, func)
    rng = np.random.default_rng()
    for _ in range(trials):
        values = {name: random_value(before.vars[name], rng) for name in inputs}
        want = reference.run(before, func, values, outputs)
        got = reference.run(after, func, values, outputs)
        for name in outputs:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def check_pass(make, *passes, seed=0):
    """Run ``passes`` on a flow from ``make``; check it changed and kept its meaning."""
    before, after = build(make, seed), build(make, seed)
    assert apply(after, *passes)
    assert_equivalent(before, after)
    return after


# BatchNormalization and Dropout.
@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_reference_matches_numpy(shape):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape)
    scale, bias, mean = (rng.standard_normal(3) for _ in range(3))
    var = rng.uniform(0.5, 2, 3)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    xv = f.var("x", "float64", shape)
    params = [f.array(n, v) for n, v in zip(["scale", "B", "mean", "var"],
                                           [scale, bias, mean, var])]
    y = f.op("BatchNormalization", [xv] + params, "y", {"epsilon": 1e-3})
    assert (y.dtype, y.shape) == ("float64", shape)
    got = reference.run(flow, "f", {xv: x})["f/y"]
    axes = (slice(None),) + (None,) * (len(shape) - 2)
    want = (x - mean[axes]) / np.sqrt(var[axes] + 1e-3) * scale[axes] + bias[axes]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)  # y may cancel to ~0


def test_dropout_is_the_identity_at_inference():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", "float32", [4, 6])
    y = f.op("Dropout", [x], "y", {"ratio": 0.3})
    assert (y.dtype, y.shape) == ("float32", (4, 6))
    value = np.random.default_rng(2).standard_normal((4, 6)).astype(F32)
    np.testing.assert_array_equal(reference.run(flow, "f", {x: value})["f/y"], value)


@pytest.mark.parametrize("optype, args, attrs, message", [
    ("BatchNormalization", [[3], [3], [3], [3], [3]], None, "rank 2 or more"),
    ("BatchNormalization", [[2, 3], [4], [3], [3], [3]], None, r"needs \[3\]"),
    ("Dropout", [[2, 3]], {"ratio": 1.0}, "must be in"),
])
def test_nn_shape_errors_name_the_op(optype, args, attrs, message):
    f = myelin.Builder(myelin.Flow(), "f")
    inputs = [f.var(f"in{i}", "float32", shape) for i, shape in enumerate(args)]
    with pytest.raises(ShapeError, match=rf"op f/{optype} \({optype}\): .*{message}"):
        f.op(optype, inputs, attrs=attrs)


def test_nn_ops_are_float_only():
    f = myelin.Builder(myelin.Flow(), "f")
    x = f.var("x", "int32", [2, 3])
    with pytest.raises(ShapeError, match="float"):
        f.op("Dropout", [x])


# Nothing to do.
def plain(f, rng):
    x = f.var("x", "float32", [2, 4])
    w = f.array("W", rng.standard_normal((4, 3)).astype(F32))
    f.relu(f.add(f.matmul(x, w), f.const(np.ones(3, F32) * 2)), name="y")


@pytest.mark.parametrize("pass_", [fold_constants, eliminate_dead_code,
                                   eliminate_common_subexpressions, simplify_algebra,
                                   simplify_inference, fold_scale_axis])
def test_passes_report_no_change(pass_):
    flow = build(plain)
    text = str(flow)
    assert not apply(flow, pass_)
    assert str(flow) == text


# Constant folding.
def folding(f, rng):
    x = f.var("x", "float32", [2, 3])
    a = f.array("a", rng.standard_normal(3).astype(F32))
    b = f.array("b", rng.standard_normal(3).astype(F32))
    scaled = f.mul(f.add(a, b), f.const(3.0))
    f.sub(x, f.exp(scaled), name="y")


def test_fold_constants_evaluates_constant_subgraphs():
    flow = build(folding)
    a = flow.vars["f/a"].data
    saved = a.copy()
    flow = check_pass(folding, fold_constants)
    assert types(flow) == ["Sub"]
    (sub,) = flow.funcs["f"].ops
    folded = sub.inputs[1]
    assert folded.constant and folded.dtype == "float32" and folded.data.dtype == F32
    assert interface(flow) == (["f/x"], ["f/y"])
    np.testing.assert_array_equal(a, saved)


def test_fold_constants_respects_the_size_limit():
    flow = build(folding)
    assert not apply(flow, fold_constants, ctx=Context(fold_limit=8))
    assert types(flow) == ["Add", "Mul", "Exp", "Sub"]


def test_fold_constants_casts_and_folds_shape_queries():
    def make(f, rng):
        x = f.var("x", "float32", [2, 3])
        index = f.cast(f.const([1.7, -0.5]), "int32")
        f.gather(x, index, name="y")
        f.reshape(f.var("z", "float32", [3, 2]), f.shape(x), name="w")

    flow = check_pass(make, fold_constants)
    assert types(flow) == ["Gather", "Reshape"]
    index = flow.ops["f/Gather"].inputs[1]
    assert index.dtype == "int32" and index.data.tolist() == [1, 0]
    assert flow.ops["f/Reshape"].inputs[1].data.tolist() == [2, 3]


def test_fold_constants_leaves_learnables_state_outputs_and_dynamic_shapes():
    def make(f, rng):
        w = f.array("W", np.ones(3, F32))
        w.learnable = True
        f.assign(w, f.add(f.const(np.ones(3, F32)), f.const(np.ones(3, F32))))
        f.mul(w, f.const(2.0), name="scaled")
        f.add(f.const(1.0), f.const(2.0), name="sum")
        f.shape(f.var("x", "float32", [-1, 3]), name="shape")

    flow = build(make)
    assert apply(flow, fold_constants)
    assert types(flow) == ["Assign", "Mul", "Add", "Shape"]
    assert flow.ops["f/Assign"].inputs[1].constant
    assert not apply(flow, fold_constants)


def test_fold_constants_leaves_failing_ops_to_run_time():
    def make(f, rng):
        f.relu(f.gather(f.const(np.ones((2, 3), F32)), f.const([5])), name="y")

    flow = build(make)
    ctx = Context()
    assert not fold_constants(flow, ctx)
    assert types(flow) == ["Gather", "Relu"]
    assert any("f/Gather" in message for message in ctx.messages)


# Dead code.
def dead_code(f, rng):
    x = f.var("x", "float32", [2, 3])
    w = f.array("W", np.zeros(3, F32))
    w.learnable = True
    f.tanh(f.exp(x))                                # a dead chain
    f.assign(w, f.sum(x, axis=0))                   # stateful: stays
    f.relu(x, name="y")


def test_eliminate_dead_code_keeps_outputs_and_state():
    flow = build(dead_code)
    dead = flow.ops["f/Exp"].outputs[0].name
    # The Tanh output has no consumers, so it is a function output: make it a local.
    flow.ops["f/Tanh"].outputs[0].is_output = False
    flow.var("f/orphan", "float32", [1])
    assert apply(flow, eliminate_dead_code)
    assert types(flow) == ["Sum", "Assign", "Relu"]
    assert dead not in flow.vars and "f/orphan" not in flow.vars
    assert "f/W" in flow.vars and "f/x" in flow.vars and "f/y" in flow.vars
    assert not apply(flow, eliminate_dead_code)


def test_dead_code_in_every_function_and_connector_links_stay():
    flow = myelin.Flow()
    for name in ("f", "g"):
        f = myelin.Builder(flow, name)
        x = f.var("x", "float32", [2])
        f.exp(f.exp(x))
        f.relu(x, name="y")
    flow.infer_inputs_and_outputs()
    for name in ("f/Exp_1:0", "g/Exp_1:0"):
        flow.vars[name].is_output = False
    flow.cnx("state", [flow.vars["g/Exp_1:0"]])
    assert apply(flow, eliminate_dead_code)
    assert types(flow, "f") == ["Relu"]
    assert types(flow, "g") == ["Exp", "Exp", "Relu"]


# Common subexpressions.
def redundant(f, rng):
    x = f.var("x", "float32", [2, 3])
    r1, r2 = f.relu(x), f.relu(x)
    t1, t2 = f.transpose(r1, [1, 0]), f.transpose(r2, [1, 0])
    f.add(t1, t2, name="y")
    f.add(f.mul(x, f.const(2.0)), f.mul(x, f.const(2.0)), name="z")
    f.sum(x, axis=0, name="s0")
    f.sum(x, axis=1, name="s1")


def test_eliminate_common_subexpressions_merges_ops_and_constants():
    flow = check_pass(redundant, eliminate_common_subexpressions, eliminate_dead_code)
    assert types(flow) == ["Relu", "Transpose", "Add", "Mul", "Add", "Sum", "Sum"]
    add = flow.vars["f/y"].producer
    assert add.inputs[0] is add.inputs[1]
    assert flow.vars["f/z"].producer.inputs[0] is flow.vars["f/z"].producer.inputs[1]
    assert interface(flow) == (["f/x"], ["f/s0", "f/s1", "f/y", "f/z"])


def test_merged_outputs_keep_their_names():
    def make(f, rng):
        x = f.var("x", "float32", [2, 3])
        f.tanh(x, name="a")
        f.tanh(x, name="b")
        f.identity(x, name="c")
        f.identity(x, name="d")

    flow = check_pass(make, eliminate_common_subexpressions)
    assert types(flow) == ["Tanh", "Identity", "Identity", "Identity"]
    assert flow.vars["f/b"].producer.inputs == [flow.vars["f/a"]]
    assert flow.vars["f/d"].producer.inputs == [flow.vars["f/x"]]
    assert not apply(flow, eliminate_common_subexpressions, simplify_algebra)


def test_identical_ops_in_different_functions_stay_apart():
    flow = myelin.Flow()
    x = flow.var("x", "float32", [2])
    for name in ("f", "g"):
        f = myelin.Builder(flow, name)
        f.add(f.tanh(f.tanh(x)), f.const(np.ones(2, F32)), name="y")
    flow.infer_inputs_and_outputs()
    assert apply(flow, eliminate_common_subexpressions)   # the two constants merge
    assert types(flow, "f") == types(flow, "g") == ["Tanh", "Tanh", "Add"]
    assert flow.vars["f/y"].producer.inputs[1] is flow.vars["g/y"].producer.inputs[1]


def test_assignments_are_never_merged():
    def make(f, rng):
        w = f.array("W", np.zeros(3, F32))
        w.learnable = True
        x = f.var("x", "float32", [3])
        f.assign(w, x)
        f.assign(w, x)
        f.identity(w, name="a")
        f.identity(w, name="b")

    flow = build(make)
    assert not apply(flow, eliminate_common_subexpressions)
    assert types(flow).count("Assign") == 2


# Algebraic simplification.
def neutral(f, rng):
    x = f.var("x", "float32", [2, 3])
    ones, zeros = f.const(np.ones(3, F32)), f.const(np.zeros((1, 3), F32))
    v = f.mul(x, ones)
    v = f.mul(f.const(1.0), v)
    v = f.add(v, zeros)
    v = f.add(f.const(0.0), v)
    v = f.sub(v, f.const(0.0))
    v = f.div(v, f.const(1.0))
    v = f.tanh(v)
    v = f.sub(f.const(0.0), v)                      # -v: stays
    v = f.mul(v, f.const(np.ones((2, 2, 3), F32)))  # broadcasts to a new shape: stays
    f.mul(v, f.const(2.0), name="y")                # not neutral: stays


def test_simplify_algebra_removes_neutral_operands():
    flow = check_pass(neutral, simplify_algebra, eliminate_dead_code)
    assert types(flow) == ["Tanh", "Sub", "Mul", "Mul"]
    assert flow.ops["f/Tanh"].inputs[0].name == "f/x"


def test_simplify_algebra_shortens_transposes_and_reshapes():
    def make(f, rng):
        x = f.var("x", "float32", [2, 3, 4])
        f.transpose(f.transpose(x, [1, 2, 0]), [2, 0, 1], name="same")
        f.transpose(f.transpose(x, [1, 2, 0]), [1, 0, 2], name="swapped")
        f.reshape(f.reshape(f.relu(x), [6, 4]), [4, 6], name="reshaped")
        f.tanh(f.reshape(f.reshape(x, [24]), [2, 3, 4]), name="unshaped")

    flow = check_pass(make, simplify_algebra, eliminate_dead_code)
    assert sorted(types(flow)) == ["Identity", "Relu", "Reshape", "Tanh", "Transpose"]
    assert flow.vars["f/same"].producer.inputs[0].name == "f/x"
    swapped = flow.vars["f/swapped"].producer
    assert swapped.inputs[0].name == "f/x" and swapped.attrs.get_ints("perm") == [2, 1, 0]
    assert flow.vars["f/reshaped"].producer.inputs[0].producer.type == "Relu"
    assert flow.vars["f/unshaped"].producer.inputs[0].name == "f/x"


def test_simplify_algebra_makes_transposes_of_size_1_axes_reshapes():
    def make(f, rng):
        x = f.var("x", "float32", [1, 5, 1, 3])
        f.tanh(f.transpose(x, [1, 0, 3, 2]), name="view")          # 5 before 3: a view
        f.tanh(f.transpose(x, [2, 3, 0, 1]), name="moved")         # 3 before 5: a copy

    flow = check_pass(make, simplify_algebra, eliminate_dead_code)
    view = flow.vars["f/view"].producer.inputs[0].producer
    assert view.type == "Reshape" and view.inputs[0].name == "f/x"
    assert flow.vars["f/moved"].producer.inputs[0].producer.type == "Transpose"


def test_simplify_algebra_moves_transposes_past_reshapes_of_ones():
    def make(f, rng):
        x = f.var("x", "float32", [4, 1, 3, 5])
        moved = f.reshape(f.transpose(x, [2, 0, 3, 1]), [1, 3, 4, 5])     # [3, 4, 5, 1]
        f.tanh(f.transpose(moved, [0, 1, 3, 2]), name="y")                 # meets this one
        f.reshape(f.transpose(x, [2, 0, 3, 1]), [12, 5], name="merged")     # not ones: stays

    flow = check_pass(make, simplify_algebra, eliminate_dead_code)
    y = flow.vars["f/y"].producer.inputs[0].producer
    assert y.type == "Transpose" and y.inputs[0].producer.type == "Reshape"
    assert y.inputs[0].producer.inputs[0].name == "f/x"
    assert flow.vars["f/merged"].producer.inputs[0].producer.type == "Transpose"


def test_simplify_algebra_shortens_lossless_cast_chains():
    def make(f, rng):
        x = f.var("x", "float32", [2, 3])
        i = f.var("i", "int32", [2, 3])
        f.cast(f.cast(x, "float64"), "int32", name="a")          # lossless: one Cast
        f.cast(f.cast(x, "int32"), "float32", name="b")          # truncates: both stay
        f.cast(f.cast(i, "float64"), "int32", name="c")          # round trip: none
        f.cast(f.cast(i, "int16"), "int32", name="d")            # narrows: both stay
        f.tanh(f.cast(x, "float32"), name="e")                   # same type: none

    flow = check_pass(make, simplify_algebra, eliminate_dead_code)
    assert sorted(types(flow)) == ["Cast"] * 5 + ["Identity", "Tanh"]
    assert flow.vars["f/a"].producer.inputs[0].name == "f/x"
    assert flow.vars["f/c"].producer.inputs[0].name == "f/i"
    assert flow.vars["f/e"].producer.inputs[0].name == "f/x"


def test_simplify_algebra_drops_a_quantized_round_trip():
    """A quantization's clamped, rounded values converted to an integer type and back (a
    QuantizeLinear and the DequantizeLinear after it) need no conversion."""
    def make(f, rng):
        x = f.var("x", "float32", [4, 5])

        def clamp(value, low, high):
            return f.op("Minimum", [f.op("Maximum", [value, np.float32(low)]), np.float32(high)])

        scaled = f.mul(x, f.const(np.float32(40)))
        q = f.add(f.op("Round", [scaled]), f.const(np.float32(3)))
        f.cast(f.cast(clamp(q, -128, 127), "int8"), "float32", name="a")      # exact: none
        f.cast(f.cast(f.op("Maximum", [f.op("Minimum", [q, np.float32(255)]), np.float32(0)]),
                      "uint8"), "float32", name="b")                           # exact: none
        f.cast(f.cast(clamp(q, -128, 200), "int8"), "float32", name="c")      # past int8: stay
        f.cast(f.cast(clamp(scaled, -128, 127), "int8"), "float32", name="d")  # not integral
        f.cast(f.cast(clamp(q, -128, 127), "int32"), "float16", name="e")     # inexact: stay

    flow = check_pass(make, simplify_algebra, eliminate_dead_code)
    for name in "ab":
        assert flow.vars[f"f/{name}"].producer.type in ("Minimum", "Maximum", "Identity")
    for name in "cde":
        producer = flow.vars[f"f/{name}"].producer
        assert producer.type == "Cast" and producer.inputs[0].producer.type == "Cast"


def small_powers(f, rng):
    x = f.var("x", "float32", [2, 9])
    t = f.tanh(x)
    f.pow(t, f.const(1.0), name="one")
    f.pow(t, f.const(2.0), name="two")
    f.pow(x, f.const(np.full((1, 1), 3, F32)), name="three")
    f.pow(t, f.const(2.5), name="fractional")                 # stays
    f.pow(t, f.const(np.full((1, 9), 2, F32)), name="row")    # more than one element: stays


def test_simplify_algebra_turns_small_whole_powers_into_products():
    flow = check_pass(small_powers, simplify_algebra, eliminate_dead_code)
    producer = {name: flow.vars[f"f/{name}"].producer for name in
                ("one", "two", "three", "fractional", "row")}
    assert producer["one"].type in ("Identity", "Tanh")     # (Tanh writes it directly)
    assert producer["two"].type == "Square"
    assert producer["three"].type == "Mul"
    square, x = producer["three"].inputs
    assert square.producer.type == "Square" and square.producer.inputs == [x]
    assert x.name == "f/x"
    assert producer["fractional"].type == producer["row"].type == "Pow"


def test_small_whole_powers_as_products_keep_pow_special_values():
    """Compiled: signed zeros, infinities, NaN, and a cube that overflows, as pow gives them;
    the rest within two roundings."""
    flow = myelin.Flow()
    small_powers(myelin.Builder(flow, "f"), None)
    net = myelin.Compiler().compile(flow)
    data = net.cell("f").instance()
    x = np.array([[0.0, -0.0, np.inf, -np.inf, np.nan, -2.5, 3.1, 1e-20, 1e20]] * 2, F32)
    data["f/x"] = x
    data.compute()
    for name, base, power in (("two", np.tanh(x), 2), ("three", x, 3)):
        with np.errstate(over="ignore"):
            got, want = np.asarray(data[f"f/{name}"]), np.power(base, F32(power))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
        np.testing.assert_allclose(got, want, rtol=3e-7)


def test_removed_ops_keep_function_output_names():
    def make(f, rng):
        x = f.var("x", "float32", [2, 3])
        f.identity(f.relu(x), name="y")          # Relu writes y directly
        f.mul(x, f.const(1.0), name="z")         # x is an input: z = Identity(x)

    flow = check_pass(make, simplify_algebra)
    assert types(flow) == ["Relu", "Identity"]
    assert flow.vars["f/y"].producer.type == "Relu"
    assert flow.vars["f/z"].producer.inputs[0].name == "f/x"
    assert not apply(flow, simplify_algebra)


# Inference: batch normalization, dropout, scale folding.
def batch_norm(f, rng, channels=4, shape=(2, 4, 5)):
    x = f.var("x", "float32", shape)
    params = [f.array(name, rng.uniform(lo, 2, channels).astype(F32))
              for name, lo in [("scale", -2), ("B", -2), ("mean", -2), ("var", 0.5)]]
    y = f.op("BatchNormalization", [f.op("Dropout", [x])] + params, attrs={"epsilon": 1e-3})
    f.op("Dropout", [y], "y")


def test_simplify_inference_lowers_batch_norm_and_dropout():
    before = build(batch_norm)
    saved = {name: var.data.copy() for name, var in before.vars.items() if var.constant}
    flow = check_pass(batch_norm, simplify_inference, eliminate_dead_code)
    assert types(flow) == ["Mul", "Add"]
    mul, add = flow.order(flow.funcs["f"])
    assert mul.inputs[0].name == "f/x" and add.outputs[0].name == "f/y"
    assert mul.inputs[1].shape == (4, 1) and mul.inputs[1].dtype == "float32"
    for name, data in saved.items():
        np.testing.assert_array_equal(before.vars[name].data, data)


def test_batch_norm_with_learnable_statistics_stays():
    flow = build(batch_norm)
    flow.vars["f/mean"].learnable = True
    assert apply(flow, simplify_inference)
    assert types(flow) == ["BatchNormalization"]
    assert flow.ops["f/BatchNormalization"].inputs[0].name == "f/x"
    assert flow.vars["f/y"].producer.type == "BatchNormalization"


def dilated_convs(f, rng):
    """DeepLab's ASPP on a small map: a 3x3 whose dilation passes the image reads only its
    centre; another reads its centre row and column only where the output is near a border
    (kept); a 1-D one with stride 2 and asymmetric pads loses its last taps."""
    x = f.var("x", "float32", [1, 3, 9, 10])
    for dilation, name in ((12, "far"), (6, "near")):
        w = f.array(f"W{dilation}", rng.standard_normal((4, 3, 3, 3)).astype(F32))
        f.op("Conv", [x, w], name, {"dilations": [dilation] * 2, "pads": [dilation] * 4})
    line = f.var("line", "float32", [2, 3, 7])
    w = f.array("W1", rng.standard_normal((5, 3, 4)).astype(F32))
    f.op("Conv", [line, w], "row", {"dilations": [3], "strides": [2], "pads": [1, 5]})


def test_simplify_inference_crops_taps_that_read_only_padding():
    flow = check_pass(dilated_convs, simplify_inference, eliminate_dead_code)
    shapes = {op.outputs[0].name: (op.inputs[1].shape, op.attrs.get_ints("pads"))
              for op in flow.funcs["f"].ops}
    assert shapes["f/far"] == ((4, 3, 1, 1), [0, 0, 0, 0])
    assert shapes["f/near"] == ((4, 3, 3, 3), [6, 6, 6, 6])
    assert shapes["f/row"] == ((5, 3, 3), [1, 2])


def dense(f, rng, transpose_b=False, scale_shape=(3,), extra_use=False):
    x = f.var("x", "float32", [2, 4])
    w = rng.standard_normal((3, 4) if transpose_b else (4, 3)).astype(F32)
    product = f.matmul(x, f.array("W", w), transpose_b=transpose_b)
    scaled = f.mul(f.const(rng.uniform(0.5, 2, scale_shape).astype(F32)), product)
    f.add(scaled, f.array("b", rng.standard_normal(3).astype(F32)), name="y")
    if extra_use:
        f.relu(product, name="z")


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("scale_shape", [(3,), (1, 3), (), (1,)])
def test_fold_scale_axis_scales_the_weight(transpose_b, scale_shape):
    def make(f, rng):
        dense(f, rng, transpose_b, scale_shape)

    before = build(make)
    original = before.vars["f/W"].data.copy()
    flow = check_pass(make, fold_scale_axis)
    assert types(flow) == ["MatMul", "Add"]
    matmul = flow.vars["f/y"].producer.inputs[0].producer
    assert matmul.inputs[1].name != "f/W" and matmul.inputs[1].data.dtype == F32
    np.testing.assert_array_equal(before.vars["f/W"].data, original)


@pytest.mark.parametrize("variant", ["two uses", "per row", "learnable weight", "output"])
def test_fold_scale_axis_needs_a_private_product_and_a_channel_scale(variant):
    def make(f, rng):
        dense(f, rng, scale_shape=(2, 1) if variant == "per row" else (3,),
              extra_use=variant == "two uses")

    flow = build(make)
    if variant == "learnable weight":
        flow.vars["f/W"].learnable = True
    if variant == "output":
        flow.ops["f/MatMul"].outputs[0].is_output = True
    assert not apply(flow, fold_scale_axis)


def test_batch_norm_after_matmul_folds_into_weight_and_bias():
    def make(f, rng):
        x = f.var("x", "float32", [2, 4])
        hidden = f.matmul(x, f.array("W", rng.standard_normal((4, 3)).astype(F32)))
        params = [f.array(name, rng.uniform(lo, 2, 3).astype(F32))
                  for name, lo in [("scale", -2), ("B", -2), ("mean", -2), ("var", 0.5)]]
        f.relu(f.op("BatchNormalization", [hidden] + params), name="y")

    flow = check_pass(make, simplify_inference, fold_scale_axis, fold_constants,
                      eliminate_dead_code)
    assert types(flow) == ["MatMul", "Add", "Relu"]
    assert interface(flow) == (["f/x"], ["f/y"])


def test_passes_together_reach_a_fixpoint():
    def make(f, rng):
        x = f.var("x", "float32", [2, 4])
        w = f.array("W", rng.standard_normal((4, 3)).astype(F32))
        h = f.matmul(f.op("Dropout", [x]), f.mul(w, f.const(1.0)))
        h = f.mul(h, f.add(f.const(np.ones(3, F32)), f.const(np.ones(3, F32))))
        a = f.relu(f.transpose(f.transpose(h)))
        b = f.relu(h)
        f.cast(f.cast(f.add(a, b), "float64"), "float32", name="y")

    passes = [fold_constants, simplify_algebra, eliminate_common_subexpressions,
              eliminate_dead_code]
    flow = check_pass(make, simplify_inference, *passes, fold_scale_axis, *passes)
    assert types(flow) == ["MatMul", "Relu", "Add"]
    assert flow.vars["f/y"].producer.type == "Add"
    assert not apply(flow, simplify_inference, *passes, fold_scale_axis)
