"""timm architectures with seeded random weights: vision transformers and hybrids (ViT, DeiT,
MaxViT, CoAtNet, LeViT, MobileViT...), mobile nets (GhostNet, MixNet), HRNet, ConvMixer and
other CNNs with unusual blocks."""

import torch

from zoo import exporting
from zoo.catalog import Input, Model, add


def module(model):
    """The model as a PyTorch module in eval mode (seeded random weights, batch-norm
    statistics calibrated) and example arguments, as :func:`build` exports it."""
    exporting.import_torchvision()       # timm imports it
    import timm

    options = model.options
    shape = model.inputs[0].shape
    exporting.seed()
    net = timm.create_model(options["arch"], pretrained=False, **options.get("kwargs", {}))
    exporting.calibrate_batch_norm(net, lambda: (torch.randn((2,) + tuple(shape[1:])),))
    return net.eval(), (torch.randn(shape),)


def build(model, path):
    options = model.options
    shape = model.inputs[0].shape
    net, _ = module(model)
    how = exporting.export(net, (torch.randn(shape),), path, ["input"], ["output"],
                           dynamo=options.get("dynamo", False))
    return f"timm {options['arch']} {list(shape)}, random weights, {how}"


def timm_model(name, arch, size=224, fast=False, cnn=False, transformer=False, **options):
    return add(Model(name, "timm", build, (Input("image", (1, 3, size, size)),),
                     dict(arch=arch, **options), fast=fast, cnn=cnn, transformer=transformer))


timm_model("vit_tiny", "vit_tiny_patch16_224", transformer=True)
timm_model("vit_small_dynamo", "vit_small_patch16_224", dynamo=True, transformer=True)
timm_model("deit_tiny_distilled", "deit_tiny_distilled_patch16_224", transformer=True)
timm_model("maxvit_pico", "maxvit_rmlp_pico_rw_256", size=256, transformer=True)
timm_model("coatnet_nano", "coatnet_nano_rw_224", transformer=True)
timm_model("levit_128s", "levit_128s", transformer=True)
timm_model("mobilevit_xxs", "mobilevit_xxs", size=256, transformer=True)
timm_model("efficientformer_l1", "efficientformer_l1", transformer=True)
timm_model("pvt_v2_b0", "pvt_v2_b0", transformer=True)
timm_model("cait_xxs24", "cait_xxs24_224", transformer=True)
timm_model("mixer_s16", "mixer_s16_224", transformer=True)
timm_model("poolformer_s12", "poolformer_s12")
timm_model("ghostnet_100", "ghostnet_100", cnn=True)
timm_model("mixnet_s", "mixnet_s", cnn=True)
timm_model("lcnet_050", "lcnet_050", fast=True, cnn=True)
timm_model("rexnet_100", "rexnet_100", cnn=True)
timm_model("hrnet_w18_small", "hrnet_w18_small", cnn=True)
timm_model("convmixer_768_32", "convmixer_768_32", size=112, cnn=True)
timm_model("resnest14d", "resnest14d", cnn=True)
timm_model("skresnet18", "skresnet18", cnn=True)
timm_model("dla34", "dla34", size=160, cnn=True)
timm_model("repvgg_a0", "repvgg_a0", cnn=True)
timm_model("nfnet_l0", "nfnet_l0", size=160, cnn=True)
timm_model("edgenext_xx_small", "edgenext_xx_small", size=256)
