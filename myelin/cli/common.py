"""What the sub-commands of ``myelin`` share: their common arguments, loading and compiling the
model, describing and making up inputs, timing loops, and the error a command line gets."""

import argparse
import time

import numpy as np

import myelin
from myelin.flow import dtypes


class UsageError(Exception):
    """A command line that cannot be carried out, with a hint on what to do instead."""

    def __init__(self, message, hint):
        super().__init__(message)
        self.hint = hint


def shape_arg(text):
    """``name=d0,d1,...`` as (name, shape)."""
    name, _, dims = text.partition("=")
    try:
        return name, tuple(int(d) for d in dims.split(",") if d.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not NAME=D0,D1,...: {text!r}") from None


def compiler_options(args):
    """The Compiler options of a model command's arguments."""
    return dict(opt_level=args.opt_level, features=args.cpu_features, threads=args.threads,
                cache=False if args.no_cache else None, progress=args.progress_bar)


def load_flow(args):
    """The flow of ``args.model``: imported from ONNX (for the --shape shapes) or read from a
    .flow file."""
    if args.model.endswith(".onnx"):
        from myelin.onnx import import_model
        return import_model(args.model, shapes=dict(args.shape) or None).flow
    if args.model.endswith(".flow"):
        if args.shape:
            raise UsageError("--shape applies to ONNX models only",
                             "a .flow file has its shapes in it")
        return myelin.Flow.load(args.model)
    raise UsageError(f"cannot tell the format of {args.model}", "give a .onnx or a .flow file")


def compile_model(args, flow=None, **options):
    """Compile ``flow`` (default: ``args.model``, loaded): returns (network, phase timings in
    seconds, the loading included as "import")."""
    compiler = myelin.Compiler(**compiler_options(args), **options)
    start = time.perf_counter()
    flow = flow or load_flow(args)
    timings = {"import": time.perf_counter() - start}
    network = compiler.compile(flow)
    timings.update(compiler.timings)
    return network, timings


def load_onnx(args):
    """An :class:`~myelin.onnx.OnnxModel` of ``args.model`` (compiled on its first run) and
    its inputs."""
    from myelin.importers.onnx import proto
    from myelin.onnx import load
    model = load(args.model, **compiler_options(args))
    shapes = dict(args.shape)
    inputs = []
    for info in model.proto.graph.input:
        if info.name in model.input_names:
            dtype, shape = proto.value_type(info)
            shape = shapes.get(info.name, shape)
            if shape is not None:      # None for each dimension not known (named or -1)
                shape = tuple(d if isinstance(d, int) and d >= 0 else None for d in shape)
            inputs.append((info.name, dtype, shape))
    return model, inputs


def cell_inputs(cell):
    """(name, dtype, shape) of each input of ``cell``."""
    return [(name, cell.spec(name).dtype, cell.spec(name).shape) for name in cell.inputs]


def type_text(dtype, shape):
    """``float32[3x8]``, with ``?`` for a dimension not known yet and ``...`` for an unknown
    rank."""
    if shape == ():
        return dtype
    dims = "..." if shape is None else "x".join("?" if d is None else str(d) for d in shape)
    return f"{dtype}[{dims}]"


def inputs_text(inputs):
    return ", ".join(f"{name} {type_text(dtype, shape)}" for name, dtype, shape in inputs)


def random_inputs(inputs, rng):
    """A random array for each of ``inputs`` ((name, dtype, shape) triples; small integers for
    integer inputs)."""
    values = {}
    for name, dtype, shape in inputs:
        if shape is None or None in shape:
            raise UsageError(f"input {name} has dynamic shape {type_text(dtype, shape)}",
                             "give the input's shape with --shape NAME=D0,D1,...")
        dtype = dtypes.to_numpy(dtype)
        if dtype.kind == "f":
            values[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            values[name] = rng.random(shape) < 0.5
        else:
            values[name] = rng.integers(0, 2, shape).astype(dtype)
    return values


def repeat(call, args):
    """Call ``call`` --runs times (or for --seconds when --runs is 0); returns the seconds each
    call took."""
    seconds = []
    deadline = time.perf_counter() + args.seconds
    while len(seconds) < args.runs or (not args.runs and time.perf_counter() < deadline):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return np.array(seconds)


def count(n, noun):
    return f"{n} {noun}{'' if n == 1 else 's'}"



def model_command(commands, name, help_text, run, compiles=True, details=""):
    """Add the sub-command ``name`` taking a model and the options every model command has
    (``compiles``: those of the compiler too); returns its parser."""
    command = commands.add_parser(name, help=help_text, description=help_text + details)
    command.set_defaults(run=run)
    command.add_argument("model", help="a .onnx or .flow file")
    command.add_argument("--shape", type=shape_arg, action="append", default=[],
                         metavar="NAME=D0,D1,...",
                         help="the shape of an ONNX input with dynamic dimensions")
    command.add_argument("--opt-level", type=int, default=3, choices=range(4),
                         help="graph optimization level (default 3)")
    if compiles:
        command.add_argument("--cpu-features", default=None,
                             help='restrict CPU features: "sse", "avx2", "-avx512,-fma", ...')
        command.add_argument("--threads", type=int, default=None,
                             help="threads a large kernel may use (default: the cores)")
        command.add_argument("--no-cache", action="store_true",
                             help="compile afresh, without the compile cache")
        command.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                             help="show a progress bar of the compile on stderr (default "
                                  "auto: when stderr is a terminal)")
    command.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    return command


def timing_options(command):
    """Add --runs and --seconds (read by :func:`repeat`) to ``command``."""
    command.add_argument("--runs", type=int, default=0,
                         help="how many computes to time (default: --seconds' worth)")
    command.add_argument("--seconds", type=float, default=1.0,
                         help="how long to compute when --runs is not given (default 1)")
