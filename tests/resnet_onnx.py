"""A ResNet-18-style CNN written as ONNX without PyTorch: a 7x7 stride-2 stem convolution with
batch norm, ReLU and max pooling, stages of basic blocks (two 3x3 convolutions with batch
norm, a 1x1 projection where the shape changes, the residual sum), global average pooling
and a linear classifier. ``resnet()`` is ResNet-18's layout at ImageNet's size; the tests use
narrow, small ones."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def resnet(width=64, blocks=(2, 2, 2, 2), classes=1000, size=224, batch=1, seed=0):
    """The ONNX model (opset 17) of input ``x`` float32[batch, 3, size, size] and output
    ``y`` float32[batch, classes], its weights drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    nodes, weights = [], []
    names = iter(range(1 << 30))

    def constant(value):
        name = f"w{next(names)}"
        weights.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def conv(x, cin, cout, kernel, stride, relu=True):
        scale = np.sqrt(2.0 / (cin * kernel * kernel))
        w = constant(rng.standard_normal((cout, cin, kernel, kernel)) * scale)
        out = f"v{next(names)}"
        pad = kernel // 2
        nodes.append(helper.make_node("Conv", [x, w], [out], kernel_shape=[kernel, kernel],
                                      strides=[stride, stride], pads=[pad] * 4))
        normed = f"v{next(names)}"
        nodes.append(helper.make_node(
            "BatchNormalization",
            [out, constant(rng.uniform(0.5, 1.5, cout)), constant(rng.normal(0, 0.1, cout)),
             constant(rng.normal(0, 0.1, cout)), constant(rng.uniform(0.5, 1.5, cout))],
            [normed], epsilon=1e-5))
        if not relu:
            return normed
        out = f"v{next(names)}"
        nodes.append(helper.make_node("Relu", [normed], [out]))
        return out

    x = conv("x", 3, width, 7, 2)
    pooled = f"v{next(names)}"
    nodes.append(helper.make_node("MaxPool", [x], [pooled], kernel_shape=[3, 3],
                                  strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = pooled, width
    for stage, count in enumerate(blocks):
        cout = width << stage
        for index in range(count):
            stride = 2 if stage and not index else 1
            h = conv(conv(x, cin, cout, 3, stride), cout, cout, 3, 1, relu=False)
            shortcut = x if stride == 1 and cin == cout else conv(x, cin, cout, 1, stride,
                                                                   relu=False)
            total, out = f"v{next(names)}", f"v{next(names)}"
            nodes += [helper.make_node("Add", [h, shortcut], [total]),
                      helper.make_node("Relu", [total], [out])]
            x, cin = out, cout
    nodes += [helper.make_node("GlobalAveragePool", [x], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Gemm", ["flat", constant(rng.standard_normal((cin, classes))
                                                         / np.sqrt(cin)),
                                        constant(rng.normal(0, 0.1, classes))], ["y"])]
    graph = helper.make_graph(
        nodes, "resnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, classes])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def small(seed=0):
    """A narrow ResNet-18-style CNN on 32x32 images (quick to compile)."""
    return resnet(width=8, blocks=(1, 1, 1, 1), classes=10, size=32, seed=seed)
