"""Exporting PyTorch modules to ONNX for the zoo: seeded random weights, batch-norm
statistics from random batches, the classic (TorchScript) and dynamo exporters, and the
stand-ins that let PyPI's torchvision import beside a CPU build of torch."""

import os
import warnings

import torch

nn = torch.nn
OPSET = 17


def import_torchvision():
    """``torchvision``, imported even where its C extension does not load: PyPI's wheel is
    built against CUDA torch, so with CPU torch its ops (nms, roi_align) are missing and the
    import fails while registering their fake versions. The ops are defined here with Python
    CPU versions, enough to build and export models (detection heads included)."""
    import sys
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
               "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor")
    lib.impl("nms", _nms, "CPU")
    lib.impl("roi_align", _roi_align, "CPU")
    import_torchvision.library = lib          # kept alive: dropping it undefines the ops
    import torchvision
    import torchvision.extension
    import torchvision.ops.roi_align
    # The ops exist now: let torchvision call them (their ONNX symbolics give NonMaxSuppression
    # and RoiAlign) instead of refusing or decomposing them.
    torchvision.extension._has_ops = _has_ops
    # (torchvision.ops.roi_align is the function: the module is found by its full name.)
    sys.modules["torchvision.ops.roi_align"]._has_ops = _has_ops
    return torchvision


def _has_ops() -> bool:
    """torchvision's check for its ops, answered yes (a function, not a lambda: tracing
    scripts the functions that call it)."""
    return True


def _nms(boxes, scores, iou_threshold):
    """Greedy non-maximum suppression: indices of the kept boxes by decreasing score."""
    order = torch.argsort(scores, descending=True)
    boxes = boxes[order]
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    keep = []
    for i in range(len(order)):
        if suppressed[i]:
            continue
        keep.append(i)
        w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        inter = w * h
        suppressed |= inter / (areas[i] + areas - inter) > iou_threshold
    return order[torch.tensor(keep, dtype=torch.long)]


def _roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    from torchvision.ops.roi_align import _roi_align as python_roi_align
    return python_roi_align(input, rois, spatial_scale, pooled_height, pooled_width,
                            sampling_ratio, aligned)


def seed(value=0):
    torch.manual_seed(value)


def calibrate_batch_norm(module, make_batch, batches=2):
    """Give every BatchNorm the statistics of the module's own activations on random batches
    (as training would), so that a randomly initialised deep network has activations of
    ordinary size rather than exploding or vanishing ones."""
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return module.eval()
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None                  # a cumulative average over the batches
    module.train()
    with torch.no_grad():
        for _ in range(batches):
            module(*make_batch())
    return module.eval()


def export(module, args, path, input_names, output_names=None, dynamic_axes=None, dynamo=False,
           dynamic_shapes=None, opset=OPSET):
    """Export ``module`` called on ``args`` to ``path``: the classic TorchScript exporter
    (``dynamic_axes``) or the dynamo exporter (``dynamic_shapes``, opset 18 at least)."""
    module.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if dynamo:
            program = torch.onnx.export(module, tuple(args), dynamo=True, verbose=False,
                                        input_names=input_names, output_names=output_names,
                                        dynamic_shapes=dynamic_shapes,
                                        opset_version=max(opset, 18))
            program.save(str(path), external_data=False)
        else:
            torch.onnx.export(module, tuple(args), str(path), dynamo=False,
                              input_names=input_names, output_names=output_names,
                              dynamic_axes=dynamic_axes, opset_version=opset,
                              do_constant_folding=True)
    if os.path.exists(f"{path}.data"):
        raise RuntimeError(f"{path} was written with external data")
    return "dynamo exporter" if dynamo else "classic exporter"
