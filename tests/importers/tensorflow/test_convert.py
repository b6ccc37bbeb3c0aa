"""Each group of TensorFlow op converters against TensorFlow itself: small tf.functions traced
to graphs, imported, compiled and run on fresh random inputs."""

import numpy as np
import pytest

import myelin.tf
from myelin.errors import ShapeError
from tfcheck import assert_close, run_imported, trace

tf = pytest.importorskip("tensorflow")

RNG = np.random.default_rng(7)


def _normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _ints(*shape, low=-9, high=10):
    return RNG.integers(low, high, shape).astype(np.int32)


def _nonzero(*shape):
    x = _ints(*shape)
    return np.where(x == 0, 3, x).astype(np.int32)


# (id, function, input arrays): one TensorFlow graph per case.
CASES = [
    ("arithmetic", lambda a, b: (a + b) * a - b / (tf.abs(b) + 1.0) + tf.maximum(a, b),
     [_normal(3, 5), _normal(5)]),
    ("math", lambda a: tf.sqrt(tf.abs(a) + 1) + tf.exp(a * 0.1) + tf.math.log1p(tf.abs(a))
     + tf.math.rsqrt(a * a + 1) + tf.square(a) + tf.floor(a) + tf.math.erf(a)
     + tf.math.squared_difference(a, 1.0) + tf.math.expm1(a * 0.1), [_normal(4, 7)]),
    ("activations", lambda a: tf.nn.relu(a) + tf.nn.relu6(a * 4) + tf.nn.elu(a)
     + tf.nn.selu(a) + tf.nn.leaky_relu(a, 0.3) + tf.sigmoid(a) + tf.tanh(a)
     + tf.nn.softplus(a) + tf.nn.softsign(a), [_normal(33)]),
    ("integers", lambda a, b: tf.math.floordiv(a, b) * 100 + tf.math.floormod(a, b) * 10
     + tf.truncatediv(a, b) + tf.add_n([a, b, a]), [_ints(5, 6), _nonzero(5, 6)]),
    ("compare and select", lambda a, b: tf.where(tf.logical_and(a > b, b <= 0.5), a,
                                                 tf.cast(tf.not_equal(a, b), tf.float32)),
     [_normal(4, 4), _normal(4, 4)]),
    ("select rows", lambda a, b, v: tf.compat.v1.where(v > 0, a, b),
     [_normal(4, 3), _normal(4, 3), _normal(4)]),
    ("cast", lambda a: tf.cast(tf.cast(a * 10, tf.int32), tf.float32), [_normal(9)]),
    ("one hot", lambda i: (tf.one_hot(i, 7), tf.one_hot(i, 5, on_value=2.5, off_value=-1.0,
                                                        axis=0)),
     [_ints(4, 6, low=-3, high=9)]),
    ("softmax", lambda a: tf.nn.softmax(a) + tf.nn.log_softmax(a), [_normal(3, 10)]),
    ("matmul", lambda a, b: tf.matmul(a, b, transpose_b=True) + 1.0,
     [_normal(3, 17), _normal(5, 17)]),
    ("batch matmul", lambda a, b: tf.matmul(a, b, adjoint_a=True),
     [_normal(2, 6, 3), _normal(2, 6, 4)]),
    ("bias add", lambda a, b: tf.nn.bias_add(a, b), [_normal(2, 3, 4), _normal(4)]),
    ("reductions", lambda a: (tf.reduce_mean(a, axis=1), tf.reduce_sum(a, axis=[1, 2]),
                              tf.reduce_max(a, axis=-1), tf.reduce_min(a, axis=[0, 2]),
                              tf.reduce_prod(a * 0.5, axis=(1, 2)), tf.reduce_sum(a, axis=[])),
     [_normal(3, 4, 5)]),
    ("keepdims", lambda a: a - tf.reduce_mean(a, axis=0, keepdims=True), [_normal(6, 5)]),
    ("argmax", lambda a: tf.argmax(a, axis=1) + tf.argmin(a, axis=0, output_type=tf.int64),
     [_normal(7, 7)]),
    ("reshape and squeeze", lambda a: tf.reshape(tf.squeeze(tf.expand_dims(a, 0)), [-1, 4]),
     [_normal(2, 6)]),
    ("flatten by shape", lambda a: tf.reshape(a, [tf.shape(a)[0], -1]), [_normal(3, 2, 5)]),
    ("transpose", lambda a: tf.transpose(a, [2, 0, 1]), [_normal(2, 3, 4)]),
    ("concat and stack", lambda a, b: (tf.concat([a, b, a], axis=-1), tf.stack([a, b], axis=1),
                                       tf.stack([b, a])), [_normal(3, 4), _normal(3, 4)]),
    ("unstack and split", lambda a: (tf.unstack(a, axis=1)[2], tf.split(a, 2, axis=0)[1],
                                     tf.split(a, [1, -1, 2], axis=1)[1]), [_normal(4, 5)]),
    ("strided slice", lambda a: (a[1:, ::2, -1], a[..., 1:3], a[::-1, tf.newaxis, 0, 1:4:2],
                                 a[0], a[:, -3::-2]), [_normal(3, 7, 5)]),
    ("slice", lambda a: tf.slice(a, [1, 0], [2, -1]), [_normal(4, 6)]),
    ("pad", lambda a: tf.pad(a, [[1, 0], [2, 3]]) + 1.0
     + tf.pad(a, [[0, 1], [3, 2]], constant_values=-2.0), [_normal(3, 4)]),
    ("mirror pad", lambda a: tf.pad(a, [[1, 1], [2, 0]], mode="REFLECT"), [_normal(4, 5)]),
    ("gather", lambda a, i: (tf.gather(a, i), tf.gather(a, [1, 0, 3], axis=1)),
     [_normal(5, 4), np.array([4, 0, 2], np.int32)]),
    ("tile, fill and like", lambda a: tf.tile(a, [2, 1]) + tf.fill([6, 3], 2.0)
     + tf.ones_like(tf.tile(a, [2, 1])) + tf.zeros_like(tf.tile(a, [2, 1])), [_normal(3, 3)]),
    ("broadcast and range", lambda a: tf.broadcast_to(a, [4, 3]) * tf.cast(tf.range(3),
                                                                          tf.float32),
     [_normal(1, 3)]),
    ("conv2d", lambda a: (tf.nn.conv2d(a, _FILTERS, strides=[1, 2, 1, 1], padding="SAME"),
                          tf.nn.conv2d(a, _FILTERS, strides=1, padding="VALID", dilations=2)),
     [_normal(2, 9, 8, 3)]),
    ("explicit padding", lambda a: tf.nn.conv2d(a, _FILTERS, 1, [[0, 0], [1, 2], [0, 1], [0, 0]]),
     [_normal(1, 6, 7, 3)]),
    ("depthwise", lambda a: tf.nn.depthwise_conv2d(a, _DEPTHWISE, [1, 1, 1, 1], "SAME"),
     [_normal(2, 7, 6, 3)]),
    ("pools", lambda a: (tf.nn.max_pool2d(a, 3, 2, "SAME"), tf.nn.avg_pool2d(a, 3, 2, "SAME"),
                         tf.nn.max_pool2d(a, [2, 3], 1, "VALID")), [_normal(2, 7, 7, 4)]),
    ("fused batch norm", lambda a: tf.compat.v1.nn.fused_batch_norm(
        a, _SCALE, _OFFSET, _MEAN, _VARIANCE, epsilon=1e-3, is_training=False)[0],
     [_normal(2, 4, 5, 3)]),
    ("lrn", lambda a: tf.nn.local_response_normalization(a, 2, 1.5, 0.1, 0.75),
     [_normal(1, 3, 3, 8)]),
]
_FILTERS = _normal(3, 3, 3, 5)
_DEPTHWISE = _normal(3, 2, 3, 2)
_SCALE, _OFFSET, _MEAN = _normal(3), _normal(3), _normal(3)
_VARIANCE = RNG.uniform(0.5, 2, 3).astype(np.float32)


