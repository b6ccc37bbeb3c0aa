"""The flow IR: graph objects, data types, .flow files, text and DOT dumps (the Builder that
makes flows with the op registry is :mod:`myelin.builder`)."""

from myelin.flow.dtypes import (DT_BFLOAT16, DT_BOOL, DT_DOUBLE, DT_FLOAT, DT_FLOAT16, DT_FLOAT32,
                                DT_FLOAT64, DT_INT, DT_INT8, DT_INT16, DT_INT32, DT_INT64,
                                DT_RESOURCE, DT_STRING, DT_UINT8, DT_UINT16)
from myelin.flow.graph import (Blob, Connector, Flow, FuncFlags, Function, OpFlags, Operation,
                               VarFlags, Variable)
