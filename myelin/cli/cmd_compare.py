"""``myelin compare``: compute an ONNX model in myelin and in ONNX Runtime and name the first
node whose value differs (:func:`myelin.onnx.localize`)."""

from myelin.cli import values
from myelin.cli.common import UsageError, compiler_options, load_onnx, model_command


def compare_command(args, out):
    if not args.model.endswith(".onnx"):
        raise UsageError(f"{args.model} is not an ONNX model", "compare takes a .onnx file")
    from myelin.onnx import localize
    _, inputs = load_onnx(args)
    report = localize(args.model, values.feeds(inputs, args), rtol=args.rtol, atol=args.atol,
                      ort_optimizations=not args.ort_unoptimized, **compiler_options(args))
    print(report if args.all else _wrong_lines(report), file=out)
    return 0 if report.first is None else 3


def _wrong_lines(report):
    """The report with only the wrong values listed (all values agree: the verdict alone)."""
    lines = str(report).splitlines()
    wrong = [line for value, line in zip(report.values, lines[1:]) if value.wrong]
    return "\n".join(lines[:1] + wrong + lines[len(report.values) + 1:])


def add(commands):
    """Add ``compare`` to the sub-commands."""
    command = model_command(
        commands, "compare", "compute an ONNX model in myelin and in ONNX Runtime on the same "
        "inputs and name the first node whose value differs", compare_command,
        details=". Every node output is compared (|a - b| <= atol + rtol |b|, integers "
                "exactly); a fault found only in fused code is located by cutting the model "
                "after each node. Exit status 3 when a value differs.")
    values.add_arguments(command)
    command.add_argument("--rtol", type=float, default=1e-4,
                         help="relative tolerance (default 1e-4)")
    command.add_argument("--atol", type=float, default=1e-5,
                         help="absolute tolerance, for values near zero (default 1e-5)")
    command.add_argument("--ort-unoptimized", action="store_true",
                         help="run ONNX Runtime without graph optimizations, each node as the "
                              "ONNX spec says (its fused int8 kernels round differently)")
    command.add_argument("--all", action="store_true",
                         help="list every value compared, not only the wrong ones")
