"""A model compiled for one input signature, and how a run goes through it (the ONNX and
PyTorch importers' compiled models, :class:`~myelin.importers.onnx.model.OnnxModel` and
:class:`~myelin.importers.torch.model.TorchModel`).

:class:`CompiledCell` is a model without control flow: one cell instance, guarded by a lock,
whose reference inputs read the caller's arrays in place and whose outputs are copied out
(fresh arrays, or the caller's ``out``). :class:`CompiledProgram` is a model with control flow,
run on :mod:`myelin.control`'s VM. Both run a list of inputs in the model's input order, or
say that the inputs do not have their signature, so that a run with the signature of the
previous one needs no cache key.
"""

import dataclasses
import threading
import time

import numpy as np

from myelin.flow import dtypes
from myelin.importers import outputs
from myelin.importers.graph import ImportedGraph


@dataclasses.dataclass
class Compiled:
    """What both kinds of compiled models share: the imported flow, the signature (the model's
    cache key: (name, dtype, shape[, value bytes]) per input), the model's input and output
    names, the seconds the compile took."""

    imported: ImportedGraph
    signature: tuple
    input_names: list
    output_names: list
    seconds: float

    def _checks(self, skipped=()):
        """(position, dtype, shape, value bytes or None) per input of the signature, but those
        at the positions ``skipped``."""
        checks = []
        for name, dtype, shape, *value in self.signature:
            position = self.input_names.index(name)
            if position not in skipped:
                checks.append((position, dtypes.from_code(dtype), shape,
                               value[0] if value else None))
        return checks


def _fits(checks, given):
    """True if the inputs ``given`` (in input order, as the caller gave them) pass ``checks``:
    C-contiguous arrays of their dtypes and shapes, and of their values where they have one."""
    for position, dtype, shape, value in checks:
        array = given[position]
        if not (isinstance(array, np.ndarray) and
                (array.dtype is dtype or array.dtype == dtype) and array.shape == shape and
                array.flags.c_contiguous) or (value is not None and array.tobytes() != value):
            return False
    return True


@dataclasses.dataclass
class CompiledCell(Compiled):
    """A model without control flow, compiled to one cell with one instance."""

    network: object
    cell: object
    instance: object
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def __post_init__(self):
        # The inputs the cell reads in place: every reference input of the cell (an input
        # without elements is not one), bound by the instance's runner in native code.
        bound = {self.input_names.index(s.name): s.var for s in self.imported.inputs
                 if 0 not in s.shape and s.var in self.cell}
        self._run = self.instance.runner(len(self.input_names), bound)
        checks = self._checks()
        self._unbound = [check for check in checks if check[0] not in bound]
        self._bound = [check for check in checks if check[0] in bound]
        positions = {s.var: self.input_names.index(s.name) for s in self.imported.inputs}
        self._views = [self._view(s, positions) for s in self.imported.outputs]
        self._static = not any(type(view) is tuple for view in self._views)

    def _view(self, signature, positions):
        """An output's view in the instance, or for an input passed through, (the input's
        position, the output's shape)."""
        if 0 in signature.shape:
            return np.empty(signature.shape, dtypes.to_numpy(signature.dtype))
        root = self.cell.spec(signature.var).root()
        if root.ref:
            return positions[root.name], signature.shape
        return self.instance.array(signature.var).reshape(signature.shape)

    def _exact(self, given):
        """``given`` with each array the cell reads in place seen as an ``ndarray`` of the
        very dtype object the runner wants (for arrays that :func:`_fits` but are of a
        subclass, or of an equal dtype that is another object)."""
        exact = list(given)
        for position, dtype, _, _ in self._bound:
            exact[position] = given[position].view(dtype, np.ndarray)
        return exact

    def run(self, given, targets):
        """The outputs for ``given`` (the inputs in input order): fresh copies, or written
        into ``targets`` (:mod:`.outputs`) where not None; None, computing nothing, if the
        inputs do not have this signature (or an array is strided)."""
        if self._unbound and not _fits(self._unbound, given):
            return None
        lock = self.lock
        lock.acquire()          # (a with statement costs twice as much)
        try:
            status = self._run(*given)      # the arrays read in place
            if status < 0:
                if not _fits(self._bound, given):
                    return None
                status = self._run(*self._exact(given))
            if status:
                raise self.instance.failure(status)
            views = self._views if self._static else \
                [given[view[0]].reshape(view[1]) if type(view) is tuple else view
                 for view in self._views]
            if targets is not None:
                return outputs.deliver(views, targets, self.output_names, copy=True)
            fresh = []
            for view in views:      # (a loop costs less than a list comprehension)
                fresh.append(view.copy())
            return fresh
        finally:
            lock.release()


@dataclasses.dataclass
class CompiledProgram(Compiled):
    """A model with control flow (If, Loop, Scan): the imported main function, given the
    graph inputs as parameters and the graph outputs as results, compiled by
    :func:`myelin.control.compile` and run on its VM (thread-safe: each thread has its own
    cell instances)."""

    program: object

    @property
    def network(self):
        return self.program.network

    @classmethod
    def compile(cls, imported, compiler_options, start, **fields):
        """Compile ``imported`` (``start``: when the compile began); ``fields``: the fields
        but ``imported``, ``program`` and ``seconds``."""
        import myelin.control

        flow = imported.flow
        func = flow.funcs[imported.func]
        func.params = [flow.var_named(s.var) for s in imported.inputs]
        func.results = [flow.var_named(s.var) for s in imported.outputs if s.var is not None]
        program = myelin.control.compile(flow, **compiler_options)
        return cls(imported=imported, program=program, seconds=time.perf_counter() - start,
                   **fields)

    def __post_init__(self):
        self._inputs = self._checks()

    def run(self, given, targets):
        """As :meth:`CompiledCell.run`."""
        if not _fits(self._inputs, given):
            return None
        arrays = dict(zip(self.input_names, given))
        results = self.program.run(self.imported.func,
                                   *(arrays[s.name] for s in self.imported.inputs))
        if not isinstance(results, tuple):
            results = (results,)
        results = iter(results)
        # Copies: a result may be a constant of the program, or an array it keeps.
        fresh = [np.empty(s.shape, dtypes.to_numpy(s.dtype)) if s.var is None
                 else np.array(next(results), dtypes.to_numpy(s.dtype)).reshape(s.shape)
                 for s in self.imported.outputs]
        return fresh if targets is None else \
            outputs.deliver(fresh, targets, self.output_names, copy=False)
