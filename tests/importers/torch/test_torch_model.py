"""``myelin.torch.compile``: signatures and recompiles, arguments and results of any
structure, parameters (constants, changed in place, bound), inputs written by the module,
and the errors it raises (unsupported ops all at once, types, state, gradients)."""

import copy
import logging

import pytest

torch = pytest.importorskip("torch")

import myelin.torch  # noqa: E402
from myelin.errors import (InputError, UnsupportedOpError,  # noqa: E402
                           UnsupportedTypeError)
from frontcheck import assert_close, eager  # noqa: E402

nn = torch.nn


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)).eval()


def test_compiles_once_per_signature_and_keeps_the_most_recent(caplog):
    module = _mlp()
    compiled = myelin.torch.compile(module, max_signatures=2)
    assert compiled.compiles == []
    with caplog.at_level(logging.INFO, logger="myelin.torch"):
        for batch in (1, 1, 4, 1, 7, 4):
            x = torch.randn(batch, 6)
            assert_close(compiled(x), eager(module, x))
    reasons = [reason for _, reason, _ in compiled.compiles]
    assert reasons == ["first call", "argument 0: float32[1, 6] -> float32[4, 6]",
                       "argument 0: float32[4, 6] -> float32[7, 6]",
                       "argument 0: float32[7, 6] -> float32[4, 6]"]
    assert len(compiled._cache) == 2            # batch 1 dropped, as least recently used
    assert "compiled input: float32[4, 6]" in caplog.text
    assert "dropped a compiled signature" in caplog.text


class _Structured(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, pair, scale=1.0, shift=None):
        y = self.fc(x) * scale + pair[0]
        if shift is not None:
            y = y + shift
        return {"y": y, "parts": (pair[1].sum(-1), y.argmax(-1)), "count": 3}


def test_arguments_and_results_of_any_structure():
    module = _Structured().eval()
    x, a, b = torch.randn(2, 4), torch.randn(2, 4), torch.randn(5, 3)
    compiled = myelin.torch.compile(module, (x, (a, b)), {"scale": 2.0})
    assert_close(compiled(x, (a, b), scale=2.0), eager(module, x, (a, b), scale=2.0))
    # A number is part of the signature; a new one compiles again.
    assert_close(compiled(x, (a, b), scale=0.5), eager(module, x, (a, b), scale=0.5))
    s = torch.randn(4)
    assert_close(compiled(x, [a, b], scale=0.5, shift=s),
                 eager(module, x, [a, b], scale=0.5, shift=s))
    assert len(compiled.compiles) == 3
    # A transposed (strided) input is read as PyTorch reads it.
    t = torch.randn(4, 2).t()
    assert_close(compiled(t, (a, b), scale=2.0), eager(module, t, (a, b), scale=2.0))


def test_results_are_tensors_over_numpy_arrays():
    module = _mlp()
    x = torch.randn(2, 6)
    compiled = myelin.torch.compile(module, x)
    first = compiled(x)
    second = compiled(x)
    assert isinstance(first, torch.Tensor) and first.data_ptr() != second.data_ptr()
    assert torch.equal(first, second)


def test_parameters_changed_in_place_are_compiled_again():
    module = _mlp()
    x = torch.randn(3, 6)
    compiled = myelin.torch.compile(module, x)
    with torch.no_grad():
        module[0].weight.mul_(-2.0)
        module[2].bias.add_(1.0)
    assert_close(compiled(x), eager(module, x))
    assert len(compiled.compiles) == 2
    assert_close(compiled(x), eager(module, x))
    assert len(compiled.compiles) == 2


def test_bound_parameters_are_read_at_each_call():
    module = _mlp()
    x = torch.randn(3, 6)
    compiled = myelin.torch.compile(module, x, bind_parameters=True)
    names = [s.name for s in compiled._cache.last.compiled.imported.inputs]
    assert "input" in names and "0.weight" in names
    with torch.no_grad():
        module[0].weight.mul_(-2.0)
    assert_close(compiled(x), eager(module, x))
    assert len(compiled.compiles) == 1


