"""myelin.ray: the predictor computes what the single-process API does, locally and in Ray
Data's actors (Ray started once for the module, 2 CPUs); a killed actor's batches are retried
without lost or repeated rows; a model that does not compile fails the job with myelin's
message."""

import builtins
import os
import sys

import numpy as np
import pytest
from onnx import helper
from resnet_onnx import resnet

import myelin
import myelin.onnx
from myelin.codegen.llvm.target import Target
from myelin.errors import InputError, UnsupportedOpError
from myelin.ray import Predictor, Shipped


def _cnn():
    """A small ResNet-style CNN on 3x16x16 images, batch dimension N."""
    return resnet(width=8, blocks=(1, 1), classes=10, size=16, batch="N", seed=3)


def _images(rows, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, 3, 16, 16)).astype(np.float32)


@pytest.fixture(scope="module")
def cnn():
    return _cnn().SerializeToString()


@pytest.fixture(scope="module")
def expected(cnn):
    """The single-process API's logits of _images(37)."""
    (logits,) = myelin.onnx.load(cnn).run([_images(37)])
    return logits


def test_predictor_pads_the_last_chunk_and_keeps_other_columns(cnn, expected):
    predictor = Predictor(cnn, batch_size=16, inputs={"image": "x"}, outputs={"y": "logits"},
                          threads=1)
    ids = np.arange(37)
    out = predictor({"image": _images(37), "id": ids})
    assert sorted(out) == ["id", "logits"]
    np.testing.assert_array_equal(out["id"], ids)
    np.testing.assert_allclose(out["logits"], expected, rtol=1e-4, atol=1e-5)
    # A batch shorter than the compiled size reuses it (no second compile).
    part = predictor({"image": _images(37)[:5], "id": ids[:5]})
    np.testing.assert_allclose(part["logits"], expected[:5], rtol=1e-4, atol=1e-5)
    assert len(predictor._runner.model.compiles) == 1


def test_shipped_model_loads_or_compiles_again(cnn, expected):
    compiled = myelin.onnx.load(cnn, threads=1)
    compiled.run([_images(8)])
    shipped = Shipped(compiled)
    loaded = Predictor(shipped, batch_size=16, inputs={"image": "x"})
    assert loaded._runner.model.compiles == compiled.compiles     # loaded, not compiled
    assert loaded._runner.size == 8                 # (its own batch size, not batch_size)
    # A worker whose CPU lacks a feature of the code compiles the ONNX model again.
    target = shipped.target
    shipped.target = Target(target.triple, target.cpu, target.features + ",+myelin-imaginary")
    again = Predictor(shipped, inputs={"image": "x"})
    assert len(again._runner.model.compiles) == 1
    assert again._runner.model.compiles[0][1] == "shapes given at load time"
    for predictor in (loaded, again):
        out = predictor({"image": _images(37)})
        np.testing.assert_allclose(out["y"], expected, rtol=1e-4, atol=1e-5)


def test_network_and_flow(tmp_path):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [4, 8])
    w = np.random.default_rng(1).standard_normal((8, 3)).astype(np.float32)
    f.rename(f.relu(f.matmul(x, f.array("W", w))), "y")
    rows = np.random.default_rng(2).standard_normal((10, 8)).astype(np.float32)
    want = np.maximum(rows @ w, 0)
    path = str(tmp_path / "f.flow")
    flow.save(path)
    network = myelin.Compiler(threads=1).compile(flow)
    for model in (path, Shipped(network)):
        out = Predictor(model, inputs={"rows": "f/x"}, outputs={"f/y": "y"})({"rows": rows})
        np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-6)


def test_bad_columns_are_input_errors(cnn):
    with pytest.raises(InputError, match=r"model's inputs are \['x'\]"):
        Predictor(cnn, inputs={"image": "pixels"}, threads=1)
    with pytest.raises(InputError, match="does not give"):
        Predictor(cnn, outputs={"z": "z"}, threads=1)
    predictor = Predictor(cnn, batch_size=4, threads=1)
    with pytest.raises(InputError, match="no column 'x'"):
        predictor({"image": _images(4)})
    with pytest.raises(InputError, match=r"replace the batch's columns \['y'\]"):
        predictor({"x": _images(4), "y": np.zeros(4)})
    with pytest.raises(InputError, match="Shipped takes"):
        Shipped(_cnn())


# In Ray Data's actors.
class _Dying(Predictor):
    """A predictor whose process ends (once: a marker file says it did) at its third batch."""

    def __init__(self, marker, **kwargs):
        super().__init__(**kwargs)
        self.marker, self.calls = marker, 0

    def __call__(self, batch):
        self.calls += 1
        if self.calls == 3 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return super().__call__(batch)


@pytest.fixture(scope="module")
def ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    # The workers unpickle this module's classes from their pickles, not by importing it.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    printing = builtins.print          # (Ray's progress bars put a print of their own there)
    yield ray
    ray.shutdown()
    builtins.print = printing


def _dataset(ray, rows):
    return ray.data.from_items([{"id": i, "image": image}
                                for i, image in enumerate(_images(rows))],
                               override_num_blocks=4)


def _collect(dataset):
    out = dataset.to_pandas()
    order = np.argsort(out["id"].to_numpy())
    return out["id"].to_numpy()[order], np.stack(out["logits"].to_numpy()[order])


def test_ray_job_equals_the_single_process_api(ray, cnn, expected):
    job = myelin.ray.predict(_dataset(ray, 37), cnn, batch_size=8, workers=2, threads=1,
                             inputs={"image": "x"}, outputs={"y": "logits"})
    ids, logits = _collect(job)
    np.testing.assert_array_equal(ids, np.arange(37))
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)


def test_killed_actor_is_retried_without_lost_or_repeated_rows(ray, cnn, expected, tmp_path):
    marker = str(tmp_path / "died")
    compiled = myelin.onnx.load(cnn, threads=1)
    compiled.run([_images(4)])
    job = _dataset(ray, 37).map_batches(
        _Dying, batch_size=4, batch_format="numpy", num_cpus=1,
        compute=ray.data.ActorPoolStrategy(size=2),
        fn_constructor_kwargs={"marker": marker, "model": Shipped(compiled),
                                   "inputs": {"image": "x"}, "outputs": {"y": "logits"}})
    ids, logits = _collect(job)
    assert os.path.exists(marker)
    np.testing.assert_array_equal(ids, np.arange(37))
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)


def test_model_that_does_not_compile_fails_the_job(ray):
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("NoSuchOp", ["a"], ["y"], name="missing")]
    graph = helper.make_graph(
        nodes, "bad", [helper.make_tensor_value_info("x", 1, ["N", 4])],
        [helper.make_tensor_value_info("y", 1, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError):
        myelin.onnx.load(model)
    dataset = ray.data.from_items([{"x": np.ones(4, np.float32)} for _ in range(8)])
    with pytest.raises(Exception) as info:
        myelin.ray.predict(dataset, model.SerializeToString(), batch_size=4).materialize()
    assert "UnsupportedOpError" in str(info.value)
    assert "NoSuchOp (opset 17, domain ai.onnx): missing" in str(info.value)
