"""A compiled ONNX model: compiled per input signature, cached, run from NumPy arrays.

The code myelin generates is specialized to concrete shapes. :class:`OnnxModel` compiles the
model for the shapes (and dtypes) of the inputs it is given, plus the values of inputs the
graph uses as shapes, keeps the result per signature, and logs every compile with its reason
(first run, new batch size, ...). Each signature has one instance, guarded by a lock, so a model
can be called from several threads. At most ``max_signatures`` compiled signatures are kept:
compiling one more drops the least recently used (logged like compiles).
"""

import collections
import dataclasses
import functools
import logging
import threading
import time

import numpy as np

from myelin import limits
from myelin.errors import InputError
from myelin.flow import dtypes
from myelin.importers.onnx import importer, proto, staged
from myelin.ops.control import is_control

log = logging.getLogger("myelin.onnx")


@dataclasses.dataclass
class _Compiled:
    imported: importer.ImportedGraph
    network: object
    cell: object
    instance: object
    lock: threading.Lock
    seconds: float

    def __post_init__(self):
        # What run() binds and copies out, worked out once.
        cell = self.cell
        self.feeds = [(s.name, cell.index(s.var), cell.spec(s.var).shape)
                      for s in self.imported.inputs if 0 not in s.shape and s.var in cell]
        self.results = [self._view(s) for s in self.imported.outputs]

    def _view(self, signature):
        """An output's view in the instance, or a function making it (an input passed
        through, whose array is bound at each run)."""
        if 0 in signature.shape:
            return np.empty(signature.shape, dtypes.to_numpy(signature.dtype))
        spec = self.cell.spec(signature.var)
        if spec.root().ref:
            return lambda: self.instance.tensor(signature.var).numpy().reshape(signature.shape)
        return self.instance.tensor(signature.var).numpy().reshape(signature.shape)

    def fetch(self):
        """Fresh copies of the outputs."""
        return [(view() if callable(view) else view).copy() for view in self.results]

    def run(self, feeds):
        with self.lock:
            for name, index, shape in self.feeds:
                # Inputs are references: the cell reads the caller's array (of the dtype and
                # size compiled for) in place, or a contiguous copy of it.
                self.instance.bind(index, np.ascontiguousarray(feeds[name]).reshape(shape))
            self.instance.compute()
            return self.fetch()


@dataclasses.dataclass
class _CompiledProgram:
    """A model with control flow (If, Loop, Scan): the imported main function, given the
    graph inputs as parameters and the graph outputs as results, compiled by
    :func:`myelin.control.compile` and run on its VM (thread-safe: each thread has its own
    cell instances)."""

    imported: importer.ImportedGraph
    program: object
    seconds: float

    @property
    def network(self):
        return self.program.network

    @classmethod
    def compile(cls, imported, compiler_options, start):
        import myelin.control

        flow = imported.flow
        func = flow.funcs[imported.func]
        func.params = [flow.var_named(s.var) for s in imported.inputs]
        func.results = [flow.var_named(s.var) for s in imported.outputs if s.var is not None]
        program = myelin.control.compile(flow, **compiler_options)
        return cls(imported, program, time.perf_counter() - start)

    def run(self, feeds):
        results = self.program.run(self.imported.func,
                                   *(feeds[s.name] for s in self.imported.inputs))
        if not isinstance(results, tuple):
            results = (results,)
        results = iter(results)
        # Copies: a result may be a constant of the program, or an array it keeps.
        return [np.empty(s.shape, dtypes.to_numpy(s.dtype)) if s.var is None
                else np.array(next(results), dtypes.to_numpy(s.dtype)).reshape(s.shape)
                for s in self.imported.outputs]


