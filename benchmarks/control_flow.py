"""An LSTM run over a sequence by a loop: myelin's control-flow VM against ONNX Runtime's
``Loop`` and ``Scan``, PyTorch and (for context) ONNX Runtime's fused ``LSTM`` op.

The model: an LSTM of plain ops (two matmuls, bias add, split into gates i, f, g, o, sigmoid,
tanh, mul, add) over 1,000 steps, batch 1, input size 256, hidden size 256, from zero states,
giving the final h and c of a sequence xs[1000, 1, 256]; the weights are drawn like
PyTorch's (uniform in +-1/sqrt(hidden)) and are the same for every system:

1. myelin: a flow built with the Builder, the step inside ``while_loop`` (its input row read by
   ``gather``, the weights constants), compiled by ``myelin.control.compile`` (compile cache
   off, default threads) and timed through ``program.run("rnn", xs)``: the VM of
   :mod:`myelin.control.vm` running the compiled cells. The loop's body is one segment, so
   by default its cell runs the whole loop (:mod:`myelin.control.loops`), with the input
   projection x[t]·W computed for all steps before the loop; also compiled for one thread
   ("1t"), and with native loops off ("stepwise": the VM runs each iteration, an
   ``external`` and a ``tailbranch``, and the cell computes x[t]·W in every step);
2. ONNX Runtime (its default threads, and one thread: "1t") running the same model as an ONNX
   ``Loop`` (opset 17; body: Gather of the step's row, MatMul, Add, Split, Sigmoid, Tanh,
   Mul; weights as initializers), and as an ONNX ``Scan`` over the rows of xs;
3. PyTorch (its default threads): a Python loop over ``torch.nn.LSTMCell`` given the same
   weights (its gate order is also i, f, g, o; bias_hh zero), under ``torch.no_grad()``;
4. for context, ONNX Runtime running the ONNX ``LSTM`` op on the whole sequence.

Before any timing, every system's h and c are compared with a float64 NumPy reference and
with myelin's: the relative differences are printed, and the script fails if one exceeds
1e-4. The systems are timed one after another in this process (medians over rounds, see
``common.time_call``), in three passes over all of them (a system's time is the median of
its passes, so that a drift of the machine's speed does not favour one); a table prints each
latency, its time per step and myelin's latency over the system's (below 1: myelin is
faster), and whether the goal is met: myelin's VM at most 0.5x ONNX Runtime's time for the
``Loop`` version (default threads).

Then the VM's own overhead, on ``myelin.control.vm.run`` called with the stepwise program's
code, externals and prepared arguments (the native loop runs no instruction per step):

- one run with ``code`` a list that counts its reads gives the instructions executed (by
  opcode, and per loop iteration);
- runs with each External wrapped in a timer (its own cost, a back-to-back pair of
  ``perf_counter`` reads, subtracted per call) give the time inside the compiled cells, per
  call of each segment; ``compute()`` of each cell's instance timed alone shows what the
  External adds around it (copying inputs in and outputs out);
- the VM's total is timed on unwrapped runs, each followed by a wrapped one; the overhead per
  instruction is (total - time in externals) / instructions executed, the median over these
  pairs. It is small next to the total, so noise on a busy machine moves it (it may even
  come out negative); two cross-checks print with it: the time outside the timers within the
  wrapped runs (which adds the wrappers' own calls), and the VM alone, every External
  replaced by a replay of its recorded outputs (no compute, so warm caches; the replays' own
  time, measured alone, subtracted).

A Markdown summary ends the output.

Run: ``python benchmarks/control_flow.py``
"""

import collections
import os
import statistics
import sys
import time

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from common import format_seconds, ort_session, time_call  # noqa: E402
from jitcheck import lstm_flow, numpy_lstm  # noqa: E402

import myelin  # noqa: E402
import myelin.control  # noqa: E402
from myelin.control import vm  # noqa: E402

STEPS, INPUTS, HIDDEN = 1000, 256, 256
GOAL = 0.5              # myelin's VM at most this times ONNX Runtime's Loop
TOLERANCE = 1e-4        # relative difference allowed between any system and the reference
OPSET = 17


def lstm_weights(rng):
    """W[inputs, 4 hidden], U[hidden, 4 hidden], b[4 hidden], gates in the order i, f, g, o."""
    scale = 1 / np.sqrt(HIDDEN)

    def uniform(*shape):
        return rng.uniform(-scale, scale, shape).astype(np.float32)

    return {"W": uniform(INPUTS, 4 * HIDDEN), "U": uniform(HIDDEN, 4 * HIDDEN),
            "b": uniform(4 * HIDDEN)}