@pytest.mark.parametrize("fn, arrays", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_converters_match_tensorflow(fn, arrays):
    function = trace(tf, fn, *arrays)
    expected = function(*arrays)
    expected = expected if isinstance(expected, (tuple, list)) else [expected]
    imported = myelin.tf.import_function(function)
    feeds = {f"x{i}": array for i, array in enumerate(arrays)}
    result = run_imported(imported, feeds)
    assert len(result) == len(expected)
    for i, want in enumerate(expected):
        assert_close(result[f"output_{i}"], want.numpy())


def test_training_batch_norm_is_refused():
    fn = trace(tf, lambda a: tf.compat.v1.nn.fused_batch_norm(a, _SCALE, _OFFSET,
                                                              is_training=True)[0],
               _normal(1, 2, 2, 3))
    with pytest.raises(ShapeError, match="training mode"):
        myelin.tf.import_function(fn)


def test_channels_first_layout():
    """NCHW convolution, bias, pooling and batch normalization (which TensorFlow's CPU kernels
    do not run: the expected values come from the NHWC ops on transposed tensors)."""
    bias = _normal(5)

    def network(x, layout):
        y = tf.nn.conv2d(x, _FILTERS, 1, "SAME", data_format=layout)
        y = tf.nn.bias_add(y, bias, data_format=layout)
        y = tf.nn.max_pool2d(y, 2, 2, "VALID", data_format=layout)
        scale, offset, mean = (np.resize(p, 5) for p in (_SCALE, _OFFSET, _MEAN))
        return tf.compat.v1.nn.fused_batch_norm(y, scale, offset, mean, np.resize(_VARIANCE, 5),
                                                is_training=False, data_format=layout)[0]

    x = _normal(2, 3, 6, 8)
    channels_last = tf.transpose(network(tf.transpose(x, [0, 2, 3, 1]), "NHWC"), [0, 3, 1, 2])
    imported = myelin.tf.import_function(trace(tf, lambda a: network(a, "NCHW"), x))
    assert_close(run_imported(imported, {"x0": x})["output_0"], channels_last.numpy())
