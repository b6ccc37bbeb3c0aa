"""Trained models end to end: a Keras MLP and a small Keras CNN trained for a few steps on the
digits data set, and the Myelin guide's TF1 classifier, imported through a frozen GraphDef
file, the Extractor, a SavedModel and as learnable variables; every flow is saved as a .flow
file and loaded again before it is compiled, and gives TensorFlow's outputs within 1e-5."""

import numpy as np
import pytest

import myelin
import myelin.tf
from tfcheck import assert_close, run

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
datasets = pytest.importorskip("sklearn.datasets")

BATCH = 16


@pytest.fixture(scope="module")
def digits():
    data = datasets.load_digits()
    images = (data.data / 16).astype(np.float32)
    return images, data.target.astype(np.int64)


def _trained(model, images, labels):
    keras.utils.set_random_seed(0)
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss="sparse_categorical_crossentropy")
    model.fit(images, labels, batch_size=64, epochs=1, steps_per_epoch=8, verbose=0)
    return model


@pytest.fixture(scope="module")
def mlp(digits):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    return _trained(model, *digits)


@pytest.fixture(scope="module")
def cnn(digits):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
        keras.layers.BatchNormalization(),
        keras.layers.MaxPooling2D(),
        keras.layers.DepthwiseConv2D(3, padding="same", activation="relu"),
        keras.layers.Conv2D(6, 2, strides=2),
        keras.layers.Flatten(),
        keras.layers.Dense(10, activation="softmax")])
    images, labels = digits
    return _trained(model, images.reshape(-1, 8, 8, 1), labels)


def _case(request, digits):
    """(model, concrete function, input batch) of the model fixture named by ``request``."""
    model = request.getfixturevalue(request.param)
    shape = model.inputs[0].shape[1:]
    images = digits[0][:BATCH].reshape((BATCH,) + tuple(shape))
    function = tf.function(lambda x: model(x, training=False)).get_concrete_function(
        tf.TensorSpec((None,) + tuple(shape), tf.float32, name="x"))
    return model, function, images


@pytest.fixture(params=["mlp", "cnn"])
def case(request, digits):
    return _case(request, digits)


def _reloaded(flow, tmp_path):
    path = tmp_path / "model.flow"
    flow.save(str(path))
    return myelin.Flow.load(str(path))


def _run_reloaded(imported, tmp_path, images):
    flow = _reloaded(imported.flow, tmp_path)
    ((name, output),) = imported.outputs.items()
    inputs = {name: flow.var_named(var.name) for name, var in imported.inputs.items()}
    (x,) = inputs
    return run(flow, imported.func, inputs, {name: flow.var_named(output.name)},
               {x: images})[name]


def test_frozen_graphdef_file(case, tmp_path):
    """The GraphDef path: the function frozen by TensorFlow, written as a .pb file."""
    from tensorflow.python.framework.convert_to_constants import \
        convert_variables_to_constants_v2

    model, function, images = case
    frozen = convert_variables_to_constants_v2(function)
    path = tmp_path / "model.pb"
    path.write_bytes(frozen.graph.as_graph_def().SerializeToString())
    output = frozen.outputs[0].name
    imported = myelin.tf.import_graph(path, ["x"], [output], func="classifier",
                                      shapes={"x": images.shape})
    assert_close(_run_reloaded(imported, tmp_path, images), model(images).numpy())


def test_extractor(case, tmp_path):
    """The guide's path: the Extractor reads the variables the function captures."""
    model, function, images = case
    flow = myelin.Flow()
    extractor = myelin.tf.Extractor(function, flow, batch_size=BATCH)
    imported = extractor.add(flow.func("classifier"), function.inputs[:1], function.outputs)
    consts = [var for var in flow.vars.values() if var.constant]
    assert sum(var.data.size for var in consts) >= model.count_params() - 16   # BN's moments
    assert_close(_run_reloaded(imported, tmp_path, images), model(images).numpy())


