"""What the PyTorch front end's tests share: comparing a compiled module with eager PyTorch."""

import torch
from torch.utils import _pytree as pytree


def assert_close(got, want, rtol=1e-4, atol=1e-6):
    """Every tensor of ``got`` (a nested result) within ``rtol`` of the largest magnitude of
    its counterpart in ``want`` (plus ``atol``), of the same type and shape; integers and
    bools equal."""
    got_leaves, got_spec = pytree.tree_flatten(got)
    want_leaves, want_spec = pytree.tree_flatten(want)
    assert got_spec == want_spec, f"result structure {got_spec} != {want_spec}"
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        if not isinstance(w, torch.Tensor):
            assert g == w, f"result {i}: {g!r} != {w!r}"
            continue
        assert isinstance(g, torch.Tensor), f"result {i} is {type(g).__name__}"
        assert g.dtype == w.dtype, f"result {i}: {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"result {i}: shape {list(g.shape)} != {list(w.shape)}"
        if not w.is_floating_point():
            assert torch.equal(g, w), f"result {i}: {g} != {w}"
            continue
        w64, g64 = w.double(), g.double()
        assert torch.equal(torch.isnan(g64), torch.isnan(w64)), f"result {i}: NaNs differ"
        finite = torch.isfinite(w64)
        assert torch.equal(g64[~finite & ~torch.isnan(w64)], w64[~finite & ~torch.isnan(w64)])
        scale = w64[finite].abs().max().item() if finite.any() else 0.0
        error = (g64[finite] - w64[finite]).abs().max().item() if finite.any() else 0.0
        assert error <= rtol * scale + atol, f"result {i}: error {error:.3g} of {scale:.3g}"


def eager(module, *args, **kwargs):
    with torch.no_grad():
        return module(*args, **kwargs)
