"""The op registry and myelin's op definitions.

Importing this package registers every built-in op type (the modules below each register the
ops of one concept). Look definitions up with :func:`lookup`/:func:`find`, list them with
:func:`types`, compute an op's output types with :func:`infer`, and add custom ops with
:func:`register`. The other layers' tables derive from the entries: :func:`named` (the
importers' one-to-one names), :func:`helper` (the Builder's methods), :func:`expand` and
:func:`expansion_uses` (composite ops, for the back ends).
"""

from myelin.ops import (array, attention, elementwise, fused, indexing, linalg, nn,  # noqa: F401
                        reduction, shape, state)
from myelin.ops import resize  # noqa: F401
from myelin.ops import conv  # noqa: F401
from myelin.ops import sampling  # noqa: F401
from myelin.ops import roi  # noqa: F401
from myelin.ops import control  # noqa: F401
from myelin.ops import quantized  # noqa: F401
from myelin.ops.registry import (Expander, Kind, OpDef, TensorType, attribute,
                                 broadcast_shapes, check_supported, expand, expansion_uses,
                                 find, helper, infer, lookup, named, register, types,
                                 unregister)

__all__ = ["Expander", "Kind", "OpDef", "TensorType", "attribute", "broadcast_shapes",
           "check_supported", "expand", "expansion_uses", "find", "helper", "infer", "lookup",
           "named", "register", "types", "unregister"]
