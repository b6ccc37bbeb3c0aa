"""The Myelin guide's workflow: extract the parts of a TensorFlow graph needed to compute given
outputs from given inputs into functions of a flow, then save the flow.

::

    flow = myelin.Flow()
    extractor = Extractor(sess, flow)
    extractor.add(flow.func("classifier"), [x], [y])
    flow.save("/tmp/mnist.flow")
"""

from myelin.importers.tensorflow import importer, sources


class Extractor:
    """Adds parts of the graph of ``source`` to ``flow``: a TF1 session, a tf.Graph, a TF2
    concrete function (or a tf.function with an input signature), a GraphDef message, file or
    bytes. Variables are frozen into constants of their current values, or kept learnable
    (holding them) with ``learnable``; unknown input dimensions become ``batch_size``."""

    def __init__(self, source, flow, learnable=False, batch_size=1):
        self.source = sources.source(source)
        self.flow = flow
        self.learnable = learnable
        self.batch_size = batch_size

    def add(self, func, inputs, outputs, shapes=None):
        """Add to function ``func`` (a Function or a name) the ops computing ``outputs`` from
        ``inputs`` (tf.Tensors or tensor names); ``shapes`` gives input shapes by name. Returns
        the :class:`~myelin.importers.tensorflow.importer.ImportedGraph`."""
        return importer.import_graph(self.source.graph, sources.tensor_names(inputs),
                                     sources.tensor_names(outputs), self.flow, func, shapes,
                                     self.batch_size, self.source.variables, self.learnable)
