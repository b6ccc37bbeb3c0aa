"""TensorFlow import: GraphDefs, TF2 functions, SavedModels and TF1 sessions into flows.

``load_graph(source)`` reads a GraphDef (binary or text protobuf); ``import_graph(graph,
inputs, outputs)`` adds the part of a graph computing ``outputs`` from ``inputs`` to a flow;
``import_function`` and ``import_saved_model`` import a TF2 concrete function or a SavedModel
signature, naming the flow's outputs after the function's; :class:`Extractor` is the Myelin
guide's API. Variables become constants of their values (or learnable variables holding them,
with ``learnable=True``). ``supported_ops()`` lists the TensorFlow op types that convert.
Parsing GraphDefs needs only ``protobuf``; live TensorFlow objects need TensorFlow
(``pip install myelin[tf]``).
"""

from myelin.errors import InputError
from myelin.flow import Flow
from myelin.importers.tensorflow import graphdef, importer, sources
from myelin.importers.tensorflow.converters import supported as supported_ops
from myelin.importers.tensorflow.extractor import Extractor
from myelin.importers.tensorflow.importer import ImportedGraph


def load_graph(source):
    """A GraphDef message from a path (``.pb`` or ``.pbtxt``, told apart by content), bytes,
    or a GraphDef of TensorFlow's; FlowFormatError if it is not one."""
    return graphdef.load(source)


def check_supported(graph):
    """Raise UnsupportedOpError listing every node of ``graph`` (anything :class:`Extractor`
    takes) whose op type myelin does not convert, with the node names."""
    importer.check_supported(sources.source(graph).graph.node)


def import_graph(graph, inputs, outputs, flow=None, func="main", shapes=None, batch_size=1,
                 learnable=False):
    """Import into function ``func`` of ``flow`` (a new Flow if None) the ops of ``graph``
    computing tensors ``outputs`` from tensors ``inputs`` (names ``node`` or ``node:k``, or
    tf.Tensors). ``graph`` is anything :class:`Extractor` takes. ``shapes`` maps input names
    to shapes; other unknown dimensions are ``batch_size``. Returns an
    :class:`ImportedGraph`."""
    flow = Flow() if flow is None else flow
    return Extractor(graph, flow, learnable, batch_size).add(func, inputs, outputs, shapes)


def import_function(function, flow=None, func="main", shapes=None, batch_size=1,
                    learnable=False):
    """Import a TF2 concrete function (or a tf.function with an input signature): its
    inputs are its arguments' placeholders, its outputs are named ``output_<i>`` (or by their
    keys when it returns a dict) and get these names as aliases (``<func>/<name>``)."""
    source = sources.source(function)
    if source.inputs is None:
        raise TypeError(f"expected a TensorFlow function, got {type(function).__name__}")
    imported = importer.import_graph(source.graph, source.inputs, source.outputs.values(),
                                     flow, func, shapes, batch_size, source.variables, learnable)
    outputs = {}
    for name, tensor in source.outputs.items():
        var = imported.outputs[tensor]
        alias = f"{imported.func}/{name}"
        if imported.flow.var_named(alias) is None:
            imported.flow.add_alias(var, alias)
        outputs[name] = var
    imported.outputs = outputs
    return imported


def import_saved_model(path, signature="serving_default", flow=None, func="main",
                       shapes=None, batch_size=1, learnable=False):
    """Import signature ``signature`` of the SavedModel at ``path`` (loaded by TensorFlow) as
    :func:`import_function` does."""
    import tensorflow as tf

    loaded = tf.saved_model.load(path)
    if signature not in loaded.signatures:
        raise InputError(f"the SavedModel has no signature {signature!r}; it has "
                         f"{sorted(loaded.signatures)}")
    return import_function(loaded.signatures[signature], flow, func, shapes, batch_size,
                           learnable)


__all__ = ["Extractor", "ImportedGraph", "check_supported", "import_function", "import_graph",
           "import_saved_model", "load_graph", "supported_ops"]
