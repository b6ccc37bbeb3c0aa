"""The op registry and myelin's op definitions.

Importing this package registers every built-in op type (the modules below each register the
ops of one concept). Look definitions up with :func:`lookup`/:func:`find`, list them with
:func:`types`, compute an op's output types with :func:`infer`, and add custom ops with
:func:`register`.
"""

from myelin.ops import (array, attention, elementwise, fused, indexing, linalg, nn,  # noqa: F401
                        reduction, shape, state)
from myelin.ops import resize  # noqa: F401
from myelin.ops import conv  # noqa: F401
from myelin.ops import sampling  # noqa: F401
from myelin.ops import roi  # noqa: F401
from myelin.ops import control  # noqa: F401
from myelin.ops import quantized  # noqa: F401
from myelin.ops.registry import (Kind, OpDef, TensorType, attribute, broadcast_shapes,
                                 check_supported, find, infer, lookup, register, types,
                                 unregister)

__all__ = ["Kind", "OpDef", "TensorType", "attribute", "broadcast_shapes", "check_supported",
           "find", "infer", "lookup", "register", "types", "unregister"]