def test_learnable_variables(case, tmp_path):
    model, function, images = case
    imported = myelin.tf.import_function(function, learnable=True, batch_size=BATCH)
    learnable = {var.name for var in imported.flow.vars.values() if var.learnable}
    assert len(learnable) == len(model.weights)
    reloaded = _reloaded(imported.flow, tmp_path)
    assert {var.name for var in reloaded.vars.values() if var.learnable} == learnable
    result = run(imported.flow, imported.func, imported.inputs, imported.outputs,
                 {"x": images})
    assert_close(result["output_0"], model(images).numpy())


def test_saved_model(mlp, digits, tmp_path):
    images = digits[0][:BATCH]
    mlp.export(str(tmp_path / "saved"), verbose=False)
    imported = myelin.tf.import_saved_model(str(tmp_path / "saved"), batch_size=BATCH)
    ((name, output),) = imported.outputs.items()
    assert imported.flow.var_named(f"main/{name}") is output
    ((input_name, _),) = imported.inputs.items()
    result = run(imported.flow, imported.func, imported.inputs, imported.outputs,
                 {input_name: images})
    assert_close(result[name], mlp(images).numpy())
    with pytest.raises(myelin.errors.InputError, match="no signature 'nope'"):
        myelin.tf.import_saved_model(str(tmp_path / "saved"), "nope")


def test_guide_classifier_from_a_session(digits, tmp_path):
    """The Myelin guide's example: a TF1 softmax regression trained with gradient descent in
    a session, extracted into function ``classifier`` and saved. W is a TF1 ``VariableV2``,
    b a resource variable."""
    images, labels = digits
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 64], name="x")
        W = tf.compat.v1.get_variable("W", [64, 10], initializer=tf.zeros_initializer(),
                                      use_resource=False)
        b = tf.Variable(tf.zeros([10]), name="b")
        y = tf.add(tf.matmul(x, W), b, name="y")
        y_ = tf.compat.v1.placeholder(tf.float32, [None, 10])
        cross_entropy = tf.reduce_mean(
            tf.nn.softmax_cross_entropy_with_logits(labels=y_, logits=y))
        train_step = tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(cross_entropy)
        sess = tf.compat.v1.Session(graph=graph)
        sess.run(tf.compat.v1.global_variables_initializer())
        one_hot = np.eye(10, dtype=np.float32)[labels]
        for step in range(20):
            batch = slice(step * 50, step * 50 + 50)
            sess.run(train_step, feed_dict={x: images[batch], y_: one_hot[batch]})
        expected = sess.run(y, feed_dict={x: images[:BATCH]})

    flow = myelin.Flow()
    extractor = myelin.tf.Extractor(sess, flow)
    extractor.add(flow.func("classifier"), [x], [y], shapes={"x": (BATCH, 64)})
    flow.save(str(tmp_path / "mnist.flow"))
    sess.close()

    network = myelin.Compiler().compile(myelin.Flow.load(str(tmp_path / "mnist.flow")))
    classifier = network.cell("classifier")
    data = classifier.instance()
    data["classifier/x"] = images[:BATCH]
    data.compute()
    assert_close(np.array(data["classifier/y"]), expected)
    assert np.abs(expected).max() > 0.1          # trained: the weights are not zeros


def test_unnamed_variables_of_a_function_stay_apart():
    """TensorFlow names every unnamed variable "Variable:0": two of them are two constants."""
    scale = tf.Variable(np.full((3,), 1.5, np.float32))
    shift = tf.Variable(np.full((3,), -2.0, np.float32))
    function = tf.function(lambda x: x * scale + shift,
                           input_signature=[tf.TensorSpec([3], tf.float32)])
    concrete = function.get_concrete_function()
    assert scale.name == shift.name == "Variable:0"
    flow = myelin.Flow()
    myelin.tf.Extractor(concrete, flow).add(flow.func("f"), concrete.inputs[:1],
                                            concrete.outputs)
    data = myelin.Compiler().compile(flow).cell("f").instance()
    x = np.float32([1, 2, 3])
    data["f/x"] = x
    data.compute()
    (output,) = data.cell.outputs
    assert_close(np.asarray(data[output]), x * 1.5 - 2)
