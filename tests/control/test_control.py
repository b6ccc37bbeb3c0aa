"""Control flow: functions with signatures, calls, recursion, branches and loops built with the
Builder, run by the reference interpreter and by the VM over compiled cells."""

import math
import os
import threading

import numpy as np
import pytest

import myelin
import myelin.control
from jitcheck import lstm_flow, numpy_lstm, relative_error
from myelin import reference
from myelin.builder import verify
from myelin.errors import CompileError, FlowError, InputError, ShapeError


def run_reference(flow, name, *args):
    func = flow.funcs[name]
    values = reference.run(flow, name, dict(zip(func.params, args)), func.results)
    results = [values[v.name] for v in func.results]
    return results[0] if len(results) == 1 else tuple(results)


def factorial_flow():
    """fact(n, acc) = acc if n <= 1 else fact(n - 1, acc * n), acc a float32[3] tensor."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "fact")
    n = f.param("n", "float32")
    acc = f.param("acc", "float32", [3])
    f.returns(("float32", [3]))
    f.ret(f.if_else(f.less_equal(n, 1.0), lambda b: acc,
                    lambda b: b.call("fact", b.sub(n, 1.0), b.mul(acc, n))))
    return flow


def fibonacci_flow():
    """fib(n) = n if n < 2 else fib(n - 1) + fib(n - 2): tree recursion, not tail calls."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "fib")
    n = f.param("n", "float32")
    f.returns(("float32", []))
    f.ret(f.if_else(f.less(n, 2.0), lambda b: n,
                    lambda b: b.add(b.call("fib", b.sub(n, 1.0)), b.call("fib", b.sub(n, 2.0)))))
    return flow


def test_recursive_factorial_over_tensors():
    flow = factorial_flow()
    program = myelin.control.compile(flow)
    acc = np.random.default_rng().standard_normal(3).astype(np.float32)
    for n in (1, 2, 5, 10):
        expected = acc.astype(np.float64) * math.factorial(n)
        assert relative_error(program.run("fact", n, acc), expected) < 1e-6
        assert relative_error(run_reference(flow, "fact", np.float32(n), acc), expected) < 1e-6
    assert "tailbranch" in program.listing() and "tailcall_graph" in program.listing()


def test_recursive_fibonacci():
    flow = fibonacci_flow()
    program = myelin.control.compile(flow)
    fib = [0, 1]
    while len(fib) < 16:
        fib.append(fib[-1] + fib[-2])
    for n in (0, 1, 7, 15):
        assert program.run("fib", n) == fib[n]
    assert run_reference(flow, "fib", np.float32(9)) == fib[9]


