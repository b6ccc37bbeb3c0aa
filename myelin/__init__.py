"""myelin: a just-in-time compiler for neural networks.

Build a flow with :class:`Builder` (or load a ``.flow`` file), compile it with
:class:`Compiler`, and compute with cell instances::

    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [1, 64])
    ...
"""

import importlib

from myelin.errors import (CompileError, DeviceError, ExportError, FlowError, FlowFormatError,
                           InputError, MyelinError, SerializationError, ShapeError,
                           UnsupportedOpError, UnsupportedTypeError)
from myelin.flow import *  # noqa: F401,F403  (the IR and the DT_* constants)
from myelin.builder import Builder
from myelin import reference
from myelin.autodiff import gradient
from myelin.version import __version__  # noqa: F401


# Subpackages that `import myelin` gives on first use (`myelin.control.compile(flow)`), so that
# importing myelin does not load LLVM, ONNX, TensorFlow or PyTorch.
_LAZY_MODULES = {"control", "cuda", "onnx", "optimize", "tf", "torch", "train"}


def save(value, path):
    """Write a compiled model (a Network, an ONNX model or a control-flow Program) to the
    file ``path``; :func:`load` loads it in another process without compiling (see
    :mod:`myelin.runtime.serialize`)."""
    from myelin.runtime import serialize
    serialize.save(value, path)


def load(path):
    """The compiled model saved in the file ``path`` by :func:`save` (or a ``save`` method):
    a Network, an OnnxModel or a Program. SerializationError if the file is not one, is
    damaged or truncated, or its code needs CPU features this machine lacks."""
    from myelin.runtime import serialize
    return serialize.load(path)


def export(model, directory, **options):
    """Compile ``model`` (an ONNX model, a ``.flow`` file or a Flow) into a shared library
    with a C API and its header in ``directory``, to run without Python (see
    :mod:`myelin.aot` for the options)."""
    from myelin import aot
    return aot.export(model, directory, **options)


def __getattr__(name):
    # The compiler pulls in LLVM: load it on first use, not on `import myelin`.
    if name == "Compiler":
        from myelin.compiler import Compiler
        return Compiler
    if name in _LAZY_MODULES:
        return importlib.import_module(f"myelin.{name}")
    raise AttributeError(f"module 'myelin' has no attribute {name!r}")
