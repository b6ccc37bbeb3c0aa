"""Batch inference on Ray: a predictor for ``ray.data.Dataset.map_batches`` (``pip install
myelin[ray]``).

:class:`Predictor` is the callable class that Ray Data runs in a pool of actors: each actor
makes its model once, in its constructor, and then computes the batches Ray gives it as NumPy
arrays. The model may be a source (an ONNX file, bytes or ModelProto, a ``.flow`` file or a
Flow), compiled in each worker, or a compiled model (an OnnxModel or a Network) sent as a
:class:`Shipped` artifact: a worker whose CPU runs its code loads it without compiling, any
other compiles it again from its source. A compiled model has one batch size, so each Ray
batch is computed in chunks of that many rows, the last one padded (with copies of its last
row) and its padding dropped: the model must compute each row on its own (a classifier, an
encoder), as batch inference does. :func:`predict` is ``map_batches`` with the predictor,
its actors and their threads set: one actor per core with ``threads=1``, or fewer actors with
several threads each.
"""

import logging
import os

import numpy as np

from myelin.errors import InputError, SerializationError

log = logging.getLogger("myelin.ray")


class Shipped:
    """A compiled model (an OnnxModel or a Network) on its way to Ray's workers: its saved
    bytes, the target its code was compiled for and its source, so that :meth:`load` loads
    it where this CPU runs the code and compiles it again elsewhere. Pickling it sends bytes:
    nothing is loaded until a worker calls :meth:`load`."""

    def __init__(self, model):
        from myelin.importers.onnx import OnnxModel
        from myelin.runtime import serialize
        from myelin.runtime.network import Network

        if isinstance(model, Network):
            network = model
            self.source = ("flow", None if model.flow is None else model.flow.to_bytes(), {})
            self.rows = None
        elif isinstance(model, OnnxModel):
            network = model.network()       # (InputError while nothing is compiled)
            options = {k: v for k, v in model.compiler_options.items() if k != "threads"}
            self.source = ("onnx", model.proto.SerializeToString(), options)
            self.rows = _compiled_rows(model)
        else:
            raise InputError(f"Shipped takes a compiled OnnxModel or Network, not a "
                             f"{type(model).__name__}")
        self.data = serialize.dumps(model)
        self.target = network.target
        self.threads = network.image.threads

    def load(self, threads=None):
        """The model, loaded from its bytes where this CPU runs its code and it was compiled
        for ``threads`` (None: any), else compiled here again from its source for
        ``threads`` (the reason logged on the ``myelin.ray`` logger)."""
        from myelin.runtime import serialize

        try:
            serialize.check_target(self.target)
        except SerializationError as error:
            reason = str(error)
        else:
            if threads in (None, self.threads):
                return serialize.loads(self.data)
            reason = f"it was compiled for {self.threads} threads, not {threads}"
        kind, source, options = self.source
        if source is None:
            raise SerializationError(f"the network cannot run here ({reason}) and has no "
                                     f"flow to compile again")
        log.info("compiling the model here: %s", reason)
        if kind == "onnx":
            return _compile(source, threads, options, self.rows)
        from myelin.flow import Flow
        return _compile(Flow.from_bytes(source), threads, options)