def test_while_loop_until_a_data_dependent_condition():
    """Add rows of x to a running sum until the sum's norm passes a limit; the number of rows
    depends on the data."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "accumulate")
    x = f.param("x", "float32", [50, 8])
    limit = f.param("limit", "float32")

    def body(b, t, total):
        row = b.reshape(b.gather(x, b.reshape(t, [1])), [8])
        return b.add(t, 1), b.add(total, row)

    def cond(b, t, total):
        return b.logical_and(b.less(t, 50), b.less(b.norm(total), limit))

    t, total = f.while_loop(cond, body, [f.const(0, "int32"), f.const(np.zeros(8, np.float32))])
    f.ret(t, total)
    program = myelin.control.compile(flow)
    rng = np.random.default_rng()
    for _ in range(3):
        xv = rng.random((50, 8), dtype=np.float32)
        limit_value = np.float32(rng.uniform(2, 20))
        steps, expected = 0, np.zeros(8)
        while steps < 50 and np.linalg.norm(expected) < limit_value:
            expected = expected + xv[steps]
            steps += 1
        got_t, got_total = program.run("accumulate", xv, limit_value)
        assert got_t == steps and 0 < steps < 50
        assert relative_error(got_total, expected) < 1e-6
        ref_t, ref_total = run_reference(flow, "accumulate", xv, limit_value)
        assert ref_t == steps and relative_error(ref_total, expected) < 1e-6


def test_lstm_over_a_thousand_steps():
    rng = np.random.default_rng()
    weights = {name: rng.standard_normal(shape).astype(np.float32) * 0.3
               for name, shape in (("W", (16, 128)), ("U", (32, 128)), ("b", (128,)))}
    flow = lstm_flow(1000, weights)
    program = myelin.control.compile(flow)
    xs = rng.standard_normal((1000, 1, 16)).astype(np.float32)
    h, c = program.run("rnn", xs)
    expected_h, expected_c = numpy_lstm(xs, weights)
    assert relative_error(h, expected_h) < 1e-4 and relative_error(c, expected_c) < 1e-4


def counting_flow():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "count")
    n = f.param("n", "int32")
    f.ret(f.while_loop(lambda b, i: b.less(i, n), lambda b, i: b.add(i, 1), f.const(0, "int32")))
    return flow


def resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux's /proc")
def test_a_million_tail_calls_in_bounded_memory():
    """The loop's memory, sampled while it runs, stays flat: a frame per iteration would
    take over 100 MB. The VM runs every iteration (no native loop)."""
    program = myelin.control.compile(counting_flow(), native_loops=False)
    assert "tailbranch" in program.listing()
    assert program.run("count", 10_000) == 10_000
    before, peak, done = resident_bytes(), [0], threading.Event()

    def sample():
        while not done.wait(0.01):
            peak[0] = max(peak[0], resident_bytes())

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        assert program.run("count", 1_000_000) == 1_000_000
    finally:
        done.set()
        sampler.join()
    assert peak[0] - before < 16 << 20, (before, peak[0])


def test_nested_ifs_inside_a_loop():
    """Over i in [0, n): add 3 when i % 3 == 0, else subtract 1 when i is even, else add i."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "nested")
    n = f.param("n", "int32")

    def body(b, i, total):
        def by_three(t):
            return t.add(total, 3)

        def others(t):
            return t.if_else(t.equal(t.op("Mod", [i, 2]), 0), lambda e: e.sub(total, 1),
                             lambda o: o.add(total, i))
        return b.add(i, 1), b.if_else(b.equal(b.op("Mod", [i, 3]), 0), by_three, others)

    _, total = f.while_loop(lambda b, i, total: b.less(i, n), body,
                            [f.const(0, "int32"), f.const(0, "int32")])
    f.ret(total)
    program = myelin.control.compile(flow)
    for count in (0, 1, 10, 37):
        expected = sum(3 if i % 3 == 0 else -1 if i % 2 == 0 else i for i in range(count))
        assert program.run("nested", count) == expected
        assert run_reference(flow, "nested", np.int32(count)) == expected


def test_a_loop_whose_body_is_one_cell_runs_in_it():
    """The LSTM's loop function becomes one looping external and a tail call of its exit;
    its input projection x[t]·W is computed for every step at once, before the loop, and
    the results equal those of the VM running every iteration."""
    rng = np.random.default_rng()
    weights = {name: rng.standard_normal(shape).astype(np.float32) * 0.3
               for name, shape in (("W", (16, 128)), ("U", (32, 128)), ("b", (128,)))}
    flow = lstm_flow(50, weights)
    native = myelin.control.compile(flow)
    stepwise = myelin.control.compile(flow, native_loops=False)
    assert [i.op for i in native.codes["rnn/while"]] == ["pad_stack", "external",
                                                         "tailcall_graph"]
    assert "looping" in native.listing() and "looping" not in stepwise.listing()
    segment = native.codes["rnn/while"][1].args[0]
    steps = native.network.cell(segment.name).steps
    assert any(s.type.endswith("MatMul") and list(s.outputs[0].shape) == [50, 128]
               for s in steps)
    xs = rng.standard_normal((50, 1, 16)).astype(np.float32)
    for got, expected in zip(native.run("rnn", xs), stepwise.run("rnn", xs)):
        assert relative_error(got, expected) < 1e-5


