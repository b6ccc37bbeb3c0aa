"""A compiled ONNX model: compiled per input signature, cached, run from NumPy arrays.

The code myelin generates is specialized to concrete shapes. :class:`OnnxModel` compiles the
model for the shapes (and dtypes) of the inputs it is given, plus the values of inputs the
graph uses as shapes, keeps the result per signature, and logs every compile with its reason
(first run, new batch size, ...). Each signature has one instance, guarded by a lock, so a model
can be called from several threads. At most ``max_signatures`` compiled signatures are kept:
compiling one more drops the least recently used (logged like compiles). A run whose inputs
have the signature of the previous run goes straight to its compile (:mod:`.compiled`), with no
cache key built; outputs come fresh or in the caller's arrays (:mod:`.outputs`).
"""

import collections
import functools
import logging
import threading
import time

import numpy as np

from myelin import limits
from myelin.errors import InputError
from myelin.flow import dtypes
from myelin.importers.onnx import importer, outputs, proto, staged
from myelin.importers.onnx.compiled import CompiledCell, CompiledProgram
from myelin.importers.onnx.dynamic import DynamicDims
from myelin.ops.control import is_control

log = logging.getLogger("myelin.onnx")


class OnnxModel:
    """An ONNX model compiled on demand for each input signature.

    ``model`` is a path, bytes or ModelProto. ``base_dir`` is the directory holding the files
    of tensors stored as external data: by default a path's folder; bytes and ModelProtos have
    none, so such a model needs it. ``input_shapes`` (name -> shape) fixes dynamic dimensions
    and compiles at once; otherwise the first :meth:`run` compiles for its inputs. ``dynamic``
    bounds named dimensions of the inputs, ``{"batch": (1, 64)}`` (:mod:`.dynamic`): inputs
    outside them are an InputError. At most ``max_signatures`` compiled signatures are kept,
    the least recently used going first. ``compiler_options`` go to :class:`myelin.Compiler`
    (checked at once; ``max_tensor_bytes`` bounds the tensors of the import as well as those
    compiled, see :mod:`myelin.limits`). A model
    with control flow (If, Loop, Scan that stay in the imported flow) is compiled by
    :func:`myelin.control.compile` with the same options and runs on its VM. A model whose
    shapes depend on values computed at run time (NonZero, NonMaxSuppression, ...) runs in
    stages, ``staged`` (:mod:`.staged`; None for other models), whose ``compiles`` list the
    stages' compiles.
    """

    def __init__(self, model, input_shapes=None, base_dir=None, max_signatures=8,
                 dynamic=None, **compiler_options):
        from myelin.compiler import checked_options

        if isinstance(max_signatures, bool) or not isinstance(max_signatures, int) or \
                max_signatures < 1:
            raise InputError(f"max_signatures must be a positive int, not {max_signatures!r}")
        checked_options(compiler_options)
        parsed = proto.load(model, base_dir)
        importer.check_supported(parsed)
        graph = parsed.graph
        self._start(parsed, None, compiler_options, max_signatures,
                    [i.name for i in graph.input
                     if i.name not in {t.name for t in graph.initializer}],
                    [o.name for o in graph.output])
        if dynamic is not None:
            self.dynamic = DynamicDims(graph, dynamic)
        # Shapes that depend on run-time values: stages, each an OnnxModel (staged.py).
        self.staged = staged.plan(self.proto, functools.partial(
            OnnxModel, max_signatures=max_signatures, **compiler_options))
        if input_shapes is not None:
            unknown = sorted(set(input_shapes) - set(self.input_names))
            if unknown:
                raise InputError(f"input_shapes names {unknown}, which the model does not "
                                 f"take; its inputs are {self.input_names}")
            reason = self._sized("shapes given at load time", input_shapes)
            if self.staged is not None:
                self.staged.compile_first(dict(input_shapes))
            else:
                self._compile(dict(input_shapes), {}, reason)

    def _start(self, parsed, serialized, compiler_options, max_signatures, input_names,
               output_names):
        """The state of a model with nothing compiled, of its ModelProto ``parsed`` or, a
        loaded model's, its bytes ``serialized`` (parsed when first needed)."""
        self._proto, self._proto_bytes = parsed, serialized
        self.compiler_options = compiler_options
        self.max_signatures = max_signatures
        self.input_names, self.output_names = list(input_names), list(output_names)
        self._value_inputs = set()     # inputs the graph reads as shapes or parameters
        self._compiled = collections.OrderedDict()   # least recently used first
        self._lock = threading.Lock()        # held while compiling
        self._order_lock = threading.Lock()  # held while the order of _compiled changes
        self._last = None              # the most recently used compiled signature
        self.compiles = []             # (signature, reason, seconds) per compile
        self.staged = None
        self.dynamic = None            # a DynamicDims: bounds on named dimensions

    @property
    def proto(self):
        """The ModelProto (a loaded model's is parsed here, when first asked for)."""
        if self._proto is None:
            self._proto = proto.load(self._proto_bytes)
            self._proto_bytes = None
        return self._proto

    @property
    def flow(self):
        """The imported flow of the most recent compile (before optimization)."""
        if not self.compiles:
            raise InputError("the model has not been compiled yet")
        imported = self._compiled[self.compiles[-1][0]].imported
        if imported.flow is None:       # (a loaded model: imported again, not compiled)
            again = importer.import_graph(
                self.proto, {s.name: s.shape for s in imported.inputs},
                imported.specialized, self._value_inputs)
            imported.flow = again.flow
        return imported.flow

    # Saving and pickling (myelin.runtime.serialize): the model, the options and every
    # compiled signature (its network or program, as their own bytes), not the imported
    # flows (imported again when asked for); a staged model's stages alike. A loaded model
    # that runs in one stage parses its ONNX model only when it compiles a new signature.
    def __reduce__(self):
        with self._order_lock:
            compiled = [_saved(entry) for entry in self._compiled.values()]
            last = None if self._last is None else self._last.signature
        stages = None if self.staged is None else \
            [stage._model for stage in self.staged.graph.all_stages()]
        model = self._proto_bytes if self._proto is None else self._proto.SerializeToString()
        return _restore, (model, self.compiler_options, self.max_signatures,
                          sorted(self._value_inputs), list(self.compiles), compiled, last,
                          stages, (self.input_names, self.output_names), self.dynamic)

    def save(self, path):
        """Write the model and every signature compiled so far to the file ``path``, which
        :meth:`load` loads in any process (on a CPU with the features it was compiled for)
        without compiling (see :mod:`myelin.runtime.serialize`)."""
        from myelin.runtime import serialize
        serialize.save(self, path)

    @classmethod
    def load(cls, path):
        """The model saved in the file ``path`` by :meth:`save`."""
        from myelin.runtime import serialize
        return serialize.load(path, OnnxModel)

    def network(self, signature=None):
        """The compiled Network of ``signature`` (default: the most recent compile)."""
        if not self.compiles:
            raise InputError("the model has not been compiled yet")
        compiled = self._compiled.get(signature or self.compiles[-1][0])
        if compiled is None:
            raise InputError(f"no compiled network for signature {signature} (never "
                             f"compiled, or dropped as least recently used)")
        return compiled.network

    def run(self, inputs, out=None):
        """Compute the outputs for ``inputs`` (a dict by name, or a list in input order);
        returns a list of arrays in output order: fresh arrays, or given ``out`` (a list in
        output order or a dict by name of preallocated arrays, :mod:`.outputs`), the outputs
        written into those arrays."""
        # (A list of the inputs is taken as it is, without a call: it costs less.)
        given = inputs if type(inputs) is list and len(inputs) == len(self.input_names) \
            else self._given(inputs)
        targets = None if out is None else outputs.targets(out, self.output_names)
        if self.staged is not None:
            feeds = dict(zip(self.input_names, map(np.asarray, given)))
            if self.dynamic is not None:
                self.dynamic.check({name: value.shape for name, value in feeds.items()})
            results = self.staged.run(feeds)
            return results if targets is None else \
                outputs.deliver(results, targets, self.output_names, copy=False)
        compiled = self._last
        results = None if compiled is None else compiled.run(given, targets)
        if results is None:     # not the signature of the last run
            # Read in place: the caller's array, or a contiguous copy of a strided one.
            given = [np.asarray(value, order="C") for value in given]
            results = self._lookup(given).run(given, targets)
        return results

    __call__ = run

    def _given(self, inputs):
        """The inputs in input order, as given; InputError for other names or another
        count. (Loops rather than list comprehensions: they cost less.)"""
        names = self.input_names
        if isinstance(inputs, dict):
            if len(inputs) == len(names):
                given = []
                try:
                    for name in names:
                        given.append(inputs[name])
                    return given
                except KeyError:
                    pass
            unknown = set(inputs) - set(names)
            if unknown:
                raise InputError(f"the model has no inputs {sorted(unknown)}; its inputs are "
                                 f"{names}")
            raise InputError(f"missing inputs {[name for name in names if name not in inputs]}")
        if not isinstance(inputs, (list, tuple)):
            inputs = list(inputs)
        if len(inputs) != len(names):
            raise InputError(f"the model takes {len(names)} inputs ({names}), got "
                             f"{len(inputs)}")
        return inputs

    # Signatures.
    def _signature(self, feeds):
        parts = []
        for name in self.input_names:
            value = feeds[name]
            part = (name, dtypes.code(value.dtype), value.shape)
            if name in self._value_inputs:
                part += (value.tobytes(),)
            parts.append(part)
        return tuple(parts)

    def _lookup(self, arrays):
        """The compiled model for ``arrays`` (in input order), compiled if need be; the most
        recently used from now on."""
        feeds = dict(zip(self.input_names, arrays))
        signature = self._signature(feeds)
        with self._order_lock:
            compiled = self._compiled.get(signature)
            if compiled is not None:
                self._compiled.move_to_end(signature)
                self._last = compiled
                return compiled
        with self._lock:
            compiled = self._compiled.get(signature)
            if compiled is None:
                shapes = {name: value.shape for name, value in feeds.items()}
                reason = self._sized(self._reason(feeds), shapes)
                compiled = self._compile(shapes, feeds, reason)
        return compiled

    def _sized(self, reason, shapes):
        """``reason`` for a compile for input ``shapes``, with the sizes of the bounded
        dimensions; InputError if ``shapes`` are outside the bounds."""
        if self.dynamic is None:
            return reason
        return f"{reason}; {self.dynamic.describe(self.dynamic.check(shapes))}"

    def _reason(self, feeds):
        if not self.compiles:
            return "first run"
        previous = self._compiled[self.compiles[-1][0]].imported
        changes = []
        for s in previous.inputs:
            value = feeds[s.name]
            if tuple(value.shape) != tuple(s.shape):
                changes.append(f"{s.name} shape {list(s.shape)} -> {list(value.shape)}")
        for name, old in previous.specialized.items():
            if not np.array_equal(old, feeds[name]):
                changes.append(f"value of {name} changed")
        return "; ".join(changes) or "new input signature"

    def _compile(self, shapes, feeds, reason):
        from myelin.compiler import Compiler

        start = time.perf_counter()
        with limits.scope(self.compiler_options.get("max_tensor_bytes")):   # (import too)
            imported = importer.import_graph(self.proto, shapes, feeds, self._value_inputs)
        self._value_inputs |= set(imported.specialized)
        # Inputs found to be read as values are now part of the signature.
        signature = self._signature(feeds) if feeds else _shape_signature(imported)
        fields = {"signature": signature, "input_names": self.input_names,
                  "output_names": self.output_names}
        if any(is_control(op) for op in imported.flow.ops.values()):
            compiled = CompiledProgram.compile(imported, self.compiler_options, start, **fields)
        else:
            for given in imported.inputs:
                imported.flow.vars[given.var].ref = 0 not in given.shape   # read in place
            network = Compiler(**self.compiler_options).compile(imported.flow)
            cell = network.cell(imported.func)
            compiled = CompiledCell(imported=imported, network=network, cell=cell,
                                    instance=cell.instance(),
                                    seconds=time.perf_counter() - start, **fields)
        seconds = compiled.seconds
        self.compiles.append((signature, reason, seconds))
        log.info("compiled %s in %.3f s (%s)", _describe(imported), seconds, reason)
        with self._order_lock:
            self._compiled[signature] = compiled
            self._last = compiled
            while len(self._compiled) > self.max_signatures:
                _, dropped = self._compiled.popitem(last=False)
                log.info("dropped the compiled %s (least recently used; max_signatures=%d)",
                         _describe(dropped.imported), self.max_signatures)
        return compiled