class Predictor:
    """The callable class for ``dataset.map_batches(Predictor, fn_constructor_kwargs={...},
    batch_format="numpy", ...)``: its constructor makes the model, each call computes a batch.

    ``model`` is an ONNX file, bytes or ModelProto, a ``.flow`` file or a Flow (compiled
    here), a file or bytes saved by :func:`myelin.save` (loaded here), a :class:`Shipped`
    compiled model, or an OnnxModel or Network (which Ray unpickles before the constructor
    runs, so a CPU that cannot run their code fails the actor: ship them as
    :class:`Shipped`). ``threads`` is how many threads a compile gives the model's kernels;
    by default the CPUs Ray gave this actor (a Shipped model's own where it loads).
    ``batch_size`` is the rows an ONNX source is compiled for (by default the size of the
    first batch); a Network's cell and a compiled OnnxModel keep theirs. ``cell`` names a network's cell where it has several.
    Other keyword arguments are :class:`myelin.Compiler` options for compiles here.

    A batch is a dict of arrays by column, one row per element along the first axis.
    ``inputs`` maps columns to the model's inputs (default: columns named as the inputs);
    ``outputs`` maps the model's outputs to the columns they become (default: every output
    under its own name). The columns that are not inputs pass through, so that ids and labels
    stay with their rows.
    """

    def __init__(self, model, batch_size=None, inputs=None, outputs=None, threads=None,
                 cell=None, **compiler_options):
        if threads is None and not isinstance(model, Shipped):
            threads = _actor_cpus()
        made = _make(model, threads, compiler_options, batch_size)
        self._runner = _CellRunner(made, cell) if hasattr(made, "cells") else \
            _OnnxRunner(made, batch_size)
        names = self._runner.inputs
        self._inputs = dict(inputs) if inputs is not None else {name: name for name in names}
        unknown = sorted(set(self._inputs.values()) - set(names))
        missing = sorted(set(names) - set(self._inputs.values()))
        if unknown or missing:
            raise InputError(f"inputs maps columns to {sorted(self._inputs.values())}; the "
                             f"model's inputs are {names}")
        self._columns = [next(c for c, n in self._inputs.items() if n == name)
                         for name in names]
        names = self._runner.outputs
        self._outputs = dict(outputs) if outputs is not None else {n: n for n in names}
        unknown = sorted(set(self._outputs) - set(names))
        if unknown:
            raise InputError(f"outputs names {unknown}, which the model does not give; its "
                             f"outputs are {names}")

    def __call__(self, batch):
        missing = [column for column in self._columns if column not in batch]
        if missing:
            raise InputError(f"the batch has no column {missing[0]!r} (its columns: "
                             f"{sorted(batch)})")
        feeds = [np.asarray(batch[column]) for column in self._columns]
        rows = len(feeds[0]) if feeds[0].ndim else 0
        if any(feed.ndim == 0 or len(feed) != rows for feed in feeds):
            raise InputError(f"the input columns {self._columns} have different numbers of "
                             f"rows: {[feed.shape[:1] for feed in feeds]}")
        kept = {column: value for column, value in batch.items()
                if column not in self._inputs}
        clash = sorted(set(kept) & set(self._outputs.values()))
        if clash:
            raise InputError(f"the outputs would replace the batch's columns {clash}: name "
                             f"them otherwise with outputs={{output: column}}")
        size = self._runner.batch_size(rows)
        parts = []
        for start in range(0, max(rows, 1), size):
            chunk = [_padded(feed[start:start + size], size) for feed in feeds]
            parts.append(self._runner.run(chunk))
        taken = [np.concatenate([part[i] for part in parts])[:rows]
                 for i in range(len(self._runner.outputs))]
        for name, value in zip(self._runner.outputs, taken):
            if name in self._outputs:
                kept[self._outputs[name]] = value
        return kept


def predict(dataset, model, batch_size=256, workers=1, threads=None, inputs=None,
            outputs=None, **options):
    """``dataset.map_batches`` with a :class:`Predictor` of ``model`` in ``workers``
    actors of ``threads`` CPUs each (default: a compiled model's threads, else 1). A
    compiled OnnxModel or Network is sent as :class:`Shipped`; ``options`` are the
    predictor's other arguments (``cell``, compiler options)."""
    import ray

    from myelin.importers.onnx import OnnxModel
    from myelin.runtime.network import Network

    if isinstance(model, (OnnxModel, Network)):
        model = Shipped(model)
    cpus = threads or (model.threads if isinstance(model, Shipped) else 1)
    kwargs = dict(model=model, batch_size=batch_size, inputs=inputs, outputs=outputs,
                  threads=threads, **options)
    return dataset.map_batches(Predictor, fn_constructor_kwargs=kwargs, batch_size=batch_size,
                               batch_format="numpy", num_cpus=cpus,
                               compute=ray.data.ActorPoolStrategy(size=workers))


class _OnnxRunner:
    """An OnnxModel computing chunks of one batch size (compiled for it once): a compiled
    model's own, else ``batch_size``, else the first batch's."""

    def __init__(self, model, batch_size):
        self.model = model
        self.inputs, self.outputs = model.input_names, model.output_names
        self.size = _compiled_rows(model) or batch_size

    def batch_size(self, rows):
        self.size = self.size or max(rows, 1)
        return self.size

    def run(self, chunk):
        return self.model.run(chunk)