def test_a_native_loop_copies_large_state():
    """State of 16 KiB and more, bound by reference when the VM runs the loop, is copied into
    a looping cell (which overwrites it); the caller's array is left as it was."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "grow")
    x = f.param("x", "float32", [64, 80])
    _, y = f.while_loop(lambda b, i, v: b.less(b.norm(v), 1000.0),
                        lambda b, i, v: [b.add(i, 1), b.add(b.mul(v, 1.5), 0.25)],
                        [f.const(0, "int32"), x])
    f.ret(y)
    program = myelin.control.compile(flow)
    assert "looping" in program.listing()
    xv = np.random.default_rng().random((64, 80), dtype=np.float32)
    before = xv.copy()
    expected = xv.astype(np.float64)
    while np.linalg.norm(expected) < 1000:
        expected = expected * 1.5 + 0.25
    assert relative_error(program.run("grow", xv), expected) < 1e-5
    np.testing.assert_array_equal(xv, before)


def test_unoptimized_program_computes_the_same():
    program = myelin.control.compile(fibonacci_flow(), optimize=False)
    assert program.run("fib", 10) == 55
    assert "tailcall" not in program.listing() and "switch" in program.listing()


def test_programs_run_on_threads():
    program = myelin.control.compile(factorial_flow())
    acc = np.ones(3, np.float32)
    results, errors = {}, []

    def work(n):
        try:
            for _ in range(20):
                results[n] = program.run("fact", n, acc)
        except Exception as error:          # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in (3, 4, 5, 6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for n, value in results.items():
        np.testing.assert_array_equal(value, np.full(3, math.factorial(n), np.float32))


def test_errors_are_clear():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.param("x", "float32", [4])
    with pytest.raises(ShapeError, match="condition .* must be a scalar"):
        f.if_else(f.less(x, 0.0), lambda b: x, lambda b: b.neg(x))
    with pytest.raises(ShapeError, match="branches give different types"):
        f.if_else(f.less(f.sum(x), 0.0), lambda b: x, lambda b: b.sum(x))
    with pytest.raises(ShapeError, match="the body gives"):
        f.while_loop(lambda b, v: b.less(b.sum(v), 1.0), lambda b, v: b.sum(v), x)
    # Failed builds leave nothing behind: no functions, only the conditions built before.
    assert list(flow.funcs) == ["f"]
    assert sorted(op.type for op in flow.ops.values()) == ["Less", "Less", "Sum"]
    g = myelin.Builder(flow, "g")
    y = g.param("y", "int32")
    g.ret(y)
    with pytest.raises(ShapeError, match="argument .* is float32\\[4\\], parameter g/y"):
        f.call("g", x)
    with pytest.raises(FlowError, match="not a function with a signature"):
        f.call("h", x)
    f.ret(f.call("g", 3))
    with pytest.raises(CompileError, match="myelin.control.compile"):
        myelin.Compiler().compile(flow)
    program = myelin.control.compile(flow)
    with pytest.raises(InputError, match="takes 1 arguments"):
        program.run("f")
    with pytest.raises(InputError, match="argument f/x has shape \\[5\\]"):
        program.run("f", np.zeros(5))
    with pytest.raises(InputError, match="no function 'nope'"):
        program.run("nope")


def test_signatures_survive_flow_files(tmp_path):
    flow = fibonacci_flow()
    path = tmp_path / "fib.flow"
    flow.save(str(path))
    loaded = myelin.Flow.load(str(path))
    assert [v.name for v in loaded.funcs["fib"].params] == ["fib/n"]
    assert not loaded.blobs and loaded.to_bytes() == flow.to_bytes()
    assert "func fib (fib/n) -> (fib/If:0) {" in str(loaded)
    assert myelin.control.compile(loaded).run("fib", 12) == 144
    with pytest.raises(FlowError, match="version 3 cannot hold the signatures"):
        flow.to_bytes(version=3)
    damaged = flow.to_bytes().replace(b'"results": ["fib/If:0"]', b'"results": ["fib/If:9"]')
    with pytest.raises(myelin.FlowFormatError, match="not a signature of variables"):
        myelin.Flow.from_bytes(damaged)


def test_a_function_without_results_is_reported():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    f.param("x", "float32")
    with pytest.raises(FlowError, match="half a signature"):
        verify.check(flow)
    with pytest.raises(FlowError, match="no function with a signature"):
        myelin.control.compile(flow)


def test_a_loop_may_give_back_an_outer_value_unchanged():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.param("x", "float32", [2])
    y = f.param("y", "float32", [2])
    i, v = f.while_loop(lambda b, i, v: b.less(i, 3), lambda b, i, v: [b.add(i, 1), y],
                        [f.const(0, "int32"), x])
    f.ret(v)
    program = myelin.control.compile(flow)
    xv, yv = np.ones(2, np.float32), np.full(2, 7, np.float32)
    np.testing.assert_array_equal(program.run("f", xv, yv), yv)
    np.testing.assert_array_equal(run_reference(flow, "f", xv, yv), yv)


def test_functions_as_values():
    """twice(g, v) = g(g(v)) called with a function chosen at run time: square, or add
    partially applied to y (a closure)."""
    flow = myelin.Flow()
    square = myelin.Builder(flow, "square")
    x = square.param("x", "float32", [3])
    square.ret(square.mul(x, x))
    add = myelin.Builder(flow, "add")
    add.ret(add.add(add.param("a", "float32", [3]), add.param("b", "float32", [3])))
    twice = myelin.Builder(flow, "twice")
    g = twice.function_param("g", "square")
    v = twice.param("v", "float32", [3])
    twice.ret(twice.call(g, twice.call(g, v)))
    main = myelin.Builder(flow, "main")
    y = main.param("y", "float32", [3])
    c = main.param("c", "float32")
    chosen = main.if_else(main.greater(c, 0.0), lambda b: b.function("square"),
                          lambda b: b.partial("add", y))
    main.ret(main.call("twice", chosen, y))
    program = myelin.control.compile(flow)
    listing = program.listing()
    assert "partial" in listing and "push_graph 1, 'square'" in listing
    yv = np.random.default_rng().standard_normal(3).astype(np.float32)
    for condition, expected in ((1.0, yv.astype(np.float64) ** 4), (-1.0, 3.0 * yv)):
        assert relative_error(program.run("main", yv, condition), expected) < 1e-6
        assert relative_error(run_reference(flow, "main", yv, np.float32(condition)),
                              expected) < 1e-6
    with pytest.raises(InputError, match="function values"):
        program.run("twice", yv, yv)
    loaded = myelin.control.compile(myelin.Flow.from_bytes(flow.to_bytes()))
    assert relative_error(loaded.run("main", yv, -1.0), 3.0 * yv) < 1e-6
    with pytest.raises(ShapeError, match="argument main/c is float32, parameter 0 of "
                                         "main/If:0 is float32\\[3\\]"):
        main.call(chosen, c)
    with pytest.raises(ShapeError, match="parameter twice/g of twice"):
        main.call("twice", main.partial("add"), y)     # takes two tensors, not one


def test_a_constant_result_cannot_be_changed_by_the_caller():
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.param("x", "float32")
    f.ret(f.if_else(f.less(x, 0.0), lambda b: np.ones(2, np.float32), lambda b: b.const(
        np.zeros(2, np.float32))))
    program = myelin.control.compile(flow)
    result = program.run("f", -1.0)
    with pytest.raises(ValueError):
        result[0] = 5
    np.testing.assert_array_equal(program.run("f", -1.0), [1, 1])


def tuple_flow():
    """Tuples as values: ``swap`` returns one, ``norm_and_apply`` takes a tuple holding a
    tensor and a function value, ``moments`` keeps a tuple (sum, sum of squares, count) as a
    loop state until a data-dependent count, nested in a tuple with the input."""
    flow = myelin.Flow()
    swap = myelin.Builder(flow, "swap")
    pair = swap.tuple(swap.param("a", "float32", [3]), swap.param("b", "int32"))
    swap.ret(swap.tuple(swap.tuple_get(pair, 1), swap.tuple_get(pair, 0)))

    square = myelin.Builder(flow, "square")
    x = square.param("x", "float32", [3])
    square.ret(square.mul(x, x))
    apply = myelin.Builder(flow, "norm_and_apply")
    packed = apply.param_like("packed", apply.tuple(apply.const(np.zeros(3, np.float32)),
                                                    apply.function("square")))
    value = apply.tuple_get(packed, 0)
    apply.ret(apply.call(apply.tuple_get(packed, 1), value))

    main = myelin.Builder(flow, "main")
    v = main.param("v", "float32", [3])
    limit = main.param("limit", "float32")
    start = main.tuple(main.tuple(main.const(0.0), main.const(0.0), main.const(0, "int32")), v)

    def body(b, state):
        (total, squares, count), values = [b.tuple_get(b.tuple_get(state, 0), i)
                                           for i in range(3)], b.tuple_get(state, 1)
        s = b.sum(values)
        return b.tuple(b.tuple(b.add(total, s), b.add(squares, b.mul(s, s)), b.add(count, 1)),
                       b.mul(values, 1.5))

    final = main.while_loop(
        lambda b, state: b.less(b.tuple_get(b.tuple_get(state, 0), 0), limit), body, start)
    moments = main.tuple_get(final, 0)
    main.ret(moments, main.call("norm_and_apply", main.tuple(main.tuple_get(final, 1),
                                                            main.function("square"))))
    return flow


def numpy_moments(v, limit):
    total = squares = 0.0
    count = 0
    values = v.astype(np.float64)
    while total < limit:
        s = values.sum()
        total, squares, count, values = total + s, squares + s * s, count + 1, values * 1.5
    return (total, squares, count), values ** 2


def test_tuples_are_values():
    flow = tuple_flow()
    program = myelin.control.compile(flow)
    rng = np.random.default_rng()
    a = rng.standard_normal(3).astype(np.float32)
    b, a_back = program.run("swap", a, 7)
    assert b == 7 and b.dtype == np.int32 and np.array_equal(a_back, a)
    v = rng.random(3).astype(np.float32) + 0.5
    (total, squares, count), result = program.run("main", v, 40.0)
    (want_total, want_squares, want_count), want = numpy_moments(v, 40.0)
    assert count == want_count > 1
    assert relative_error(np.array([total, squares]), np.array([want_total, want_squares])) \
        < 1e-5
    assert relative_error(result, want) < 1e-5
    (ref_total, _, ref_count), ref_result = run_reference(flow, "main", v, np.float32(40.0))
    assert ref_count == want_count and relative_error(ref_result, want) < 1e-6
    loaded = myelin.control.compile(myelin.Flow.from_bytes(flow.to_bytes()))
    assert loaded.run("main", v, 40.0)[0][2] == want_count


def test_tuple_elements_cost_no_instructions():
    """An element of a tuple the function builds is read from the register it was built
    from; element reads move up, so the loop body's three segments merge into one cell."""
    program = myelin.control.compile(tuple_flow())
    swap = [i.op for i in program.codes["swap"]]
    assert swap == ["pad_stack", "tuple", "return"]
    loop = [i.op for i in program.codes["main/while"]]
    assert loop.count("external") == 1, program.listing()
    assert "tuple_get" in loop and loop.index("tuple_get") < loop.index("external")


