"""``myelin bench``: latency percentiles and throughput of a model on random inputs, next to
ONNX Runtime's on request."""

import numpy as np

from myelin.cli.common import (UsageError, cell_inputs, compile_model, count_arg, inputs_text,
                               load_onnx, model_command, random_inputs, repeat, timing_options)


def _onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        raise UsageError("--onnxruntime needs ONNX Runtime, which is not installed",
                         "pip install onnxruntime") from None
    return onnxruntime


def _time(call, args):
    """Per-call seconds of ``call``, after --warmup untimed calls."""
    for _ in range(args.warmup):
        call()
    return repeat(call, args)


def _latency(seconds, batch):
    """Rows of the bench table for ``seconds`` per call: percentiles, mean and throughput
    (``batch`` is (input name, its first dimension) or None)."""
    mean = seconds.mean()
    rows = {"runs": f"{len(seconds)}"}
    for row, value in zip(("min", "p50", "p90", "p99", "max"),
                          np.percentile(seconds, [0, 50, 90, 99, 100])):
        rows[f"{row} (us)"] = f"{value * 1e6:.1f}"
    rows["mean (us)"] = f"{mean * 1e6:.1f}"
    rows["computes/s"] = f"{1 / mean:.1f}"
    if batch:
        name, size = batch
        rows[f"samples/s (batch {name}.shape[0]={size})"] = f"{size / mean:.1f}"
    return rows


def _bench_table(inputs, columns, out):
    """The latency and throughput of each of ``columns`` (name -> seconds per call) side by
    side; samples/s counts the first dimension of the first input as the batch when it has
    two or more."""
    name, _, shape = inputs[0] if inputs else ("", "", ())
    batch = (name, shape[0]) if len(shape) >= 2 else None
    table = {column: _latency(seconds, batch) for column, seconds in columns.items()}
    rows = list(next(iter(table.values())))
    width = max(map(len, rows))
    print(f"{'':<{width}}" + "".join(f"{column:>14}" for column in table), file=out)
    for row in rows:
        print(f"{row:<{width}}" + "".join(f"{cells[row]:>14}" for cells in table.values()),
              file=out)


def _bench_cells(args, out):
    """Time ``data.compute()`` of one instance of each cell of a .flow file."""
    network, timings = compile_model(args)
    print(f"compiled in {sum(timings.values()):.3f} s", file=out)
    rng = np.random.default_rng(args.seed)
    for cell in network.cells:
        data = cell.instance()
        inputs = cell_inputs(cell)
        for name, value in random_inputs(inputs, rng).items():
            data[name] = value
        print(f"\ncell {cell.name}, inputs {inputs_text(inputs)} (random); timed: "
              f"data.compute() on one instance", file=out)
        _bench_table(inputs, {"myelin": _time(data.compute, args)}, out)


def _bench_onnx(args, onnxruntime, out):
    """Time ``model.run(inputs)`` of an ONNX model, and ONNX Runtime's ``session.run`` on the
    same inputs when ``onnxruntime`` is given."""
    model, inputs = load_onnx(args)
    feeds = random_inputs(inputs, np.random.default_rng(args.seed))
    model.run(feeds)
    print(f"compiled in {model.compiles[-1][2]:.3f} s", file=out)
    inputs = [(name, dtype, feeds[name].shape) for name, dtype, _ in inputs]
    print(f"inputs {inputs_text(inputs)} (random); timed: model.run(inputs), which binds the "
          f"inputs in place, computes and copies the outputs out", file=out)
    columns = {"myelin": _time(lambda: model.run(feeds), args)}
    if onnxruntime:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads or 0        # 0: ONNX Runtime's default
        session = onnxruntime.InferenceSession(args.model, options,
                                               providers=["CPUExecutionProvider"])
        columns["onnxruntime"] = _time(lambda: session.run(None, feeds), args)
    _bench_table(inputs, columns, out)
    if onnxruntime:
        ratio = np.median(columns["myelin"]) / np.median(columns["onnxruntime"])
        print(f"myelin/onnxruntime p50: {ratio:.2f} (below 1: myelin is faster)", file=out)


def bench_command(args, out):
    if not args.model.endswith(".onnx"):
        if args.onnxruntime:
            raise UsageError("--onnxruntime applies to ONNX models only",
                             "ONNX Runtime cannot run a .flow file: leave out --onnxruntime")
        _bench_cells(args, out)
    else:
        _bench_onnx(args, _onnxruntime() if args.onnxruntime else None, out)



def add(commands):
    """Add ``bench`` to the sub-commands."""
    command = model_command(commands, "bench", "compile a model, then time computes on random "
                                               "inputs: latency percentiles and throughput",
                            bench_command, details=(
                                " (samples/s takes the first dimension of the first input as "
                                "the batch). ONNX models are timed through model.run(inputs), "
                                "which copies its outputs out; the cells of a .flow file through "
                                "data.compute()"))
    timing_options(command)
    command.add_argument("--warmup", type=count_arg, default=10,
                         help="untimed computes before timing (default 10)")
    command.add_argument("--seed", type=count_arg, default=0,
                         help="seed of the random inputs (default 0)")
    command.add_argument("--onnxruntime", action="store_true",
                         help="also time ONNX Runtime (CPU) on the same inputs and print the "
                              "ratio of the medians (ONNX models only)")
