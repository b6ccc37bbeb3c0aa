"""Exception classes raised by myelin.

Every error myelin raises on bad input derives from :class:`MyelinError`, carries a message
that names what is wrong and, where it applies, where (a byte offset, an op name, a variable).
"""


class MyelinError(Exception):
    """Base class of all myelin errors."""


class FlowFormatError(MyelinError, ValueError):
    """A .flow file (or byte string) is malformed. ``offset`` is the byte position of the fault."""

    def __init__(self, message, offset=None):
        self.offset = offset
        if offset is not None:
            message = f"{message} (at byte offset {offset})"
        super().__init__(message)


class FlowError(MyelinError, ValueError):
    """The flow graph is inconsistent or an API call would make it so (duplicate names, bad links)."""


class ShapeError(MyelinError, ValueError):
    """Shapes or data types of an op's inputs do not fit together."""


class UnsupportedOpError(MyelinError, NotImplementedError):
    """One or more ops have no definition or no kernel; ``ops`` lists every one of them."""

    def __init__(self, message, ops=()):
        self.ops = list(ops)
        super().__init__(message)


class UnsupportedTypeError(MyelinError, NotImplementedError):
    """A model uses a data type myelin does not compute with (float8, int4, strings, ...)."""


class InputError(MyelinError, ValueError):
    """A value given at run time (an input tensor, a key) does not fit what the cell expects."""


class CompileError(MyelinError, RuntimeError):
    """The compiler failed internally; the message names the op or step it was working on."""


class DeviceError(MyelinError, RuntimeError):
    """A GPU cannot be used: its driver, the device or a library it needs is missing, or the
    driver reported a failure (out of memory, a failed launch); the message says which."""


class LimitError(MyelinError, MemoryError):
    """Something is larger than a limit myelin keeps to bound its memory and stack: a tensor
    or an instance over the size limit (:mod:`myelin.limits`, ``MYELIN_MAX_TENSOR_BYTES``),
    or subgraphs nested too deep. Raised before anything is allocated; the message says how
    to raise the limit where there is one."""


class SerializationError(MyelinError, ValueError):
    """A compiled model cannot be saved, pickled or loaded (:mod:`myelin.runtime.serialize`):
    it has no machine code to keep (a GPU network), the file or bytes are not a saved model,
    are damaged, truncated or of another format version, or its code needs CPU features this
    machine lacks; the message says which."""


class ExportError(MyelinError, RuntimeError):
    """An export to a library with a C API (:mod:`myelin.aot`) failed: no C toolchain
    links for the target, or the toolchain failed (its messages are in this one's)."""