def test_tuple_errors_are_clear():
    flow = tuple_flow()
    f = myelin.Builder(flow, "f")
    x = f.param("x", "float32", [2])
    t = f.tuple(x, f.const(1, "int32"))
    with pytest.raises(ShapeError, match="index 2 is out of range for a tuple of 2"):
        f.tuple_get(t, 2)
    with pytest.raises(ShapeError, match="f/x is float32\\[2\\], not a tuple"):
        f.tuple_get(x, 0)
    with pytest.raises(ShapeError, match="condition .* must be a scalar"):
        f.if_else(t, lambda b: x, lambda b: x)
    with pytest.raises(ShapeError):
        f.add(t, x)
    f.ret(f.tuple_get(t, -1))
    program = myelin.control.compile(flow)
    with pytest.raises(InputError, match="function values"):
        program.run("norm_and_apply", (np.ones(3), None))
    with pytest.raises(InputError, match="argument swap/a has shape"):
        program.run("swap", np.ones(4), 1)
    assert program.run("f", np.ones(2)) == 1


def test_a_recursive_function_returns_a_tuple():
    """pair(n) = (0, 1) if n == 0 else (b, a + b) of pair(n - 1): Fibonacci numbers as a
    tuple, its result type declared by returns() from a tuple value."""
    flow = myelin.Flow()
    f = myelin.Builder(flow, "pair")
    n = f.param("n", "int32")
    start = f.tuple(f.const(np.zeros(2, np.float32)), f.const(np.ones(2, np.float32)))
    f.returns(start)

    def recurse(b):
        previous = b.call("pair", b.sub(n, 1))
        first, second = b.tuple_get(previous, 0), b.tuple_get(previous, 1)
        return b.tuple(second, b.add(first, second))

    f.ret(f.if_else(f.equal(n, 0), lambda b: start, recurse))
    program = myelin.control.compile(flow)
    first, second = program.run("pair", 10)
    np.testing.assert_array_equal(first, [55, 55])
    np.testing.assert_array_equal(second, [89, 89])
    reference_first, _ = run_reference(flow, "pair", np.int32(10))
    np.testing.assert_array_equal(reference_first, [55, 55])


def test_a_loop_state_may_hold_a_function_value():
    """State (v, g, i): v = g(v) three times, g a closure of add over y."""
    flow = myelin.Flow()
    add = myelin.Builder(flow, "add")
    add.ret(add.add(add.param("a", "float32", [2]), add.param("b", "float32", [2])))
    f = myelin.Builder(flow, "f")
    x, y = f.param("x", "float32", [2]), f.param("y", "float32", [2])
    v, _, _ = f.while_loop(lambda b, v, g, i: b.less(i, 3),
                           lambda b, v, g, i: [b.call(g, v), g, b.add(i, 1)],
                           [x, f.partial("add", y), f.const(0, "int32")])
    f.ret(v)
    program = myelin.control.compile(flow)
    xv, yv = np.ones(2, np.float32), np.array([2, -1], np.float32)
    np.testing.assert_array_equal(program.run("f", xv, yv), xv + 3 * yv)
    np.testing.assert_array_equal(run_reference(flow, "f", xv, yv), xv + 3 * yv)
