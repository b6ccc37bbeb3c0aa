"""The ``myelin`` command: compile a model and report what the compiler made of it, or profile
it step by step.

``myelin compile MODEL`` prints the compile time per phase and, for each cell, its steps with
their op, kernel and operation count and its instance size; ``myelin profile MODEL`` compiles
the profiler in, computes on random inputs and prints the per-step table of
:mod:`myelin.runtime.profile`. MODEL is a ``.onnx`` file or a SLING ``.flow`` file. Errors are
one line and a hint (``--debug`` shows the traceback).
"""

import argparse
import sys
import time
import traceback

import numpy as np

import myelin
from myelin.errors import MyelinError
from myelin.flow import dtypes


class UsageError(Exception):
    """A command line that cannot be carried out, with a hint on what to do instead."""

    def __init__(self, message, hint):
        super().__init__(message)
        self.hint = hint


def _shape(text):
    """``name=d0,d1,...`` as (name, shape)."""
    name, _, dims = text.partition("=")
    try:
        return name, tuple(int(d) for d in dims.split(",") if d.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not NAME=D0,D1,...: {text!r}") from None


def _compile(args, **options):
    """Load and compile ``args.model``: returns (network, phase timings in seconds)."""
    compiler = myelin.Compiler(opt_level=args.opt_level, features=args.cpu_features,
                               threads=args.threads, **options)
    start = time.perf_counter()
    if args.model.endswith(".onnx"):
        from myelin.onnx import import_model
        imported = import_model(args.model, shapes=dict(args.shape) or None)
        flow = imported.flow
    elif args.model.endswith(".flow"):
        if args.shape:
            raise UsageError("--shape applies to ONNX models only",
                             "a .flow file has its shapes in it")
        flow = myelin.Flow.load(args.model)
    else:
        raise UsageError(f"cannot tell the format of {args.model}",
                         "give a .onnx or a .flow file")
    timings = {"import": time.perf_counter() - start}
    network = compiler.compile(flow)
    timings.update(compiler.timings)
    return network, timings


def _report(network, timings, out):
    total = sum(timings.values())
    phases = ", ".join(f"{name} {seconds:.3f} s" for name, seconds in timings.items())
    print(f"compiled in {total:.3f} s: {phases}", file=out)
    for cell in network.cells:
        steps = [step for step in cell.steps if not step.noop]
        print(f"\ncell {cell.name}: {len(steps)} steps ({len(cell.steps) - len(steps)} views), "
              f"instance {cell.instance_size} bytes ({cell.unshared_size} without reuse)",
              file=out)
        print(f"  {'step':<40} {'op':<14} {'kernel':<24} {'MFLOP':>10}", file=out)
        for step in steps:
            kernel = step.kernel.kernel_name(step) + (f"[{step.variant}]" if step.variant else "")
            mflop = step.kernel.flops(step) / 1e6
            print(f"  {step.name:<40} {step.type:<14} {kernel:<24} {mflop:>10.3f}", file=out)


def _random_inputs(cell, rng):
    """A random array for every input of ``cell`` (small integers for integer inputs)."""
    values = {}
    for name in cell.inputs:
        spec = cell.spec(name)
        dtype = dtypes.to_numpy(spec.dtype)
        if dtype.kind == "f":
            values[name] = rng.standard_normal(spec.shape).astype(dtype)
        elif dtype.kind == "b":
            values[name] = rng.random(spec.shape) < 0.5
        else:
            values[name] = rng.integers(0, 2, spec.shape).astype(dtype)
    return values


def compile_command(args, out):
    network, timings = _compile(args)
    _report(network, timings, out)
    if args.dump_cells:
        for cell in network.cells:
            print(f"\n{cell}", file=out, end="")


def profile_command(args, out):
    network, _ = _compile(args, profile=True)
    rng = np.random.default_rng(0)
    for cell in network.cells:
        data = cell.instance()
        for name, value in _random_inputs(cell, rng).items():
            data[name] = value
        data.compute()                 # warm up, then count only the timed calls
        cell.reset_profile()
        deadline = time.perf_counter() + args.seconds
        calls = 0
        while calls < args.runs or (not args.runs and time.perf_counter() < deadline):
            data.compute()
            calls += 1
        print(cell.profile(), file=out)


def _parser():
    parser = argparse.ArgumentParser(prog="myelin", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    def model_command(name, help_text):
        command = commands.add_parser(name, help=help_text, description=help_text)
        command.add_argument("model", help="a .onnx or .flow file")
        command.add_argument("--shape", type=_shape, action="append", default=[],
                             metavar="NAME=D0,D1,...",
                             help="the shape of an ONNX input with dynamic dimensions")
        command.add_argument("--opt-level", type=int, default=3, choices=range(4),
                             help="graph optimization level (default 3)")
        command.add_argument("--cpu-features", default=None,
                             help='restrict CPU features: "sse", "avx2", "-avx512,-fma", ...')
        command.add_argument("--threads", type=int, default=None,
                             help="threads a large kernel may use (default: the cores)")
        command.add_argument("--debug", action="store_true", help="show tracebacks of errors")
        return command

    compile_parser = model_command("compile", "compile a model and report its cells: steps, "
                                              "kernels, instance size, compile time per phase")
    compile_parser.add_argument("--dump-cells", action="store_true",
                                help="also print each cell's instance layout and steps")
    compile_parser.set_defaults(run=compile_command)
    profile_parser = model_command("profile", "compile a model with the profiler, compute on "
                                              "random inputs and print the time of each step")
    profile_parser.add_argument("--runs", type=int, default=0,
                                help="how many computes to time (default: --seconds' worth)")
    profile_parser.add_argument("--seconds", type=float, default=1.0,
                                help="how long to compute when --runs is not given "
                                     "(default 1)")
    profile_parser.set_defaults(run=profile_command)
    return parser


def _hint(message):
    """What to try after an error with ``message``."""
    if "dynamic shape" in message:
        return "give the input's shape with --shape NAME=D0,D1,..."
    return "run with --debug to see where it failed"


def main(argv=None, out=None):
    """Run the command line ``argv`` (default: sys.argv[1:]); returns the exit status."""
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    try:
        args.run(args, out)
    except (MyelinError, OSError, UsageError) as error:
        if args.debug:
            traceback.print_exc()
        hint = getattr(error, "hint", None) or _hint(str(error))
        print(f"myelin {args.command}: error: {error}\n  hint: {hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