# -- myelin ------------------------------------------------------------------------------
def myelin_program(weights, threads=None, native_loops=True):
    """The LSTM as a flow with a while_loop (``lstm_flow`` of tests/jitcheck.py), compiled
    for ``threads`` threads (default: myelin's)."""
    flow = lstm_flow(STEPS, weights)
    start = time.perf_counter()
    program = myelin.control.compile(flow, native_loops=native_loops, cache=False,
                                     threads=threads)
    print(f"  myelin compile (lower, peephole, LLVM{f', {threads} thread' if threads else ''}"
          f"{'' if native_loops else ', stepwise'}): {time.perf_counter() - start:.2f} s")
    return program


# -- ONNX --------------------------------------------------------------------------------

def cell_nodes(x, h, c, h_next, c_next):
    """The nodes of one LSTM step from x[1, inputs], h and c to h_next and c_next."""
    node = helper.make_node
    return [node("MatMul", [x, "W"], ["xw"]),
            node("MatMul", [h, "U"], ["hu"]),
            node("Add", ["xw", "hu"], ["sum"]),
            node("Add", ["sum", "b"], ["gates"]),
            node("Split", ["gates"], ["gate_i", "gate_f", "gate_g", "gate_o"], axis=1),
            node("Sigmoid", ["gate_i"], ["i"]),
            node("Sigmoid", ["gate_f"], ["f"]),
            node("Tanh", ["gate_g"], ["g"]),
            node("Sigmoid", ["gate_o"], ["o"]),
            node("Mul", ["f", c], ["fc"]),
            node("Mul", ["i", "g"], ["ig"]),
            node("Add", ["fc", "ig"], [c_next]),
            node("Tanh", [c_next], ["tanh_c"]),
            node("Mul", ["o", "tanh_c"], [h_next])]


def state(name):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, HIDDEN])


def zero_states():
    zeros = np.zeros((1, HIDDEN), np.float32)
    return {"h0": zeros, "c0": zeros}


def onnx_model(nodes, initializers, outputs):
    """Model bytes of a graph of ``nodes`` with input xs and ``initializers`` (name: array)."""
    graph = helper.make_graph(
        nodes, "lstm",
        [helper.make_tensor_value_info("xs", TensorProto.FLOAT, [STEPS, 1, INPUTS])],
        outputs, [numpy_helper.from_array(value, name) for name, value in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def onnx_loop(weights):
    """``Loop`` over the steps: the body gathers row t of xs (read from the outer graph)."""
    body = helper.make_graph(
        [helper.make_node("Gather", ["xs", "t"], ["x"], axis=0),
         *cell_nodes("x", "h_prev", "c_prev", "h_next", "c_next"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "step",
        [helper.make_tensor_value_info("t", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         state("h_prev"), state("c_prev")],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         state("h_next"), state("c_next")])
    loop = helper.make_node("Loop", ["trips", "cond", "h0", "c0"], ["h", "c"], body=body)
    return onnx_model([loop], dict(weights, **zero_states(), trips=np.array(STEPS, np.int64),
                                   cond=np.array(True)), [state("h"), state("c")])


def onnx_scan(weights):
    """``Scan`` over the rows of xs, h and c its states."""
    body = helper.make_graph(
        cell_nodes("x", "h_prev", "c_prev", "h_next", "c_next"), "step",
        [state("h_prev"), state("c_prev"),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, INPUTS])],
        [state("h_next"), state("c_next")])
    scan = helper.make_node("Scan", ["h0", "c0", "xs"], ["h", "c"], body=body,
                            num_scan_inputs=1)
    return onnx_model([scan], dict(weights, **zero_states()), [state("h"), state("c")])


def onnx_lstm(weights):
    """The ``LSTM`` op: gates in the order i, o, f, c, weights transposed, two biases."""
    order = [0, 3, 1, 2]       # ONNX's i, o, f, c from our i, f, g, o

    def gates(matrix):          # [n, 4 hidden] -> [1, 4 hidden, n] in ONNX's gate order
        blocks = matrix.T.reshape(4, HIDDEN, -1)[order]
        return np.ascontiguousarray(blocks.reshape(1, 4 * HIDDEN, -1))

    bias = weights["b"].reshape(4, HIDDEN)[order].reshape(1, 4 * HIDDEN)
    initializers = {"W_iofc": gates(weights["W"]), "R_iofc": gates(weights["U"]),
                    "B_iofc": np.concatenate([bias, np.zeros_like(bias)], axis=1),
                    "h0_3d": np.zeros((1, 1, HIDDEN), np.float32),
                    "c0_3d": np.zeros((1, 1, HIDDEN), np.float32)}
    lstm = helper.make_node("LSTM", ["xs", "W_iofc", "R_iofc", "B_iofc", "", "h0_3d", "c0_3d"],
                            ["", "h", "c"], hidden_size=HIDDEN)
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 1, HIDDEN])
               for name in ("h", "c")]
    return onnx_model([lstm], initializers, outputs)


