"""The values a command computes on: ``--input NAME=FILE.npy`` arrays and, with ``--random``,
random ones for the other inputs (shared by ``myelin run`` and ``myelin compare``)."""

import argparse

import numpy as np

from myelin.cli.common import UsageError, count_arg, inputs_text, random_inputs
from myelin.flow import dtypes


def add_arguments(command):
    """Add --input, --random and --seed to ``command``."""
    command.add_argument("--input", type=_input, action="append", default=[],
                         metavar="NAME=FILE.npy",
                         help="the value of an input, a .npy file (for an ONNX input with "
                              "dynamic dimensions, its shape is the input's); repeatable")
    command.add_argument("--random", action="store_true",
                         help="fill the inputs not given with --input with random values")
    command.add_argument("--seed", type=count_arg, default=0,
                         help="seed of the random inputs (default 0)")


def feeds(inputs, args):
    """The value of each of ``inputs`` ((name, dtype, shape) triples): the arrays of --input,
    random ones for the rest with --random."""
    hint = f"the model's inputs are {inputs_text(inputs)}"
    names = [name for name, _ in args.input]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UsageError(f"--input gives {', '.join(twice)} more than once", hint)
    given = {name: _read_input(name, path) for name, path in args.input}
    unknown = sorted(set(given) - {name for name, _, _ in inputs})
    if unknown:
        raise UsageError(f"the model has no input {', '.join(unknown)}", hint)
    for name, dtype, _ in inputs:
        value = given.get(name)
        if dtype == "bfloat16" and value is not None and value.dtype == np.dtype("V2"):
            # (numpy.save writes ml_dtypes' bfloat16 as two raw bytes an element)
            given[name] = value.view(dtypes.to_numpy("bfloat16"))
    missing = [spec for spec in inputs if spec[0] not in given]
    if missing and not args.random:
        names = ", ".join(name for name, _, _ in missing)
        raise UsageError(f"no value for input {names}",
                         f"{hint}: give --input NAME=FILE.npy for each, or --random")
    return {**random_inputs(missing, np.random.default_rng(args.seed)), **given}


def _input(text):
    """``name=file.npy`` as (name, path)."""
    name, _, path = text.partition("=")
    if not name or not path:
        raise argparse.ArgumentTypeError(f"not NAME=FILE.npy: {text!r}")
    return name, path


def _read_input(name, path):
    hint = "give a .npy file of the input's value (numpy.save writes them)"
    try:
        value = np.load(path, allow_pickle=False)
    except OSError as error:
        raise UsageError(f"cannot read {path} for input {name}: {error.strerror or error}",
                         hint) from None
    except ValueError:
        raise UsageError(f"{path} (input {name}) is not a .npy file", hint) from None
    if not isinstance(value, np.ndarray):
        value.close()
        raise UsageError(f"{path} (input {name}) is a .npz archive, not a .npy file", hint)
    return value
