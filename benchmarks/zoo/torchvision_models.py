"""torchvision architectures with seeded random weights: CNNs, mobile nets, vision
transformers, segmentation and detection heads, a 3-D video net."""

import torch

from zoo import exporting
from zoo.catalog import Input, Model, add


class _Out(torch.nn.Module):
    """A segmentation model's ``out`` tensor (torchvision returns a dict)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


class _Detect(torch.nn.Module):
    """A detection model on one image given as a batch of one: boxes, scores, labels."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        found = self.model([x[0]])[0]
        return found["boxes"], found["scores"], found["labels"]


def _construct(options):
    torchvision = exporting.import_torchvision()
    module = torchvision.models
    for part in options.get("module", "").split("."):
        module = getattr(module, part) if part else module
    exporting.seed()
    model = getattr(module, options["arch"])(weights=None, **options.get("kwargs", {}))
    if options.get("head") == "vgg":
        # VGG's 25088x4096 and 4096x4096 layers (480 MB) replaced by a smaller classifier.
        model.classifier = torch.nn.Sequential(torch.nn.Linear(25088, 256), torch.nn.ReLU(),
                                               torch.nn.Linear(256, 1000))
    return model


def module(model):
    """The model as a PyTorch module in eval mode (seeded random weights, batch-norm
    statistics calibrated) and example arguments, as :func:`build` exports it."""
    options = model.options
    net = _construct(options)
    shape = model.inputs[0].shape
    wrap = options.get("wrap")
    if wrap == "detect":
        net = _Detect(net.eval())
    else:
        batch = (2,) + tuple(shape[1:])
        exporting.calibrate_batch_norm(net, lambda: (torch.randn(batch),))
        if wrap == "out":
            net = _Out(net)
    return net.eval(), (torch.randn(shape),)


def build(model, path):
    options = model.options
    net, _ = module(model)
    shape = model.inputs[0].shape
    wrap = options.get("wrap")
    dynamic = {"input": {0: "batch"}, "output": {0: "batch"}} if options.get("dynamic") else None
    outputs = ["boxes", "scores", "labels"] if wrap == "detect" else ["output"]
    how = exporting.export(net, (torch.randn(shape),), path, ["input"], outputs,
                           dynamic_axes=dynamic, dynamo=options.get("dynamo", False),
                           dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},)
                           if options.get("dynamic") and options.get("dynamo") else None)
    extra = ", dynamic batch" if options.get("dynamic") else ""
    return f"torchvision {options['arch']} {list(shape)}, random weights, {how}{extra}"


def vision(name, arch, size=224, batch=1, fast=False, cnn=False, transformer=False, **options):
    shape = (batch, 3, size, size) if "shape" not in options else options.pop("shape")
    return add(Model(name, "torchvision", build, (Input("image", shape),),
                     dict(arch=arch, **options), fast=fast, cnn=cnn, transformer=transformer))


# CNNs.
vision("resnet18", "resnet18", fast=True, cnn=True)
vision("resnet18_dynamo", "resnet18", dynamo=True, cnn=True)
vision("resnet18_dynbatch", "resnet18", batch=2, dynamic=True, cnn=True)
vision("resnet50", "resnet50", cnn=True)
vision("resnet50_batch8", "resnet50", batch=8, cnn=True)
vision("resnext50_32x4d", "resnext50_32x4d", size=160, cnn=True)
vision("densenet121", "densenet121", size=160, cnn=True)
vision("googlenet", "googlenet", kwargs=dict(aux_logits=False, init_weights=True), cnn=True)
vision("inception_v3", "inception_v3", size=299, kwargs=dict(aux_logits=False, init_weights=True), cnn=True)
vision("vgg11_bn", "vgg11_bn", head="vgg", cnn=True)
vision("squeezenet1_1", "squeezenet1_1", fast=True, cnn=True)
vision("regnet_y_400mf", "regnet_y_400mf", cnn=True)
vision("regnet_x_400mf_dynamo", "regnet_x_400mf", dynamo=True, cnn=True)
vision("convnext_tiny", "convnext_tiny", size=160, cnn=True)
# Mobile nets (depthwise convolutions).
vision("mobilenet_v2", "mobilenet_v2", fast=True, cnn=True)
vision("mobilenet_v2_dynbatch_dynamo", "mobilenet_v2", batch=2, dynamic=True, dynamo=True, cnn=True)
vision("mobilenet_v3_small", "mobilenet_v3_small", cnn=True)
vision("mobilenet_v3_large", "mobilenet_v3_large", cnn=True)
vision("efficientnet_b0", "efficientnet_b0", fast=True, cnn=True)
vision("efficientnet_v2_s", "efficientnet_v2_s", size=192, cnn=True)
vision("mnasnet0_5", "mnasnet0_5", cnn=True)
vision("shufflenet_v2_x1_0", "shufflenet_v2_x1_0", cnn=True)
# Vision transformers.
vision("swin_t", "swin_t", transformer=True)
vision("maxvit_t", "maxvit_t", transformer=True)
# Segmentation heads.
vision("fcn_resnet50", "fcn_resnet50", size=128, module="segmentation", wrap="out",
       kwargs=dict(weights_backbone=None, aux_loss=False), cnn=True)
vision("deeplabv3_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large", size=224,
       module="segmentation", wrap="out", kwargs=dict(weights_backbone=None, aux_loss=False), cnn=True)
vision("lraspp_mobilenet_v3_large", "lraspp_mobilenet_v3_large", size=224,
       module="segmentation", wrap="out", kwargs=dict(weights_backbone=None), cnn=True)
# Detection (NonMaxSuppression, RoiAlign and data-dependent shapes).
vision("ssdlite320_mobilenet_v3_large", "ssdlite320_mobilenet_v3_large", size=320,
       module="detection", wrap="detect", kwargs=dict(weights_backbone=None))
vision("fasterrcnn_mobilenet_v3_large_320_fpn", "fasterrcnn_mobilenet_v3_large_320_fpn",
       size=320, module="detection", wrap="detect", kwargs=dict(weights_backbone=None))
# Video (3-D convolutions).
vision("r3d_18", "r3d_18", module="video", shape=(1, 3, 8, 64, 64), cnn=True)
