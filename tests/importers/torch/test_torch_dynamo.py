"""``torch.compile(model, backend="myelin")``: the entry point, graph breaks, dynamic shapes,
options, the fallback to eager PyTorch for graphs myelin cannot compile, and training."""

import copy
import importlib.metadata
import warnings

import pytest

torch = pytest.importorskip("torch")

from myelin.errors import UnsupportedOpError  # noqa: E402
from myelin.importers.torch import dynamo  # noqa: E402
from frontcheck import assert_close, eager  # noqa: E402

nn = torch.nn

# The backend by name needs the package's entry points (pip install -e . or a wheel); the
# function itself is tested in either case.
REGISTERED = any(e.name == "myelin" for e in
                 importlib.metadata.entry_points(group="torch_dynamo_backends"))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _counting(graphs):
    def backend(gm, example_inputs, **kwargs):
        graphs.append(gm)
        return dynamo.backend(gm, example_inputs, **kwargs)
    return backend


class _Branchy(nn.Module):
    """A block, a data-dependent branch (a graph break), another block."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        if y.sum() > 0:
            y = y * 2
        return self.fc(y).softmax(-1)


@pytest.mark.skipif(not REGISTERED, reason="myelin is not installed with its entry points")
def test_backend_by_name_through_the_entry_point():
    assert "myelin" in torch._dynamo.list_backends()
    module = nn.Sequential(nn.Linear(5, 7), nn.Tanh()).eval()
    compiled = torch.compile(module, backend="myelin")
    x = torch.randn(2, 5)
    with torch.no_grad():
        assert_close(compiled(x), eager(module, x))


def test_graph_breaks_and_new_shapes():
    module = _Branchy().eval()
    graphs = []
    compiled = torch.compile(module, backend=_counting(graphs))
    with torch.no_grad():
        for batch in (1, 3):
            x = torch.randn(batch, 3, 8, 8)
            assert_close(compiled(x), eager(module, x))
    assert len(graphs) >= 2        # the graph break splits the forward in two


def test_options_reach_the_compiler():
    module = nn.Sequential(nn.Linear(5, 7), nn.GELU(), nn.Linear(7, 3)).eval()
    graphs = []
    compiled = torch.compile(module, backend=_counting(graphs),
                             options={"threads": 1, "opt_level": 1, "precision": "float64"})
    x = torch.randn(4, 5)
    with torch.no_grad():
        got = compiled(x)
    want = eager(copy.deepcopy(module).double(), x.double()).float()
    assert_close(got, want, rtol=1e-6)
    with pytest.raises(Exception, match="precision 'int4'"):
        dynamo.options_of({"precision": "int4"})


class _Exotic(nn.Module):
    def forward(self, x):
        return torch.special.i0(x) * 2


def test_unsupported_graphs_fall_back_to_eager_or_raise():
    x = torch.rand(3) + 0.5
    compiled = torch.compile(_Exotic(), backend=dynamo.backend)
    with pytest.warns(RuntimeWarning, match="aten.i0.default"):
        assert_close(compiled(x), eager(_Exotic(), x))
    torch._dynamo.reset()
    strict = torch.compile(_Exotic(), backend=dynamo.backend, options={"fallback": False})
    with pytest.raises(Exception) as caught:
        strict(x)
    assert "aten.i0.default" in str(caught.value)


def test_training_is_refused_at_backward():
    module = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 1))
    compiled = torch.compile(module, backend=dynamo.backend)
    x = torch.randn(4, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # the forward compiles: no fallback
        loss = compiled(x).sum()
    assert loss.requires_grad
    assert_close(loss.detach(), eager(module, x).sum())
    with pytest.raises(UnsupportedOpError, match="inference only"):
        loss.backward()
