"""The ATen converters against eager PyTorch: small modules, each covering a family of ops,
exported and compiled by ``myelin.torch.compile`` and compared on fresh inputs."""

import pytest

torch = pytest.importorskip("torch")

import myelin.torch  # noqa: E402
from frontcheck import assert_close, eager  # noqa: E402

nn = torch.nn
F = torch.nn.functional


def check(module, *args, rtol=1e-4):
    """Compile ``module`` for ``args`` and compare with eager PyTorch on them and on fresh
    arguments of the same signature."""
    module = module.eval()
    compiled = myelin.torch.compile(module, args)
    assert_close(compiled(*args), eager(module, *args), rtol=rtol)
    fresh = tuple(torch.randn_like(a) if a.is_floating_point() else a for a in args)
    assert_close(compiled(*fresh), eager(module, *fresh), rtol=rtol)
    assert len(compiled.compiles) == 1
    return compiled


class _Convolutions(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8, bias=False)
        self.up = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.gn = nn.GroupNorm(2, 4)
        self.inorm = nn.InstanceNorm2d(4, affine=True)
        self.prelu = nn.PReLU(4)
        self.conv1d = nn.Conv1d(4, 6, 3, padding=1)
        self.fc = nn.Linear(6, 5)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        y = F.relu6(self.bn(self.conv(x)))
        y = F.hardswish(self.depthwise(y)) + F.hardsigmoid(y)
        y = F.max_pool2d(y, 3, 2, 1, ceil_mode=True)
        y = F.silu(F.avg_pool2d(y, 2, 1, 1, count_include_pad=False))
        y = self.prelu(self.inorm(self.gn(self.up(y))))
        a = F.adaptive_avg_pool2d(y, (3, 5))                  # windows of unequal sizes
        b = F.adaptive_max_pool2d(y, 2)
        c = F.interpolate(y, scale_factor=2, mode="nearest")
        d = F.interpolate(y, size=(7, 9), mode="bilinear", align_corners=False)
        e = F.interpolate(y, size=(5, 5), mode="bilinear", align_corners=True)
        f = F.pixel_shuffle(F.pad(y, (1, 1, 1, 1), mode="reflect"), 2)
        g = F.pad(y, (2, 0, -1, 1), value=0.5)
        h = self.conv1d(y.flatten(2)).mean(-1)
        return (a.sum() + b.mean(), c.std(), d, e, f, g, F.mish(self.fc(h)),
                F.leaky_relu(h, 0.2), F.elu(h), F.gelu(h, approximate="tanh"),
                F.softplus(h, beta=2))


def test_convolutions_pools_and_resampling():
    check(_Convolutions(), torch.randn(2, 3, 16, 16))


class _Encoder(nn.Module):
    def __init__(self, vocab=50, width=32, heads=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Embedding(16, width)
        self.norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.ff = nn.Sequential(nn.Linear(width, 64), nn.GELU(), nn.Linear(64, width))
        self.rms = nn.RMSNorm(width, eps=1e-6)
        self.heads = heads

    def forward(self, tokens, mask):
        batch, length = tokens.shape
        positions = torch.arange(length).unsqueeze(0)
        x = self.norm(self.embed(tokens) + self.position(positions))
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        keep = mask[:, None, None, :].bool()
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        c = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        bias = torch.zeros(length, length).masked_fill(
            torch.triu(torch.ones(length, length, dtype=torch.bool), 1), float("-inf"))
        scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5) + bias
        m = torch.softmax(scores, dim=-1) @ v
        g = F.scaled_dot_product_attention(q[:, :, :5], k[:, :2], v[:, :2], enable_gqa=True,
                                           scale=0.3)
        y = (a + c + m).transpose(1, 2).reshape(batch, length, -1)
        x = x + self.out(y)
        x = self.rms(x + self.ff(x))
        first, second = x.chunk(2, dim=-1)
        return torch.cat([second, first], -1), F.log_softmax(x, -1), g


def test_transformer_encoder():
    tokens = torch.randint(0, 50, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.int64)
    mask[1, 9:] = 0
    module = _Encoder().eval()
    compiled = myelin.torch.compile(module, (tokens, mask))
    assert_close(compiled(tokens, mask), eager(module, tokens, mask))
    other = torch.randint(0, 50, (2, 12))
    assert_close(compiled(other, mask), eager(module, other, mask))


