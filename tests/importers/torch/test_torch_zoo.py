"""A few of the zoo's real architectures (torchvision, timm, transformers; random weights)
through both paths, checked as ``benchmarks/zoo/torch_run.py`` checks the whole zoo. Skipped
where those packages are not installed (CI has PyTorch alone)."""

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from zoo import catalog, check, torch_run  # noqa: E402

MODELS = [("lcnet_050", "timm"), ("squeezenet1_1", "torchvision"),
          ("bert_tiny", "transformers")]


@pytest.mark.parametrize("name,package", MODELS)
def test_zoo_model_through_both_paths(name, package, tmp_path):
    for needed in {package, "torchvision"}:      # (timm and transformers import torchvision)
        if importlib.util.find_spec(needed) is None:
            pytest.skip(f"{needed} is not installed")
    out = tmp_path / "result.json"
    torch_run.check_here(name, out, latency=False)
    result = catalog.read_meta(out)
    for path in torch_run.PATHS:
        entry = result[path]
        assert entry["outcome"] == "ok", (path, entry.get("message"), entry.get("trace"))
        assert entry["rel_error"] <= check.TOLERANCE["float32"][0]
    assert result["dynamo"]["graphs"] == 1