def _saved(compiled):
    """A compiled signature as a pickle keeps it: without its imported flow or instance."""
    imported = compiled.imported
    fields = {"imported": (imported.func, imported.inputs, imported.outputs,
                           imported.specialized),
              "signature": compiled.signature, "input_names": compiled.input_names,
              "output_names": compiled.output_names, "seconds": compiled.seconds}
    if isinstance(compiled, CompiledProgram):
        return "program", fields, compiled.program
    return "cell", fields, compiled.network


def _restore(model, compiler_options, max_signatures, value_inputs, compiles, compiled, last,
             stages, names=None, dynamic=None):
    """The OnnxModel of :meth:`OnnxModel.__reduce__` (``names``, its input and output
    names, where the pickle has them: the model is not parsed unless it runs in stages;
    ``dynamic``, its DynamicDims, where it has them)."""
    if stages is None and names is not None:
        restored = OnnxModel.__new__(OnnxModel)     # (a model in stages is planned again)
        restored._start(None, model, compiler_options, max_signatures, *names)
    else:
        restored = OnnxModel(model, max_signatures=max_signatures, **compiler_options)
    restored._value_inputs = set(value_inputs)
    restored.dynamic = dynamic
    restored.compiles = list(compiles)
    for kind, fields, code in compiled:
        imported = importer.ImportedGraph(None, *fields.pop("imported"))
        if kind == "program":
            entry = CompiledProgram(imported=imported, program=code, **fields)
        else:
            cell = code.cell(imported.func)
            entry = CompiledCell(imported=imported, network=code, cell=cell,
                                 instance=cell.instance(), **fields)
        restored._compiled[entry.signature] = entry
    restored._last = restored._compiled.get(last)
    if stages is not None:
        planned = [] if restored.staged is None else restored.staged.graph.all_stages()
        if len(planned) != len(stages):
            from myelin.errors import SerializationError
            raise SerializationError(f"the saved model has {len(stages)} stages; planned "
                                     f"here, it has {len(planned)}")
        for stage, saved in zip(planned, stages):
            stage._model = saved
    return restored


def _shape_signature(imported):
    return tuple((s.name, dtypes.code(dtypes.to_numpy(s.dtype)), tuple(s.shape))
                 for s in imported.inputs)


def _describe(imported):
    return ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in imported.inputs) or \
        "no inputs"
