"""Imported ONNX models: a ResNet-18 at batch 1 (224x224) and a 4-layer transformer encoder
(d=256, 4 heads, sequence 128), exported from PyTorch with random weights, run by myelin, ONNX
Runtime (its default threads and one thread) and PyTorch in the same run; plus myelin's
compile time (import, optimize, LLVM).

Run: ``python benchmarks/onnx_models.py``.
"""

import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "onnx"))
from common import compare, ort_session  # noqa: E402
from torch_models import ResNet18, encoder, export  # noqa: E402

import myelin.onnx  # noqa: E402

MODELS = {
    "ResNet-18, batch 1, 224x224": (lambda: ResNet18(width=64, classes=1000), (1, 3, 224, 224)),
    "encoder 4 x d256, seq 128": (lambda: encoder(256, 4, 4), (1, 128, 256)),
}


def main():
    torch.manual_seed(0)
    for title, (factory, shape) in MODELS.items():
        module = factory().eval()
        model_bytes = export(module, torch.randn(*shape), dynamic_batch=False)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)

        start = time.perf_counter()
        model = myelin.onnx.load(model_bytes, input_shapes={"x": shape})
        compile_seconds = time.perf_counter() - start

        session, single = ort_session(model_bytes), ort_session(model_bytes, 1)
        tensor = torch.from_numpy(x)
        with torch.no_grad():
            compare(f"{title} (myelin compile {compile_seconds:.2f} s)", {
                "myelin": lambda: model.run([x]),
                "onnxruntime": lambda: session.run(None, {"x": x}),
                "onnxruntime 1t": lambda: single.run(None, {"x": x}),
                "pytorch": lambda: module(tensor),
            }, min_seconds=2.0)
        error = np.linalg.norm(model.run([x])[0] - session.run(None, {"x": x})[0])
        print(f"  relative difference to onnxruntime: "
              f"{error / np.linalg.norm(session.run(None, {'x': x})[0]):.2e}")


if __name__ == "__main__":
    main()