class _CellRunner:
    """A Network's cell computing chunks of its batch size (its inputs' first dimension)."""

    def __init__(self, network, name):
        cells = network.cells
        if name is None and len(cells) != 1:
            raise InputError(f"the network has cells {[c.name for c in cells]}: name one "
                             f"with cell=")
        self.cell = cells[0] if name is None else network.cell(name)
        self.inputs, self.outputs = self.cell.inputs, self.cell.outputs
        shapes = {tuple(self.cell.spec(name).shape[:1]) for name in self.inputs}
        if len(shapes) != 1 or shapes == {()}:
            raise InputError(f"cell {self.cell.name}'s inputs do not share a batch "
                             f"dimension: {[self.cell.spec(n).shape for n in self.inputs]}")
        (self.size,), = shapes
        self.data = self.cell.instance()

    def batch_size(self, rows):
        return self.size

    def run(self, chunk):
        for name, value in zip(self.inputs, chunk):
            self.data[name] = value
        self.data.compute()
        return [np.array(self.data[name]) for name in self.outputs]


def _make(model, threads, options, rows):
    """The OnnxModel or Network of ``model`` (see :class:`Predictor`)."""
    from myelin.flow import Flow
    from myelin.importers.onnx import OnnxModel
    from myelin.runtime import serialize
    from myelin.runtime.network import Network

    if isinstance(model, Shipped):
        return model.load(threads)
    if isinstance(model, (OnnxModel, Network)):
        return model
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if path.endswith(".flow"):
            return _compile(Flow.load(path), threads, options)
        with open(path, "rb") as file:
            saved = file.read(len(serialize.MAGIC)) == serialize.MAGIC
        return serialize.load(path) if saved else _compile(path, threads, options, rows)
    if isinstance(model, (bytes, bytearray, memoryview)) and \
            bytes(model[:len(serialize.MAGIC)]) == serialize.MAGIC:
        return serialize.loads(model)
    return _compile(model, threads, options, rows)


def _compile(model, threads, options, rows=None):
    """A Network of the Flow ``model``, else an OnnxModel of the ONNX ``model``, for
    ``threads``: compiled at once for batches of ``rows`` where its inputs' other dimensions
    are fixed, else on its first run."""
    from myelin.flow import Flow
    from myelin.importers.onnx import OnnxModel, proto

    if threads is not None:
        options = dict(options, threads=threads)
    if isinstance(model, Flow):
        from myelin.compiler import Compiler
        return Compiler(**options).compile(model)
    model = proto.load(model)
    return OnnxModel(model, input_shapes=rows and _batch_shapes(model, rows), **options)


def _batch_shapes(model, rows):
    """The shapes of the ModelProto's inputs for batches of ``rows``: their first dimension
    ``rows``, the others as the model fixes them; None where it leaves one open."""
    weights = {t.name for t in model.graph.initializer}
    shapes = {}
    for given in model.graph.input:
        if given.name in weights:
            continue
        dims = given.type.tensor_type.shape.dim
        rest = [d.dim_value if d.HasField("dim_value") else None for d in dims[1:]]
        if not dims or None in rest:
            return None
        shapes[given.name] = (rows, *rest)
    return shapes


def _compiled_rows(model):
    """The batch size of an OnnxModel's latest compile (the first dimension of its first
    input in the compile's signature: (name, dtype, shape, ...) per input), or None."""
    signature = model.compiles[-1][0] if model.compiles else ()
    shape = signature[0][2] if signature else ()
    return shape[0] if shape else None


def _padded(rows, size):
    """``rows`` with copies of its last row added up to ``size`` rows (zeros for none)."""
    if len(rows) == size:
        return rows
    if len(rows) == 0:
        return np.zeros((size,) + rows.shape[1:], rows.dtype)
    return np.concatenate([rows, np.repeat(rows[-1:], size - len(rows), axis=0)])


def _actor_cpus():
    """The CPUs Ray gave this actor (None outside Ray, or none given)."""
    try:
        import ray
    except ImportError:
        return None
    if not ray.is_initialized():
        return None
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    return max(1, round(cpus)) if cpus else None
