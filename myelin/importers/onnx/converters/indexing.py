"""ONNX indexing ops onto myelin's ops of the same semantics (myelin/ops/indexing.py), with
ONNX's constant inputs (axis, k, depth) read into attributes: GatherElements, GatherND,
ScatterElements (and the older Scatter), ScatterND, CumSum, TopK, OneHot, Trilu, and Hardmax
written with ArgMax and OneHot."""

import numpy as np

from myelin.importers.onnx.converters import converter


@converter("GatherElements")
def _gather_elements(ctx):
    return ctx.op("GatherElements", ctx.inputs, {"axis": ctx.attr("axis", 0)})


@converter("GatherND")
def _gather_nd(ctx):
    return ctx.op("GatherND", ctx.inputs, {"batch_dims": ctx.attr("batch_dims", 0)})


@converter("ScatterElements", "Scatter")
def _scatter_elements(ctx):
    return ctx.op("ScatterElements", ctx.inputs, {"axis": ctx.attr("axis", 0),
                                                  "reduction": ctx.attr("reduction", "none")})


@converter("ScatterND")
def _scatter_nd(ctx):
    return ctx.op("ScatterND", ctx.inputs, {"reduction": ctx.attr("reduction", "none")})


@converter("CumSum")
def _cumsum(ctx):
    return ctx.op("CumSum", [ctx.input(0)], {"axis": int(ctx.scalar(1)),
                                             "exclusive": bool(ctx.attr("exclusive", 0)),
                                             "reverse": bool(ctx.attr("reverse", 0))})


@converter("TopK")
def _topk(ctx):
    """The k largest or smallest values and their indices; k is an attribute before opset 10."""
    k = ctx.attr("k") if ctx.opset < 10 else int(ctx.scalar(1))
    return ctx.op("TopK", [ctx.input(0)], {"k": k, "axis": ctx.attr("axis", -1),
                                           "largest": bool(ctx.attr("largest", 1)),
                                           "sorted": bool(ctx.attr("sorted", 1))}, outputs=2)


@converter("OneHot")
def _one_hot(ctx):
    indices, values = ctx.input(0), ctx.input(2)
    if indices.dtype not in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                             "uint64"):
        indices = ctx.cast(indices, "int64")   # ONNX allows float indices
    depth = int(ctx.scalar(1))
    return ctx.op("OneHot", [indices, values], {"depth": depth, "axis": ctx.attr("axis", -1)})


@converter("Trilu")
def _trilu(ctx):
    k = int(ctx.scalar(1, 0))
    return ctx.op("Trilu", [ctx.input(0)], {"upper": bool(ctx.attr("upper", 1)), "k": k})


@converter("Hardmax")
def _hardmax(ctx):
    """1 at the first maximum along ``axis``, 0 elsewhere (before opset 13 the input is
    flattened to 2-D at ``axis``, as for Softmax)."""
    x = ctx.input(0)
    if ctx.opset < 13:
        axis = ctx.attr("axis", 1) % x.rank
        work = ctx.reshape(x, (int(np.prod(x.shape[:axis], dtype=np.int64)), -1))
        axis = 1
    else:
        work, axis = x, ctx.attr("axis", -1) % x.rank
    index = ctx.op("ArgMax", [work], {"axis": axis, "keepdims": False})
    on_off = ctx.const(np.array([0, 1]), x.dtype)
    hot = ctx.op("OneHot", [index, on_off], {"depth": work.shape[axis], "axis": axis})
    return ctx.reshape(hot, x.shape)
