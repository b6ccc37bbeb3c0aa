"""Front ends that turn models from other frameworks into flows (ONNX, TensorFlow)."""
