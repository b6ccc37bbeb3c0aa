"""The zoo's catalog: what each model is, how it is built and what its inputs are.

A :class:`Model` names a builder (a function writing the ONNX file) and describes its inputs
by kind, so that the runner can make fresh inputs of the right sort: images, token ids in
range, attention masks, audio, fixed values. Building writes ``NAME.onnx`` and a sidecar
``NAME.json`` (the inputs as the file names them, with shapes and kinds, and where the model
came from) into the zoo folder: ``$MYELIN_ZOO_DIR``, else ``benchmarks/zoo/models``.
"""

import dataclasses
import json
import os
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class Input:
    """One graph input: its kind (``image``, ``float``, ``audio``: normal or uniform floats;
    ``tokens``: integer ids in [0, high); ``mask``: ones with a zero tail; ``positions``:
    0, 1, 2...; ``value``: exactly ``value``), concrete shape and dtype."""

    kind: str
    shape: tuple
    dtype: str = "float32"
    high: int = 0
    value: object = None

    def describe(self, name):
        entry = dataclasses.asdict(self)
        entry["name"] = name
        entry["shape"] = list(self.shape)
        return entry


@dataclasses.dataclass(frozen=True)
class Model:
    """A zoo model: ``build(model, path)`` writes the ONNX file at ``path`` and returns a
    one-line description of its source; ``inputs`` are in the order of the graph's inputs.
    ``base`` is the float32 model a float16 or int8 variant is made from, ``precision`` the
    model's arithmetic (float32, float16, int8), ``fast`` marks the quick subset, ``cnn``
    the convolutional networks (classification, detection and segmentation backbones, mobile
    nets) whose speed ``run.py --cnn`` sums up, and ``transformer`` the float32 networks of
    transformer layers (text, audio and vision; and MLP-Mixer, whose layers are a
    transformer's with the attention made a product) whose speed ``run.py --transformers``
    sums up."""

    name: str
    family: str
    build: Callable
    inputs: tuple
    options: dict = dataclasses.field(default_factory=dict)
    precision: str = "float32"
    base: str = None
    fast: bool = False
    cnn: bool = False
    transformer: bool = False


MODELS = {}


def add(model):
    if model.name in MODELS:
        raise ValueError(f"two zoo models are named {model.name}")
    MODELS[model.name] = model
    return model


def zoo_dir():
    """Where built models live: $MYELIN_ZOO_DIR, else benchmarks/zoo/models."""
    return Path(os.environ.get("MYELIN_ZOO_DIR") or HERE / "models")


def paths(name, folder=None):
    folder = Path(folder or zoo_dir())
    return folder / f"{name}.onnx", folder / f"{name}.json"


def write_meta(json_path, meta):
    tmp = json_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, json_path)


def read_meta(json_path):
    return json.loads(Path(json_path).read_text())


def load_all():
    """The whole catalog, every family module imported (in build order: bases before
    their variants)."""
    from zoo import torchvision_models, timm_models, transformers_models, variants, wheels  # noqa: F401
    return MODELS
