"""``myelin run``: compute a model's outputs for inputs read from .npy files (or random ones)
and print or save them."""

import contextlib
import os
import re

import numpy as np

from myelin.cli import values
from myelin.cli.common import (UsageError, cell_inputs, compile_model, inputs_text, load_onnx,
                               model_command, type_text)
from myelin.errors import InputError
from myelin.flow import dtypes


def _file_name(name, taken):
    """A file name for an output called ``name``: other characters than letters, digits,
    ``.``, ``-`` and ``_`` become ``_``, and a number is added to a name already ``taken``."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "output"
    stem, n = base, 1
    while stem in taken:
        stem, n = f"{base}_{n}", n + 1
    taken.add(stem)
    return stem + ".npy"


def _compute_cells(network, feeds):
    """Compute each cell of ``network`` on its inputs in ``feeds``; returns copies of the
    outputs by name."""
    outputs = {}
    for cell in network.cells:
        data = cell.instance()
        for name in cell.inputs:
            data[name] = feeds[name]
        data.compute()
        outputs.update((name, data.tensor(name).numpy().copy()) for name in cell.outputs)
    return outputs


@contextlib.contextmanager
def _listing_inputs(inputs):
    """Turn an InputError (a value that does not fit its input) into a UsageError with a hint
    listing the model's ``inputs``."""
    try:
        yield
    except InputError as error:
        raise UsageError(str(error), f"the model's inputs are {inputs_text(inputs)}") \
            from error


def _outputs(args):
    """The outputs of ``args.model`` by name, computed on --input values (and --random ones)."""
    if args.model.endswith(".onnx"):
        model, inputs = load_onnx(args)
        feeds = values.feeds(inputs, args)
        with _listing_inputs(inputs):
            return dict(zip(model.output_names, model.run(feeds)))
    network, _ = compile_model(args)
    inputs = [spec for cell in network.cells for spec in cell_inputs(cell)]
    feeds = values.feeds(inputs, args)
    with _listing_inputs(inputs):
        return _compute_cells(network, feeds)


def run_command(args, out):
    outputs = _outputs(args)
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
    taken = set()
    for name, value in outputs.items():
        head = f"{name}: {type_text(dtypes.from_numpy(value.dtype), value.shape)}"
        if args.output_dir:
            path = os.path.join(args.output_dir, _file_name(name, taken))
            np.save(path, value)
            print(f"{head} saved to {path}", file=out)
        else:
            print(f"{head}\n{np.array2string(value, threshold=100)}", file=out)



def add(commands):
    """Add ``run`` to the sub-commands."""
    command = model_command(commands, "run", "compile a model, compute its outputs for the "
                                             "given inputs and print them (or save them as "
                                             ".npy files)", run_command)
    values.add_arguments(command)
    command.add_argument("--output-dir", metavar="DIR",
                         help="save each output as DIR/NAME.npy (characters other than "
                              "letters, digits, '.', '-' and '_' become '_') instead of "
                              "printing it")
