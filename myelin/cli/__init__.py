"""The ``myelin`` command: compile, run, time and draw models, convert them to .flow files, and
report what the compiler made of them.

``myelin compile MODEL`` prints the compile time per phase and, for each cell, its steps with
their op, kernel and operation count and its instance size (and, on request, the flow after
each pass, the LLVM IR and the assembly, or code for another target with ``--target``);
``myelin profile MODEL`` compiles the profiler in,
computes on random inputs and prints the per-step table of :mod:`myelin.runtime.profile`.
``myelin run MODEL`` computes the outputs for inputs read from .npy files (or random ones) and
prints or saves them; ``myelin bench MODEL`` prints latency percentiles and throughput, next to
ONNX Runtime's on request; ``myelin graph MODEL -o OUT`` draws the flow before and after
optimizing (DOT, SVG or HTML); ``myelin convert MODEL OUT.flow`` writes the flow of a model as
a .flow file; ``myelin compare MODEL`` names the first node of an ONNX model whose value
differs from ONNX Runtime's (exit status 3 when one does); ``myelin export MODEL -o DIR``
writes a shared library with a C API and its header (:mod:`myelin.aot`); ``myelin cache
list|clear`` shows or empties the compile cache. MODEL is a
``.onnx`` file or a SLING ``.flow`` file. Errors are one line and a hint on stderr with exit
status 1, internal errors (bugs in myelin) too; ``--debug`` shows the traceback. A compile that
takes a while shows a progress bar on a terminal.

Each sub-command is a module ``cmd_<name>`` with its ``add(commands)``; :mod:`.common` holds
what they share, :mod:`.values` the inputs given on the command line.
"""

import argparse
import contextlib
import os
import sys
import traceback

from myelin.cli import (cmd_bench, cmd_cache, cmd_compare, cmd_compile, cmd_convert,
                        cmd_export, cmd_graph, cmd_run)
from myelin.cli.common import UsageError
from myelin.cli.progress import ProgressBar
from myelin.errors import MyelinError


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line and a hint, as the commands' are."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n  hint: {self.prog} --help lists the "
                     f"arguments\n")


def _parser():
    parser = _Parser(prog="myelin", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for module in (cmd_compile, cmd_run, cmd_bench, cmd_compare, cmd_graph, cmd_convert,
                   cmd_export, cmd_cache):
        module.add(commands)
    return parser


def _hint(message):
    """What to try after an error with ``message``."""
    if "dynamic shape" in message:
        return "give the input's shape with --shape NAME=D0,D1,..."
    if "dynamic dimension (-1)" in message:
        return "give the size of a .flow file's -1 dimensions with --batch-size N"
    return "run with --debug to see where it failed"


def _message(error):
    """One line saying what went wrong: an OSError as ``file: reason`` (the file written when
    it names two), a MemoryError as such, anything else as its text."""
    if isinstance(error, OSError) and error.strerror:
        name = error.filename2 or error.filename
        return f"{name}: {error.strerror}" if name is not None else error.strerror
    if isinstance(error, MemoryError) and not isinstance(error, MyelinError):
        return f"out of memory{': ' + str(error) if str(error) else ''}"
    return str(error)


def main(argv=None, out=None):
    """Run the command line ``argv`` (default: sys.argv[1:]); returns the exit status."""
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    shown = getattr(args, "progress", "never")
    args.progress_bar = None
    if shown == "always" or (shown == "auto" and sys.stderr.isatty()):
        args.progress_bar = ProgressBar(sys.stderr)
    try:
        with args.progress_bar or contextlib.nullcontext():
            status = args.run(args, out)
        out.flush()
    except BrokenPipeError:
        # The reader went away (myelin ... | head): stop quietly, as if killed by SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (MyelinError, OSError, MemoryError, UsageError) as error:
        if args.debug:
            traceback.print_exc()
        message = _message(error)
        hint = getattr(error, "hint", None) or _hint(message)
        print(f"myelin {args.command}: error: {message}\n  hint: {hint}", file=sys.stderr)
        return 1
    except Exception as error:       # a bug in myelin: one line, the traceback on request
        if args.debug:
            traceback.print_exc()
        print(f"myelin {args.command}: internal error: {type(error).__name__}: {error}\n"
              f"  hint: this is a bug in myelin; run with --debug for the traceback and "
              f"report it", file=sys.stderr)
        return 1
    return status or 0
