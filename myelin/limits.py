"""The size limit: how large a tensor, or an instance block, myelin may make.

Input must not make myelin allocate more than it asks for by mistake or malice: a 122-byte
ONNX model whose ConstantOfShape asks for a gigabyte, a ``.flow`` file declaring an input of
10^10 elements. So every tensor myelin makes from a shape rather than reads from a file is
checked against a limit before anything is allocated, and one over it raises
:class:`~myelin.errors.LimitError`: a value an importer computes or a converter builds, a
constant folded at compile time, each tensor the compiler plans and the instance block of each
cell, a value of the reference interpreter. Weights read from a model file are not checked:
they are what the file holds.

The limit is ``$MYELIN_MAX_TENSOR_BYTES`` (bytes, with an optional K, M, G or T suffix), by
default 4 GiB, well above the largest single weight or activation of common models.
:func:`scope` sets it for the code it wraps: ``Compiler(max_tensor_bytes=...)`` and
``myelin.onnx.load(..., max_tensor_bytes=...)`` use it.
"""

import contextlib
import contextvars
import math
import os

from myelin.errors import InputError, LimitError

DEFAULT_MAX_TENSOR_BYTES = 4 << 30
ENVIRONMENT = "MYELIN_MAX_TENSOR_BYTES"
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_scoped = contextvars.ContextVar("max_tensor_bytes", default=None)


def parse_size(text):
    """A number of bytes from ``text`` such as "4096", "512M" or "1.5G"; ValueError if it is
    not one, or not positive."""
    text = str(text).strip().upper().removesuffix("B").removesuffix("I")
    scale = _UNITS.get(text[-1:], 1)
    value = float(text[:-1] if scale > 1 else text)
    if not math.isfinite(value) or value * scale < 1:
        raise ValueError(f"{text!r} is not a positive size")
    return int(value * scale)


def max_tensor_bytes():
    """The limit in force: that of the innermost :func:`scope`, else the environment's, else
    :data:`DEFAULT_MAX_TENSOR_BYTES`."""
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    text = os.environ.get(ENVIRONMENT, "").strip()
    if not text:
        return DEFAULT_MAX_TENSOR_BYTES
    try:
        return parse_size(text)
    except ValueError:
        raise InputError(f"{ENVIRONMENT}={text!r} is not a size such as 512M or 8G") from None


def as_bytes(limit):
    """``limit`` (bytes, or a size such as "8G") as a number of bytes; None stays None.
    InputError if it is not a positive size."""
    if limit is None:
        return None
    try:
        value = parse_size(limit) if isinstance(limit, str) else int(limit)
    except (ValueError, TypeError, OverflowError):
        value = 0
    if value < 1 or isinstance(limit, bool):
        raise InputError(f"max_tensor_bytes must be a positive number of bytes or a size "
                         f"such as '8G', not {limit!r}")
    return value


@contextlib.contextmanager
def scope(limit):
    """Make ``limit`` (see :func:`as_bytes`) the limit inside the ``with`` block; None leaves
    the limit in force as it is."""
    value = as_bytes(limit)
    if value is None:
        yield
        return
    token = _scoped.set(value)
    try:
        yield
    finally:
        _scoped.reset(token)


def tensor_bytes(shape, itemsize):
    """The bytes of a tensor of ``shape`` (a dynamic dimension, -1, counts as 1) and
    ``itemsize``, as an exact Python int."""
    return itemsize * math.prod(int(d) if d >= 0 else 1 for d in shape)


def check(nbytes, what):
    """Raise LimitError if ``nbytes`` is over the limit; ``what`` names the tensor for the
    message ("tensor f/x float32[100000x100000x3]")."""
    limit = max_tensor_bytes()
    if nbytes > limit:
        raise LimitError(f"{what} would take {_size_text(nbytes)}, over the limit of "
                         f"{_size_text(limit)}: raise it with max_tensor_bytes= (Compiler, "
                         f"myelin.onnx.load) or ${ENVIRONMENT} if this is meant")


def check_tensor(shape, itemsize, what):
    """Raise LimitError if a tensor of ``shape`` and ``itemsize`` is over the limit."""
    check(tensor_bytes(shape, itemsize), what)


def _size_text(nbytes):
    for unit in ("T", "G", "M", "K"):
        if nbytes >= _UNITS[unit]:
            return f"{nbytes / _UNITS[unit]:.4g} {unit}iB ({nbytes} bytes)"
    return f"{nbytes} bytes"