class OnnxModel:
    """An ONNX model compiled on demand for each input signature.

    ``model`` is a path, bytes or ModelProto. ``base_dir`` is the directory holding the files
    of tensors stored as external data: by default a path's folder; bytes and ModelProtos have
    none, so such a model needs it. ``input_shapes`` (name -> shape) fixes dynamic dimensions
    and compiles at once; otherwise the first :meth:`run` compiles for its inputs. At most
    ``max_signatures`` compiled signatures are kept, the least recently used going first.
    ``compiler_options`` go to :class:`myelin.Compiler` (``max_tensor_bytes`` bounds the
    tensors of the import as well as those compiled, see :mod:`myelin.limits`). A model
    with control flow (If, Loop, Scan that stay in the imported flow) is compiled by
    :func:`myelin.control.compile` with the same options and runs on its VM. A model whose
    shapes depend on values computed at run time (NonZero, NonMaxSuppression, ...) runs in
    stages, ``staged`` (:mod:`.staged`; None for other models), whose ``compiles`` list the
    stages' compiles.
    """

    def __init__(self, model, input_shapes=None, base_dir=None, max_signatures=8,
                 **compiler_options):
        if isinstance(max_signatures, bool) or not isinstance(max_signatures, int) or \
                max_signatures < 1:
            raise InputError(f"max_signatures must be a positive int, not {max_signatures!r}")
        self.proto = proto.load(model, base_dir)
        importer.check_supported(self.proto)
        self.compiler_options = compiler_options
        self.max_signatures = max_signatures
        self.input_names = [i.name for i in self.proto.graph.input
                            if i.name not in {t.name for t in self.proto.graph.initializer}]
        self.output_names = [o.name for o in self.proto.graph.output]
        self._value_inputs = set()     # inputs the graph reads as shapes or parameters
        self._compiled = collections.OrderedDict()   # least recently used first
        self._lock = threading.Lock()        # held while compiling
        self._order_lock = threading.Lock()  # held while the order of _compiled changes
        self.compiles = []             # (signature, reason, seconds) per compile
        # Shapes that depend on run-time values: stages, each an OnnxModel (staged.py).
        self.staged = staged.plan(self.proto, functools.partial(
            OnnxModel, max_signatures=max_signatures, **compiler_options))
        if input_shapes is not None:
            unknown = sorted(set(input_shapes) - set(self.input_names))
            if unknown:
                raise InputError(f"input_shapes names {unknown}, which the model does not "
                                 f"take; its inputs are {self.input_names}")
            if self.staged is not None:
                self.staged.compile_first(dict(input_shapes))
            else:
                self._compile(dict(input_shapes), {}, "shapes given at load time")

    @property
    def flow(self):
        """The imported flow of the most recent compile (before optimization)."""
        if not self.compiles:
            raise InputError("the model has not been compiled yet")
        return self._compiled[self.compiles[-1][0]].imported.flow

    def network(self, signature=None):
        """The compiled Network of ``signature`` (default: the most recent compile)."""
        if not self.compiles:
            raise InputError("the model has not been compiled yet")
        compiled = self._compiled.get(signature or self.compiles[-1][0])
        if compiled is None:
            raise InputError(f"no compiled network for signature {signature} (never "
                             f"compiled, or dropped as least recently used)")
        return compiled.network

    def run(self, inputs):
        """Compute the outputs for ``inputs`` (a dict by name, or a list in input order);
        returns a list of arrays in output order (fresh copies)."""
        feeds = self._feeds(inputs)
        if self.staged is not None:
            return self.staged.run(feeds)
        return self._lookup(feeds).run(feeds)

    __call__ = run

    # Signatures.
    def _feeds(self, inputs):
        if isinstance(inputs, dict):
            unknown = set(inputs) - set(self.input_names)
            if unknown:
                raise InputError(f"the model has no inputs {sorted(unknown)}; its inputs are "
                                 f"{self.input_names}")
            missing = [name for name in self.input_names if name not in inputs]
            if missing:
                raise InputError(f"missing inputs {missing}")
            return {name: np.asarray(inputs[name]) for name in self.input_names}
        inputs = list(inputs)
        if len(inputs) != len(self.input_names):
            raise InputError(f"the model takes {len(self.input_names)} inputs "
                             f"({self.input_names}), got {len(inputs)}")
        return {name: np.asarray(value) for name, value in zip(self.input_names, inputs)}

    def _signature(self, feeds):
        parts = []
        for name in self.input_names:
            value = feeds[name]
            part = (name, value.dtype.str, value.shape)
            if name in self._value_inputs:
                part += (value.tobytes(),)
            parts.append(part)
        return tuple(parts)

    def _lookup(self, feeds):
        signature = self._signature(feeds)
        with self._order_lock:
            compiled = self._compiled.get(signature)
            if compiled is not None:
                self._compiled.move_to_end(signature)
                return compiled
        with self._lock:
            compiled = self._compiled.get(signature)
            if compiled is None:
                reason = self._reason(feeds)
                shapes = {name: value.shape for name, value in feeds.items()}
                compiled = self._compile(shapes, feeds, reason)
        return compiled

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
        if any(is_control(op) for op in imported.flow.ops.values()):
            compiled = _CompiledProgram.compile(imported, self.compiler_options, start)
        else:
            for given in imported.inputs:
                imported.flow.vars[given.var].ref = 0 not in given.shape   # read in place
            network = Compiler(**self.compiler_options).compile(imported.flow)
            cell = network.cell(imported.func)
            compiled = _Compiled(imported, network, cell, cell.instance(), threading.Lock(),
                                 time.perf_counter() - start)
        seconds = compiled.seconds
        self.compiles.append((signature, reason, seconds))
        log.info("compiled %s in %.3f s (%s)", _describe(imported), seconds, reason)
        with self._order_lock:
            self._compiled[signature] = compiled
            while len(self._compiled) > self.max_signatures:
                _, dropped = self._compiled.popitem(last=False)
                log.info("dropped the compiled %s (least recently used; max_signatures=%d)",
                         _describe(dropped.imported), self.max_signatures)
        return compiled


def _shape_signature(imported):
    return tuple((s.name, dtypes.to_numpy(s.dtype).str, tuple(s.shape)) for s in imported.inputs)


def _describe(imported):
    return ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in imported.inputs) or \
        "no inputs"
