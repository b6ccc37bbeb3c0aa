"""What the sub-commands of ``myelin`` share: their common arguments, loading and compiling the
model, describing and making up inputs, timing loops, and the error a command line gets."""

import argparse
import math
import os
import time

import numpy as np

import myelin
from myelin.flow import dtypes
from myelin.optimize.weight_storage import STORAGE_TYPES


class UsageError(Exception):
    """A command line that cannot be carried out, with a hint on what to do instead."""

    def __init__(self, message, hint):
        super().__init__(message)
        self.hint = hint


def shape_arg(text):
    """``name=d0,d1,...`` as (name, shape): sizes are integers >= 0 (``name=`` is a
    scalar)."""
    name, equals, dims = text.partition("=")
    if not name or not equals:
        raise argparse.ArgumentTypeError(f"not NAME=D0,D1,...: {text!r}")
    try:
        shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not NAME=D0,D1,... with integer sizes: "
                                         f"{text!r}") from None
    if any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"sizes are 0 or more, not {list(shape)}: {text!r}")
    return name, shape


def _number(kind, low, text, strict=False):
    """``text`` as a ``kind`` (int or float) of at least ``low`` (above it if ``strict``),
    finite; ArgumentTypeError otherwise."""
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < low or (strict and value == low):
        raise argparse.ArgumentTypeError(f"{text} is not {'above' if strict else 'at least'} "
                                         f"{low:g}")
    return value


def count_arg(text):
    """An int of 0 or more (--runs, --warmup, --seed, --batch-size)."""
    return _number(int, 0, text)


def positive_arg(text):
    """An int of 1 or more (--threads)."""
    return _number(int, 1, text)


def seconds_arg(text):
    """A finite number of seconds above 0."""
    return _number(float, 0.0, text, strict=True)


def shapes(args, names):
    """The --shape shapes by input name, checked against the model's input ``names``: each
    named once, and each an input."""
    given = {}
    for name, shape in args.shape:
        if name in given:
            raise UsageError(f"--shape gives input {name} twice", "give each input's shape once")
        given[name] = shape
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise UsageError(f"--shape names {', '.join(unknown)}, which the model does not take",
                         f"the model's inputs are {', '.join(names) or 'none'}")
    return given


def compiler_options(args):
    """The Compiler options of a model command's arguments."""
    return dict(opt_level=args.opt_level, features=args.cpu_features, threads=args.threads,
                cache=False if args.no_cache else None,
                progress=args.progress_bar or False, weights=args.weights)


def load_flow(args):
    """The flow of ``args.model``: imported from ONNX (for the --shape shapes) or read from a
    .flow file."""
    if args.model.endswith(".onnx"):
        from myelin.importers.onnx import import_graph, proto
        model = proto.load(args.model)
        initializers = {t.name for t in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in initializers]
        return import_graph(model, shapes(args, names) or None).flow
    if args.batch_size is not None and not args.model.endswith(".flow"):
        raise UsageError("--batch-size applies to .flow files only",
                         "give the shapes of an ONNX model's inputs with --shape")
    if args.model.endswith(".flow"):
        if args.shape:
            raise UsageError("--shape applies to ONNX models only",
                             "a .flow file has its shapes in it (its -1 dimensions take "
                             "--batch-size)")
        flow = myelin.Flow.load(args.model)
        flow.batch_size = args.batch_size
        return flow
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
    given = shapes(args, model.input_names)
    inputs = []
    for info in model.proto.graph.input:
        if info.name in model.input_names:
            dtype, shape = proto.value_type(info)
            shape = given.get(info.name, shape)
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


def _memory_bytes():
    """The memory of this machine, in bytes (None where it cannot be told)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def random_inputs(inputs, rng):
    """A random array for each of ``inputs`` ((name, dtype, shape) triples; small integers for
    integer inputs). UsageError for a dynamic shape, or inputs larger than the machine's
    memory, before anything is allocated."""
    total, memory = 0, _memory_bytes()
    for name, dtype, shape in inputs:
        if shape is None or None in shape:
            raise UsageError(f"input {name} has dynamic shape {type_text(dtype, shape)}",
                             "give the input's shape with --shape NAME=D0,D1,...")
        total += math.prod(shape) * dtypes.to_numpy(dtype).itemsize
        if memory is not None and total > memory:
            raise UsageError(f"random inputs up to {name} {type_text(dtype, shape)} would take "
                             f"{total / 2**30:.3g} GiB, more than this machine's "
                             f"{memory / 2**30:.3g} GiB", "give smaller shapes with --shape")
    values = {}
    for name, dtype, shape in inputs:
        dtype = dtypes.to_numpy(dtype)
        if dtype.kind == "f":
            drawn = dtype if dtype.itemsize >= 4 else np.dtype(np.float32)   # (no float16 draws)
            values[name] = rng.standard_normal(shape, drawn).astype(dtype, copy=False)
        elif dtype.kind == "b":
            values[name] = rng.random(shape) < 0.5
        else:
            values[name] = rng.integers(0, 2, shape).astype(dtype)
    return values


def repeat(call, args):
    """Call ``call`` --runs times (or for --seconds when --runs is 0, at least once); returns
    the seconds each call took."""
    seconds = []
    deadline = time.perf_counter() + args.seconds
    while len(seconds) < max(args.runs, 1) or (not args.runs and time.perf_counter() < deadline):
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
    command.add_argument("--batch-size", type=count_arg, default=None, metavar="N",
                         help="the size of a .flow file's dynamic (-1) dimensions")
    command.add_argument("--opt-level", type=int, default=3, choices=range(4),
                         help="graph optimization level (default 3)")
    if compiles:
        command.add_argument("--cpu-features", default=None,
                             help='restrict CPU features: "sse", "avx2", "-avx512,-fma", ...')
        command.add_argument("--threads", type=positive_arg, default=None,
                             help="threads a large kernel may use (default: the cores)")
        command.add_argument("--weights", choices=STORAGE_TYPES, default=None,
                             help="store the constant weights of float32 matrix products "
                                  "in this type (default: float32)")
        command.add_argument("--no-cache", action="store_true",
                             help="compile afresh, without the compile cache")
        command.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                             help="show a progress bar of the compile on stderr (default "
                                  "auto: when stderr is a terminal)")
    command.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    return command


def timing_options(command):
    """Add --runs and --seconds (read by :func:`repeat`) to ``command``."""
    command.add_argument("--runs", type=count_arg, default=0,
                         help="how many computes to time (default: --seconds' worth)")
    command.add_argument("--seconds", type=seconds_arg, default=1.0,
                         help="how long to compute when --runs is not given (default 1)")