# -- PyTorch -----------------------------------------------------------------------------

def torch_lstm(weights, xs):
    """A Python loop over torch.nn.LSTMCell holding our weights."""
    cell = torch.nn.LSTMCell(INPUTS, HIDDEN)
    with torch.no_grad():
        cell.weight_ih.copy_(torch.from_numpy(weights["W"].T))
        cell.weight_hh.copy_(torch.from_numpy(weights["U"].T))
        cell.bias_ih.copy_(torch.from_numpy(weights["b"]))
        cell.bias_hh.zero_()
    rows = torch.from_numpy(xs)

    def run():
        with torch.no_grad():
            h = c = torch.zeros(1, HIDDEN)
            for x in rows:
                h, c = cell(x, (h, c))
        return h, c

    return run


# -- the comparison ----------------------------------------------------------------------

def contenders(weights, xs):
    """(the stepwise program, {system: (callable, its results as [h, c] arrays of shape
    [1, hidden])})."""
    program, single = myelin_program(weights), myelin_program(weights, threads=1)
    stepwise = myelin_program(weights, native_loops=False)
    feed = {"xs": xs}

    def ort(model_bytes, threads=None):
        session = ort_session(model_bytes, threads)
        return lambda: session.run(None, feed)

    flat = lambda results: [np.asarray(r).reshape(1, HIDDEN) for r in results]  # noqa: E731
    loop, scan, fused = onnx_loop(weights), onnx_scan(weights), onnx_lstm(weights)
    systems = {"myelin VM": lambda: program.run("rnn", xs),
               "myelin VM 1t": lambda: single.run("rnn", xs),
               "myelin VM stepwise": lambda: stepwise.run("rnn", xs),
               "ORT Loop": ort(loop), "ORT Loop 1t": ort(loop, 1),
               "ORT Scan": ort(scan), "ORT Scan 1t": ort(scan, 1),
               "PyTorch LSTMCell": torch_lstm(weights, xs),
               "ORT LSTM op": ort(fused), "ORT LSTM op 1t": ort(fused, 1)}
    return stepwise, {name: (fn, flat) for name, fn in systems.items()}


def relative_difference(actual, expected):
    """The largest relative difference (in norm) over the outputs."""
    return max(float(np.linalg.norm(np.asarray(a, np.float64) - e) / np.linalg.norm(e))
               for a, e in zip(actual, expected))


def check(systems, reference):
    """Print each system's relative difference to the reference and to myelin; fail above
    TOLERANCE."""
    results = {name: flat(fn()) for name, (fn, flat) in systems.items()}
    mine = [r.astype(np.float64) for r in results["myelin VM"]]
    print("\nRelative difference of h and c (the larger of the two), to float64 NumPy and "
          "to myelin:")
    failed = []
    for name, result in results.items():
        to_reference = relative_difference(result, reference)
        to_myelin = relative_difference(result, mine)
        print(f"  {name:<20}{to_reference:>12.2e}{to_myelin:>12.2e}")
        if not to_reference <= TOLERANCE or not to_myelin <= TOLERANCE:
            failed.append(name)
    if failed:
        raise SystemExit(f"FAILED: {', '.join(failed)} differ by more than {TOLERANCE}")


def timings(systems, passes=3):
    """Median seconds per run of each system, timed one after another in each of ``passes``
    passes over the systems (the median of its passes: the machine's speed may drift between
    the systems of one pass); prints the table."""
    samples = {name: [] for name in systems}
    for _ in range(passes):
        for name, (fn, _) in systems.items():
            samples[name].append(time_call(fn, min_seconds=0.5))
    times = {name: statistics.median(values) for name, values in samples.items()}
    base = times["myelin VM"]
    print(f"\nLSTM over {STEPS} steps, batch 1, input {INPUTS}, hidden {HIDDEN}")
    print(f"  {'system':<20}{'latency':>14}{'per step':>14}{'myelin / system':>18}")
    for name, seconds in times.items():
        print(f"  {name:<20}{format_seconds(seconds):>14}"
              f"{format_seconds(seconds / STEPS):>14}{base / seconds:>18.3f}")
    ratio = base / times["ORT Loop"]
    print(f"  goal: myelin VM / ORT Loop <= {GOAL}: {'met' if ratio <= GOAL else 'NOT met'} "
          f"({ratio:.2f})")
    return times


