"""Weights stored narrower: ``Compiler(weights="bfloat16")`` (or ``"float16"``) has every float32
matrix product whose B is constant weights keep them in that type.

A product at batch 1 (a token of a decoder, an MLP answering one request) reads each weight
once, so its time is the weights' bytes over the bandwidth of the cache or memory they come
from; half the bytes, about half the time. The pass sets the ``weights`` attribute of such
``MatMul`` and ``FusedMatMul`` ops; their kernel packs B into panels of that type when the model
compiles (each weight rounded once, to nearest) and converts each panel vector to float32 as the
tile reads it, the sums staying float32. The reference interpreter rounds B the same way, so it
computes what the compiled code does. Runs only when the option is given, at every opt level.
A product whose weights do not fit float16's range (magnitudes past 65504, which would become
infinities) keeps them float32, with a warning on the ``myelin`` logger; bfloat16 has
float32's range.
"""

import logging

import numpy as np

from myelin.flow import dtypes
from myelin.ops.linalg import WEIGHT_STORAGE

log = logging.getLogger("myelin")
_FLOAT16_MAX = float(np.finfo(np.float16).max)
STORAGE_TYPES = tuple(name for name in WEIGHT_STORAGE if name)    # (the option's values)
_PRODUCTS = ("MatMul", "FusedMatMul")


def store_weights(flow, ctx):
    """Mark the float32 products of ``flow`` whose B is constant weights to store them as
    ``ctx.weights``; True if any was marked."""
    if not ctx.weights:
        return False
    changed = False
    for func in flow.funcs.values():
        for op in func.ops:
            b = op.inputs[1] if op.type in _PRODUCTS else None
            if (b is None or not b.fixed or b.dtype != dtypes.DT_FLOAT32
                    or op.outputs[0].dtype != dtypes.DT_FLOAT32
                    or op.attrs.get("weights", "") == ctx.weights):
                continue
            if ctx.weights == "float16" and _past_float16(b.data):
                log.warning("%s: weights %s exceed float16's range; kept float32", op.name,
                            b.name)
                continue
            op.attrs["weights"] = ctx.weights
            changed = True
    return changed


def _past_float16(data):
    magnitudes = np.abs(np.asarray(data))
    return bool(np.any(magnitudes[np.isfinite(magnitudes)] > _FLOAT16_MAX))
