"""PyTorch models used by the ONNX tests and benchmarks: a ResNet-18-style CNN, a transformer
encoder, an MLP and an LSTM written with plain ops, and their export to ONNX bytes."""

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


class LstmCell(nn.Module):
    """An LSTM written with plain ops (matmuls and gates), unrolled over the sequence."""

    def __init__(self, inputs=12, hidden=16):
        super().__init__()
        self.wx = nn.Linear(inputs, 4 * hidden)
        self.wh = nn.Linear(hidden, 4 * hidden, bias=False)
        self.hidden = hidden

    def forward(self, xs):
        h = xs.new_zeros(xs.shape[0], self.hidden)
        c = xs.new_zeros(xs.shape[0], self.hidden)
        outputs = []
        for t in range(xs.shape[1]):
            i, f, g, o = (self.wx(xs[:, t]) + self.wh(h)).chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, 1)


def mlp():
    """Three linear layers with ReLU and Tanh, and a softmax."""
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, 10), nn.Softmax(-1))


def encoder(d_model=64, heads=4, layers=2):
    """PyTorch's transformer encoder (attention, LayerNorm, GELU), batch first."""
    layer = nn.TransformerEncoderLayer(d_model, heads, 2 * d_model, dropout=0.0,
                                       activation="gelu", batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def export(module, example, dynamic_batch=True):
    """ONNX bytes (opset 17) of ``module`` in eval mode, input "x" (dynamic batch), output "y"."""
    torch.manual_seed(0)
    module.eval()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example,), buffer, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}} if dynamic_batch else None)
    return buffer.getvalue()