# -- the VM's overhead -------------------------------------------------------------------

class CountingCode(list):
    """VM code counting the reads of each position (one per instruction executed)."""

    def __init__(self, code):
        super().__init__(code)
        self.counts = collections.Counter()

    def __getitem__(self, position):
        self.counts[position] += 1
        return list.__getitem__(self, position)


class TimedExternal:
    """An External that sums the seconds spent inside it."""

    def __init__(self, external):
        self.external, self.calls, self.seconds = external, 0, 0.0

    def __call__(self, registers):
        start = time.perf_counter()
        self.external(registers)
        self.seconds += time.perf_counter() - start
        self.calls += 1


class RecordingExternal:
    """An External that keeps the (register, value) pairs it writes at each call."""

    def __init__(self, external):
        self.external, self.writes = external, []

    def __call__(self, registers):
        self.external(registers)
        self.writes.append([(r, registers[r]) for _, r in self.external.outputs])


class ReplayedExternal:
    """A stand-in for an External that writes the recorded values again, computing nothing."""

    def __init__(self, writes):
        self.writes, self.calls = writes, 0

    def __call__(self, registers):
        for register, value in self.writes[self.calls]:
            registers[register] = value
        self.calls += 1


def signed(seconds):
    """format_seconds, for negative times too."""
    return "-" + format_seconds(-seconds) if seconds < 0 else format_seconds(seconds)


def timer_cost(samples=100_000):
    """Median seconds between two back-to-back perf_counter reads: the timer's own share of
    each timed External call."""
    clock = time.perf_counter
    gaps = []
    for _ in range(samples):
        start = clock()
        gaps.append(clock() - start)
    return statistics.median(gaps)