class _InPlace(nn.Module):
    def forward(self, x, y):
        x.add_(1.0)
        return x * y


def test_inputs_the_module_writes_are_written():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    expected_x = x.clone()
    want = _InPlace()(expected_x, y)
    compiled = myelin.torch.compile(_InPlace(), (x.clone(), y))
    got = compiled(x, y)
    assert_close(got, want)
    assert_close(x, expected_x)


class _Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return x * self.calls


def test_state_kept_between_calls_is_refused():
    with pytest.raises(UnsupportedOpError, match="writes its buffers calls"):
        myelin.torch.compile(_Counter(), torch.randn(2))


class _Exotic(nn.Module):
    def forward(self, x):
        return torch.special.i0(x) + torch.lgamma(x) + torch.special.i0(2 * x)


def test_unsupported_ops_are_listed_at_once():
    with pytest.raises(UnsupportedOpError) as caught:
        myelin.torch.compile(_Exotic(), torch.rand(3) + 1)
    message = str(caught.value)
    assert "aten.i0.default: i0, i0_1" in message and "aten.lgamma.default: lgamma" in message
    assert caught.value.ops == ["i0", "lgamma", "i0_1"] or \
        sorted(caught.value.ops) == ["i0", "i0_1", "lgamma"]


def test_types_and_devices_myelin_lacks_are_refused():
    with pytest.raises(UnsupportedTypeError, match="complex64"):
        myelin.torch.compile(_mlp(), torch.randn(2, 6, dtype=torch.complex64))
    with pytest.raises(InputError, match="precision"):
        myelin.torch.compile(_mlp(), precision="float8")
    with pytest.raises(InputError, match=r"unknown compiler options \['bogus'\]"):
        myelin.torch.compile(_mlp(), bogus=1)         # at once, not at the first call


class _Bfloat16Net(nn.Module):
    """A convolution, a mean over its image, a layer norm, GELU, a linear layer, softmax."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.LayerNorm(8)
        self.linear = nn.Linear(8, 5)

    def forward(self, x):
        h = self.norm(torch.relu(self.conv(x)).mean((2, 3)))
        return torch.softmax(self.linear(nn.functional.gelu(h)), -1)


def test_bfloat16_module():
    """A bfloat16 module computes in bfloat16 (each op in float32, its result rounded), its
    parameters and arguments read through their bits: as close to the float64 module as
    PyTorch's own bfloat16 result is."""
    torch.manual_seed(0)
    module = _Bfloat16Net().to(torch.bfloat16).eval()
    exact = _Bfloat16Net().double().eval()
    exact.load_state_dict({k: v.double() for k, v in module.state_dict().items()})
    x = torch.randn(2, 3, 6, 6, dtype=torch.bfloat16)
    with torch.no_grad():
        got = myelin.torch.compile(module, x)(x)
        want, reference = module(x), exact(x.double())
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    error = (got.double() - reference).abs().max().item()
    assert error <= 2 * (want.double() - reference).abs().max().item() + 2 ** -8


def test_inference_only_gradients_raise():
    module = _mlp()
    x = torch.randn(2, 6)
    compiled = myelin.torch.compile(module, x)
    y = compiled(x)                              # grad mode on, parameters require grad
    assert y.requires_grad
    assert_close(y.detach(), eager(module, x))
    with pytest.raises(UnsupportedOpError, match="inference only"):
        y.sum().backward()
    with torch.no_grad():
        assert not compiled(x).requires_grad


def test_compiler_options_and_float64_precision():
    module = _mlp()
    x = torch.randn(2, 6)
    compiled = myelin.torch.compile(module, x, threads=1, opt_level=1, precision="float64")
    assert compiled.flow is not None
    assert "float64" in str(compiled.network().cell("main"))
    want = eager(copy.deepcopy(module).double(), x.double()).float()
    assert_close(compiled(x), want, rtol=1e-6)
