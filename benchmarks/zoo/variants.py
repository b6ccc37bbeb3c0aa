"""Variants of float32 zoo models made with the tools users run: float16 with
onnxconverter-common, int8 with ONNX Runtime's quantization (static in QDQ and QOperator
formats with a small calibration set of random inputs, and dynamic)."""

import dataclasses

import numpy as np

from zoo import catalog, check
from zoo.catalog import Model, add


def _base_path(model, path):
    return catalog.paths(model.base, path.parent)[0]


def float16(model, path):
    import onnx
    from onnxconverter_common import float16 as converter

    keep = model.options["keep_io_types"]
    proto = converter.convert_float_to_float16(onnx.load(str(_base_path(model, path))),
                                               keep_io_types=keep)
    onnx.save(proto, str(path))
    try:
        check.ort_session(path)
    except Exception as error:
        # The converter leaves some Casts to float32 feeding float16 ops (attention's scale
        # computed from a shape): such a model is invalid, and no zoo model.
        raise RuntimeError(f"onnxconverter-common made a model ONNX Runtime rejects: "
                           f"{str(error).splitlines()[0][:200]}") from None
    return (f"{model.base} converted to float16 by onnxconverter-common "
            f"(keep_io_types={keep})")


class _RandomReader:
    """A calibration reader giving a few batches of random inputs of the model's kinds."""

    def __init__(self, names, specs, batches=4):
        rng = np.random.default_rng(1)
        self.batches = iter([check.make_inputs(dict(zip(names, specs)), rng)
                             for _ in range(batches)])

    def get_next(self):
        return next(self.batches, None)


def int8_static(model, path):
    import onnx
    from onnxruntime import quantization as q

    base = _base_path(model, path)
    names = [i.name for i in onnx.load(str(base), load_external_data=False).graph.input]
    prepared = path.with_suffix(".pre.onnx")
    q.quant_pre_process(str(base), str(prepared), skip_symbolic_shape=True)
    fmt = q.QuantFormat.QDQ if model.options["format"] == "QDQ" else q.QuantFormat.QOperator
    try:
        q.quantize_static(str(prepared), str(path), _RandomReader(names, model.inputs),
                          quant_format=fmt, per_channel=model.options.get("per_channel", False),
                          activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8)
    finally:
        prepared.unlink(missing_ok=True)
    return (f"{model.base} quantized by onnxruntime quantize_static ({model.options['format']} "
            f"format, uint8 activations, int8 weights, 4 random calibration inputs)")


def int8_dynamic(model, path):
    from onnxruntime import quantization as q

    q.quantize_dynamic(str(_base_path(model, path)), str(path), weight_type=q.QuantType.QInt8)
    return f"{model.base} quantized by onnxruntime quantize_dynamic (int8 weights)"


def variant(name, base, build, precision, fast=False, **options):
    inputs = catalog.MODELS[base].inputs
    if options.get("keep_io_types") is False:
        inputs = tuple(dataclasses.replace(i, dtype="float16") if i.dtype == "float32" else i
                       for i in inputs)
    return add(Model(name, precision, build, inputs, options, precision=precision, base=base,
                     fast=fast))


variant("resnet18_fp16", "resnet18", float16, "float16", keep_io_types=True)
variant("mobilenet_v2_fp16", "mobilenet_v2", float16, "float16", keep_io_types=False)
variant("efficientnet_b0_fp16", "efficientnet_b0", float16, "float16", keep_io_types=True)
variant("levit_128s_fp16", "levit_128s", float16, "float16", keep_io_types=True)
variant("bert_fp16", "bert", float16, "float16", keep_io_types=True)
variant("mobilenet_v2_int8_qdq", "mobilenet_v2", int8_static, "int8", format="QDQ", fast=True)
variant("resnet18_int8_qdq", "resnet18", int8_static, "int8", format="QDQ", per_channel=True)
variant("resnet50_int8_qdq", "resnet50", int8_static, "int8", format="QDQ", per_channel=True)
variant("efficientnet_b0_int8_qdq", "efficientnet_b0", int8_static, "int8", format="QDQ")
variant("resnet18_int8_qop", "resnet18", int8_static, "int8", format="QOperator")
variant("bert_int8_dynamic", "bert", int8_dynamic, "int8")
variant("llama_int8_dynamic", "llama", int8_dynamic, "int8")
variant("gpt2_int8_dynamic", "gpt2", int8_dynamic, "int8")
