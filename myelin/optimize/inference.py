"""Inference-mode rewrites: batch normalization and dropout lowered, scales folded into weights.

:func:`simplify_inference` turns ``BatchNormalization`` with constant parameters into
``Add(Mul(x, s), t)`` with ``s = scale / sqrt(var + epsilon)`` and ``t = B - mean * s``
shaped to broadcast over axis 1, and removes ``Dropout``. :func:`fold_scale_axis` multiplies
a constant per-output-channel (or scalar) ``Mul`` that follows a ``MatMul`` into the MatMul's
constant weight, so that only a bias ``Add`` (if any) stays behind the product. Behind a
``Conv`` whose output has no other use, a constant per-channel ``Mul`` is folded into its
weight and bias and a per-channel ``Add`` into its bias (a batch normalization disappears).
A ``Conv`` whose kernel has taps that read only padding, whatever the output position (the
large dilations of DeepLab's ASPP head on a small feature map), loses them.
"""

import numpy as np

from myelin.flow import dtypes
from myelin.ops import conv as conv_ops
from myelin.ops import registry
from myelin.optimize.cleanup import apply_rules, forward, pinned


def _constant(flow, name, array, dtype):
    """A new constant named after ``name`` holding ``array`` converted to type ``dtype``."""
    return flow.var(flow.unique_var_name(name), data=np.asarray(array, dtypes.to_numpy(dtype)))


def _lower_batch_norm(flow, op):
    """Replace a BatchNormalization with constant parameters by a Mul and an Add."""
    x, *params = op.inputs
    if not all(var.fixed for var in params):
        return False
    scale, bias, mean, var = (registry.as_float64(p.data).reshape(-1) for p in params)
    factor = scale / np.sqrt(var + registry.attribute(op, "epsilon"))
    per_channel = (-1,) + (1,) * (x.rank - 2)
    factor_var = _constant(flow, f"{op.name}/scale", factor.reshape(per_channel), x.dtype)
    shift_var = _constant(flow, f"{op.name}/shift", (bias - mean * factor).reshape(per_channel),
                          x.dtype)
    func, out = op.func, op.outputs[0]
    flow.delete_op(op)
    mul = flow.op(flow.unique_op_name(f"{op.name}/Mul"), "Mul", func, [x, factor_var])
    (scaled,) = registry.infer(mul)
    mul.add_output(flow.var(flow.unique_var_name(f"{mul.name}:0"), scaled.dtype, scaled.shape))
    flow.op(flow.unique_op_name(f"{op.name}/Add"), "Add", func, [mul.outputs[0], shift_var],
            [out])
    return True


def _live_taps(g, axis):
    """The first and last tap of ``axis`` that some output position reads inside the input."""
    stride, pad, dilation = g.strides[axis], g.pads_begin[axis], g.dilations[axis]
    live = [k for k in range(g.kernel[axis])
            if any(0 <= o * stride - pad + k * dilation < g.input[axis]
                   for o in range(g.output[axis]))]
    return (live[0], live[-1]) if live else (0, g.kernel[axis] - 1)


def _crop_dead_taps(flow, op):
    """Drop the kernel taps of a Conv with a constant weight that fall in the padding for every
    output (a dilated 3x3 whose dilation exceeds the image reads only its centre): the
    weight is cropped and the pads moved by the taps dropped, so every output reads the
    same input elements with the same weights."""
    weight = op.inputs[1]
    if not weight.fixed or weight is op.inputs[0] or weight.consumers != [op]:
        return False
    g = conv_ops.geometry(op)
    spans = [_live_taps(g, axis) for axis in range(g.rank)]
    if all((first, last) == (0, k - 1) for (first, last), k in zip(spans, g.kernel)):
        return False
    begin = [p - first * d for p, (first, _), d in zip(g.pads_begin, spans, g.dilations)]
    end = [p - (k - 1 - last) * d
           for p, (_, last), k, d in zip(g.pads_end, spans, g.kernel, g.dilations)]
    if min(begin + end) < 0:
        return False
    crop = (slice(None), slice(None)) + tuple(slice(first, last + 1) for first, last in spans)
    op.replace_input(weight, _constant(flow, f"{weight.name}/cropped", weight.data[crop],
                                       weight.dtype))
    op.attrs["pads"] = begin + end
    op.attrs["auto_pad"] = "NOTSET"
    op.attrs["kernel_shape"] = [last - first + 1 for first, last in spans]
    return True