def vm_overhead(program, xs, rounds=15):
    """Instructions executed, time in externals and the VM's overhead per instruction."""
    arguments = program.arguments("rnn", xs)
    code, externals, entry = program.code, program.thread_externals(), program.entries["rnn"]
    segments = [segment.name for segment, _, _ in program.externals]

    def run(externals, code=code):
        vm.run(code, externals, entry, list(arguments))

    counting = CountingCode(code)
    run(externals, counting)
    executed = sum(counting.counts.values())
    by_opcode = collections.Counter()
    names = {number: name for name, number in vm.OPCODES.items()}
    for position, count in counting.counts.items():
        by_opcode[names[code[position][0]]] += count
    per_iteration = sum(n for n in counting.counts.values() if n >= STEPS // 2) / STEPS

    run(externals)                                      # warm
    cost = timer_cost()
    totals, inside, wrapped = [], [], []
    for _ in range(rounds):
        start = time.perf_counter()
        run(externals)
        totals.append(time.perf_counter() - start)
        timed = [TimedExternal(e) for e in externals]
        start = time.perf_counter()
        run(timed)
        wrapped.append(time.perf_counter() - start)
        inside.append([t.seconds - t.calls * cost for t in timed])
    calls = [t.calls for t in timed]
    total = statistics.median(totals)
    per_segment = [statistics.median(sample[k] for sample in inside)
                   for k in range(len(externals))]
    in_externals = statistics.median(sum(sample) for sample in inside)
    # outside the externals: each unwrapped run less the time in externals of the wrapped
    # run just after it (paired, so slow drifts of the machine's speed cancel), and within
    # the wrapped runs (which adds the wrappers' own calls)
    outside = statistics.median(t - sum(sample) for t, sample in zip(totals, inside))
    outside_wrapped = statistics.median(w - sum(sample) for w, sample in zip(wrapped, inside))
    computes = [time_call(e.instance.compute, min_seconds=0.3) for e in externals]

    # the VM alone: externals replaced by replays of their recorded outputs
    recording = [RecordingExternal(e) for e in externals]
    run(recording)
    registers = [None] * (1 + max((r for e in externals for _, r in e.outputs), default=0))

    def replayed():
        run([ReplayedExternal(r.writes) for r in recording])

    def replays_alone():
        for stub in [ReplayedExternal(r.writes) for r in recording]:
            for _ in stub.writes:
                stub(registers)

    dispatch = time_call(replayed, 0.5, rounds) - time_call(replays_alone, 0.5, rounds)

    print(f"\nThe VM's overhead (vm.run of the stepwise program; medians over {rounds} rounds)")
    print(f"  instructions executed: {executed} ("
          + ", ".join(f"{name} {count}" for name, count in by_opcode.most_common())
          + f"), {per_iteration:.2f} per loop iteration")
    print(f"  VM total: {format_seconds(total)}; in externals: {format_seconds(in_externals)} "
          f"(timer cost subtracted per call: {format_seconds(cost)})")
    print(f"  outside externals: {signed(outside)} ({outside / total:.1%} of the "
          f"total), {signed(outside / executed)} per instruction")
    print(f"    (within the wrapped runs: {format_seconds(outside_wrapped)}, "
          f"{format_seconds(outside_wrapped / executed)} per instruction)")
    print(f"  the VM alone, externals replayed (warm caches, no compute): "
          f"{format_seconds(dispatch)}, {format_seconds(dispatch / executed)} per instruction")
    print(f"  {'segment':<12}{'calls':>8}{'per call':>14}{'compute() alone':>18}"
          f"{'External adds':>16}")
    for name, count, seconds, compute in zip(segments, calls, per_segment, computes):
        print(f"  {name:<12}{count:>8}{format_seconds(seconds / count):>14}"
              f"{format_seconds(compute):>18}{format_seconds(seconds / count - compute):>16}")
    return {"executed": executed, "per iteration": per_iteration, "total": total,
            "in externals": in_externals, "outside": outside, "dispatch": dispatch,
            "compute": sum(n * c for n, c in zip(calls, computes)),
            "segments": list(zip(segments, calls, per_segment, computes))}


def summary(times, overhead):
    base, loop = times["myelin VM"], times["ORT Loop"]
    print(f"\n## LSTM over {STEPS} steps (batch 1, input {INPUTS}, hidden {HIDDEN})\n")
    print("Ratio: myelin's latency over the system's (below 1: myelin is faster).\n")
    print("| system | latency | per step | ratio |")
    print("|---|---|---|---|")
    for name, seconds in times.items():
        print(f"| {name} | {format_seconds(seconds)} | {format_seconds(seconds / STEPS)} "
              f"| {base / seconds:.2f} |")
    print(f"\nGoal: myelin VM / ORT Loop <= {GOAL}: {'met' if base / loop <= GOAL else 'not met'}"
          f" ({base / loop:.2f}; on one thread each, myelin VM 1t / ORT Loop 1t: "
          f"{times['myelin VM 1t'] / times['ORT Loop 1t']:.2f}). Stepwise, the cells' compute() "
          f"alone, summed over the calls, is "
          f"{format_seconds(overhead['compute'])}: {overhead['compute'] / loop:.2f} of ORT "
          f"Loop's time.\n")
    executed = overhead["executed"]
    print("| instructions (per iteration) | VM total | in externals | outside: per instruction "
          "| VM alone (replayed): per instruction | "
          + " | ".join(f"{name}: per call (compute alone)" for name, *_ in overhead["segments"])
          + " |")
    print("|---" * (5 + len(overhead["segments"])) + "|")
    print(f"| {executed} ({overhead['per iteration']:.2f}) "
          f"| {format_seconds(overhead['total'])} | {format_seconds(overhead['in externals'])} "
          f"| {signed(overhead['outside'] / executed)} "
          f"| {format_seconds(overhead['dispatch'] / executed)} | "
          + " | ".join(f"{format_seconds(seconds / calls)} ({format_seconds(compute)})"
                       for _, calls, seconds, compute in overhead["segments"]) + " |")


def main():
    rng = np.random.default_rng(0)
    weights = lstm_weights(rng)
    xs = rng.standard_normal((STEPS, 1, INPUTS), dtype=np.float32)
    print(f"LSTM over {STEPS} steps, batch 1, input {INPUTS}, hidden {HIDDEN}; "
          f"torch threads {torch.get_num_threads()}")
    stepwise, systems = contenders(weights, xs)
    check(systems, numpy_lstm(xs, weights))
    times = timings(systems)
    overhead = vm_overhead(stepwise, xs)
    summary(times, overhead)


if __name__ == "__main__":
    main()
