"""PyTorch models used by the ONNX tests and benchmarks: a ResNet-18-style CNN, a transformer
encoder, MLPs, an LSTM (and its step) written with plain ops and a matmul of two inputs, and
their export to ONNX bytes."""

import io
import warnings

import torch

nn = torch.nn


class BasicBlock(nn.Module):
    """ResNet's two-convolution block with batch norm and a (projected) shortcut."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18's layout ([2, 2, 2, 2] basic blocks) at a given base width."""

    def __init__(self, width=16, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], width
        for i, cout in enumerate([width, 2 * width, 4 * width, 8 * width]):
            for j in range(2):
                blocks.append(BasicBlock(cin, cout, 2 if i and not j else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


class LstmStep(nn.Module):
    """One LSTM step written with plain ops (matmuls and gates): (x, h, c) -> (h', c')."""

    def __init__(self, inputs=12, hidden=16):
        super().__init__()
        self.wx = nn.Linear(inputs, 4 * hidden)
        self.wh = nn.Linear(hidden, 4 * hidden, bias=False)

    def forward(self, x, h, c):
        i, f, g, o = (self.wx(x) + self.wh(h)).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class LstmCell(nn.Module):
    """An LSTM written with plain ops: :class:`LstmStep` unrolled over the sequence."""

    def __init__(self, inputs=12, hidden=16):
        super().__init__()
        self.step = LstmStep(inputs, hidden)
        self.hidden = hidden

    def forward(self, xs):
        h = c = xs.new_zeros(xs.shape[0], self.hidden)
        outputs = []
        for t in range(xs.shape[1]):
            h, c = self.step(xs[:, t], h, c)
            outputs.append(h)
        return torch.stack(outputs, 1)


class MatMul(nn.Module):
    """The product of its two inputs."""

    def forward(self, a, b):
        return a @ b


def mlp():
    """Three linear layers with ReLU and Tanh, and a softmax."""
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, 10), nn.Softmax(-1))


def mnist_mlp():
    """An MNIST-sized classifier: linear layers 784-512-512-10 with ReLU, and a softmax."""
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10), nn.Softmax(-1))


def encoder(d_model=64, heads=4, layers=2, ff=None):
    """PyTorch's transformer encoder (attention, LayerNorm, GELU), batch first; feed-forward
    width ``ff`` (default 2 * d_model)."""
    layer = nn.TransformerEncoderLayer(d_model, heads, ff or 2 * d_model, dropout=0.0,
                                       activation="gelu", batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def export(module, example, dynamic_batch=True, inputs=("x",), outputs=("y",)):
    """ONNX bytes (opset 17) of ``module`` in eval mode. ``example`` is a tensor or a tuple of
    tensors, the inputs named by ``inputs`` (dimension 0 dynamic, "batch", if dynamic_batch),
    the outputs by ``outputs``."""
    torch.manual_seed(0)
    module.eval()
    examples = example if isinstance(example, tuple) else (example,)
    dynamic_axes = {name: {0: "batch"} for name in inputs} if dynamic_batch else None
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, examples, buffer, dynamo=False, opset_version=17,
                          input_names=list(inputs), output_names=list(outputs),
                          dynamic_axes=dynamic_axes)
    return buffer.getvalue()
