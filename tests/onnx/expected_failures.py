"""ONNX backend test cases myelin is known to fail, each with the reason (filled in below)."""

EXPECTED_FAILURES = {}
