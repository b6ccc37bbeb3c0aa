"""The model zoo: real architectures as ONNX files, checked against ONNX Runtime.

``build.py`` makes the models (torchvision, timm and transformers architectures with seeded
random weights, their float16 and int8 variants, ONNX files shipped in PyPI wheels) into a
cache folder; ``run.py`` checks each one in a subprocess: import, compile time, error per
output, repeatability over 50 runs and latency against ONNX Runtime. The catalog of models is
:mod:`zoo.catalog` (one module per family adds to it); the checks are :mod:`zoo.check`, which
the test suite also runs on tiny models.
"""