_LOWERINGS = {"BatchNormalization": _lower_batch_norm,
              "Dropout": lambda flow, op: forward(flow, op, [op.inputs[0]]),
              "Conv": _crop_dead_taps}


def simplify_inference(flow, ctx):
    """Lower BatchNormalization and Dropout for inference and crop the dead taps of
    convolutions; returns True if the flow changed."""
    return apply_rules(flow, ctx, _LOWERINGS, "simplify_inference")


def _scaled_product(op):
    """(MatMul, product, scale) if Mul ``op`` scales the only use of a MatMul's product, that
    has a constant weight, by a constant scalar or per-output-channel vector; else None."""
    out = op.outputs[0]
    for position in (0, 1):
        product, scale = op.inputs[position], op.inputs[1 - position]
        matmul = product.producer
        if (matmul is None or matmul.type != "MatMul" or matmul.func is not op.func
                or pinned(product) or product.consumers != [op] or not scale.fixed
                or (out.dtype, out.shape) != (product.dtype, product.shape)
                or any(d != 1 for d in scale.shape[:-1])):
            continue
        a, weight = matmul.inputs
        if weight.fixed and a is not weight:
            return matmul, product, scale
    return None


def _per_channel(constant, out):
    """A constant that broadcasts over ``out`` along channel axis 1 only, as one float64 value
    per channel; None for any other shape."""
    shape = tuple(constant.shape)
    if len(shape) > out.rank or out.rank < 2:
        return None
    shape = (1,) * (out.rank - len(shape)) + shape
    if (any(d != 1 for axis, d in enumerate(shape) if axis != 1)
            or shape[1] not in (1, out.shape[1])):
        return None
    return np.broadcast_to(registry.as_float64(constant.data).reshape(-1), (out.shape[1],))


def _fold_into_conv(flow, op):
    """Fold a constant per-channel ``Mul`` (into the weight and bias) or ``Add`` (into the
    bias) that is the only use of a Conv's output; returns the Conv, or None."""
    out = op.outputs[0]
    for position in (0, 1):
        product, other = op.inputs[position], op.inputs[1 - position]
        conv = product.producer
        if (conv is None or conv.type != "Conv" or conv.func is not op.func or pinned(product)
                or product.consumers != [op] or not other.fixed
                or (out.dtype, out.shape) != (product.dtype, product.shape)):
            continue
        factor = _per_channel(other, product)
        weight = conv.inputs[1]
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        if (factor is None or not weight.fixed or weight is conv.inputs[0]
                or (bias is not None and (not bias.fixed or bias in conv.inputs[:2]))):
            continue
        old_bias = (registry.as_float64(bias.data).reshape(-1) if bias is not None
                    else np.zeros(product.shape[1]))
        new_bias = old_bias + factor
        if op.type == "Mul":
            shape = (-1,) + (1,) * (weight.rank - 1)
            scaled = registry.as_float64(weight.data) * factor.reshape(shape)
            conv.replace_input(weight, _constant(flow, f"{weight.name}/scaled", scaled,
                                                 weight.dtype))
            new_bias = old_bias * factor if bias is not None else None
        if new_bias is not None:
            bias_var = _constant(flow, f"{conv.name}/bias", new_bias, product.dtype)
            if bias is not None:
                conv.replace_input(bias, bias_var)
            else:
                conv.add_input(bias_var)
        forward(flow, op, [product])
        return conv
    return None


def fold_scale_axis(flow, ctx):
    """Fold constant scales after MatMuls into their weights; returns True if any folded."""
    changed = False
    for func in flow.funcs.values():
        for op in flow.order(func):
            conv = _fold_into_conv(flow, op) if op.type in ("Mul", "Add") else None
            if conv is not None:
                ctx.log(f"fold_scale_axis: folded {op.name} into the weights of {conv.name}")
                changed = True
                continue
            found = _scaled_product(op) if op.type == "Mul" else None
            if found is None:
                continue
            matmul, product, scale = found
            weight = matmul.inputs[1]
            factor = registry.as_float64(scale.data).reshape(-1)
            if registry.attribute(matmul, "transpose_b"):
                factor = factor.reshape(-1, 1)
            scaled = _constant(flow, f"{weight.name}/scaled",
                               registry.as_float64(weight.data) * factor, weight.dtype)
            matmul.replace_input(weight, scaled)
            forward(flow, op, [product])
            ctx.log(f"fold_scale_axis: folded {op.name} into the weight of {matmul.name}")
            changed = True
    return changed