class _Indexing(nn.Module):
    def forward(self, x, index):
        rows = x[:, index]                                    # one index tensor
        pairs = x[index[2:5], :, index[1:4]]                  # two, not adjacent
        picked = torch.gather(x, 2, index.abs()[None, None, :].expand(4, 5, 6) % 6)
        scattered = torch.zeros(4, 5, 6).scatter(2, (index[None, None, :6] % 6).expand(4, 5, 6),
                                                 x)
        put = x.clone()
        put[:, torch.tensor([0, 2])] = -1.0
        strided = x[:, ::2, 1::3]
        rolled = torch.roll(x, shifts=(1, -2), dims=(1, 2))
        values, indices = x.max(dim=1)
        top, top_indices = torch.topk(x, 3, dim=-1)
        ordered, order = torch.sort(x, dim=1, descending=True)
        parts = torch.unbind(x, 0)
        stacked = torch.stack(parts[:2], dim=-1)
        return (rows, pairs, picked, scattered, put, strided, rolled, x.flip(0, 2),
                values, indices, top, top_indices, ordered, order, stacked,
                x.repeat(1, 2, 1), x[1:2].expand(3, 5, 6), torch.where(x > 0, x, 0.0),
                x.sum(dtype=torch.float64), (x > 0).sum(1), x.amax((0, 2), keepdim=True),
                x.argmin(), x.var(1), x.std(2, correction=0), torch.cumsum(x, 1),
                torch.logsumexp(x, -1), torch.linalg.vector_norm(x, dim=-1),
                torch.any(x > 2, 1), torch.all(x > -3), x.prod(1),
                torch.tril(x[0], -1), torch.triu(x[0], 1), x.select(1, -1))


def test_indexing_and_reductions():
    index = torch.tensor([4, -1, 0, 2, 3, 1])
    check(_Indexing(), torch.randn(4, 5, 6), index)


class _Integers(nn.Module):
    def forward(self, a, b):
        b = torch.where(b == 0, 1, b)
        return (a // b, torch.div(a, b, rounding_mode="trunc"), a % b, torch.fmod(a, b),
                a / b, a * 3 - b, a ** 2, torch.clamp(a, -3, 4), a.abs(), a & b, a | 6, ~a,
                a == b, a < 2.5, torch.maximum(a, b), (a + 0.5).floor(), a.to(torch.float32),
                torch.bitwise_xor(a, b), torch.logical_and(a, b), torch.sign(a))


def test_integer_arithmetic():
    a = torch.randint(-9, 9, (3, 7))
    b = torch.randint(-4, 4, (3, 7))
    module = _Integers().eval()
    compiled = myelin.torch.compile(module, (a, b))
    assert_close(compiled(a, b), eager(module, a, b))


class _Elementwise(nn.Module):
    def forward(self, x):
        y = torch.sigmoid(x) * torch.tanh(x) - torch.exp(-x.abs()) + torch.log1p(x.abs())
        z = torch.rsqrt(x.abs() + 1) + torch.erf(x) + torch.atan2(x, x.flip(-1)) + x.round(
            decimals=1)
        w = torch.clamp(x, min=-0.5) + F.hardtanh(x, -0.2, 0.3) + torch.nan_to_num(x / 0.0)
        return y, z, w, x.float().double(), torch.isnan(x / x), F.threshold(x, 0.1, -2.0)


def test_elementwise():
    check(_Elementwise(), torch.randn(3, 8))


class _NearZero(nn.Module):
    def forward(self, x):
        return (torch.log1p(x), torch.expm1(x), torch.erfc(x * 1e8), torch.exp2(x * 1e8),
                torch.log2(x.abs()))


def test_functions_accurate_near_zero_and_in_tails():
    """log1p and expm1 of tiny x keep their digits (log(1 + x) and exp(x) - 1 lose them all in
    float32 below 6e-8), erfc keeps its right tail (1 - erf(x) is 0 from x = 4)."""
    x = torch.tensor([1e-10, -3e-9, 2e-8, 4.5e-8, -1e-7, 1e-6, 0.0, -0.0])
    module = _NearZero().eval()
    compiled = myelin.torch.compile(module, (x,))
    for got, want in zip(compiled(x), eager(module, x)):
        torch.testing.assert_close(got, want, rtol=3e-6, atol=0)


def test_float64_and_float16_modules():
    module = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).double()
    check(module, torch.randn(5, 8, dtype=torch.float64))
    half = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16)).half()
    x = torch.randn(5, 8, dtype=torch.float16)
    compiled = myelin.torch.compile(half.eval(), (x,))
    assert_close(compiled(x), eager(half, x), rtol=1e-2, atol=1e-3)
