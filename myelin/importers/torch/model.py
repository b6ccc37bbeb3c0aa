"""A PyTorch callable compiled per input signature: tensors in, tensors out, no copies.

:class:`TorchModel` exports its callable (an ``nn.Module``, or a graph Dynamo hands over) for
the signature of the arguments it is called with (the type and shape of each tensor, the
value of every other argument), imports the program into a flow, compiles it and keeps the
compiled form per signature (at most ``max_signatures``, least recently used dropped, every
compile logged on the ``myelin.torch`` logger and listed in ``compiles``), as
:class:`myelin.onnx.OnnxModel` does. Input tensors are read in place: each is a NumPy view of
the tensor's memory (the buffer protocol), bound as a reference input of the cell; outputs are
copied once out of the cell's instance into arrays that ``torch.from_numpy`` wraps without
another copy. A call with the signature of the previous one goes straight to its compiled form.

Parameters and buffers are constants of the flow: their values when the signature was compiled
(a constant shares the tensor's memory where the compiler keeps it as it is). A tensor changed
in place since (an optimizer step, ``load_state_dict``) changes PyTorch's version counter of it,
and the next call recompiles with the new values. ``bind_parameters=True`` makes them inputs of
the flow instead, bound to the tensors at every call, so that their current values are read
(slower: the compiler cannot fold batch norms into convolutions or pack constant weights).

Inference only: myelin computes no gradients for PyTorch. Where autograd would record the call
(grad mode on and a parameter or input that requires grad), the results come from a function
whose backward raises UnsupportedOpError saying so.
"""

import logging
import time

import numpy as np
import torch
from torch.utils import _pytree as pytree

from myelin import limits
from myelin.errors import InputError, UnsupportedOpError, UnsupportedTypeError
from myelin.importers.cache import SignatureCache
from myelin.importers.compiled import CompiledCell
from myelin.importers.torch import exporting
from myelin.importers.torch import importer, types

log = logging.getLogger("myelin.torch")


class TorchModel:
    """``module`` (an ``nn.Module`` or a callable of tensors) compiled by myelin for each
    input signature it is called with; call it as the module.

    ``example_inputs`` (a tuple of arguments, and ``example_kwargs``) compile at once;
    otherwise the first call compiles. ``frozen`` maps positions of the flattened arguments to
    tensors that are constants of the flow (the parameters among a Dynamo graph's
    arguments). ``bind_parameters``: parameters and buffers are read at every call instead
    of being constants. ``max_signatures`` bounds the compiled signatures kept;
    ``compiler_options`` go to :class:`myelin.Compiler`.
    """

    def __init__(self, module, example_inputs=None, example_kwargs=None, *, frozen=None,
                 bind_parameters=False, precision="float32", max_signatures=8,
                 **compiler_options):
        if not callable(module):
            raise InputError(f"myelin.torch compiles an nn.Module or a callable, not "
                             f"{type(module).__name__}")
        self.module = module
        self.frozen = dict(frozen or {})
        self.bind_parameters = bool(bind_parameters)
        if precision not in importer.PRECISIONS:
            raise InputError(f"precision {precision!r} is not one of "
                             f"{', '.join(importer.PRECISIONS)}")
        self.precision = precision
        from myelin.compiler import checked_options

        self.compiler_options = checked_options(compiler_options)
        self._cache = SignatureCache(max_signatures, log)
        self.timings = []          # per compile: seconds of export, decompose, import, compile
        if example_inputs is not None or example_kwargs is not None:
            args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else \
                (() if example_inputs is None else (example_inputs,))
            self._lookup(args, dict(example_kwargs or {}), "example inputs given")

    @property
    def compiles(self):
        """(signature, reason, seconds) per compile, in order."""
        return self._cache.compiles

    @property
    def max_signatures(self):
        return self._cache.max_signatures

    def network(self):
        """The compiled Network of the most recent compile."""
        return self._cache.latest().compiled.network

    @property
    def flow(self):
        """The imported flow of the most recent compile (before optimization)."""
        return self._cache.latest().compiled.imported.flow

    def __call__(self, *args, **kwargs):
        last = self._cache.last
        if last is not None and not kwargs:
            result = last.call_flat(args)
            if result is not _MISS:
                return result
        leaves, spec = pytree.tree_flatten((args, kwargs))
        key = self._key(leaves, spec)
        compiled = self._cache.get(key)
        reason = None
        if compiled is not None:
            result = compiled.call(leaves, spec, contiguous=True)
            if result is not _MISS:
                return result
            reason = "parameters changed in place"        # (the rest is in the key)
            self._cache.drop(key)
        compiled = self._cache.lookup(key, lambda: self._compile(args, kwargs, leaves, key,
                                                                 reason))
        result = compiled.call(leaves, spec, contiguous=True)
        if result is _MISS:
            raise InputError("the arguments changed while they were compiled for")
        return result

    forward = __call__

    def _key(self, leaves, spec):
        return (spec, tuple(_leaf_key(leaf, i in self.frozen) for i, leaf in enumerate(leaves)))

    def _lookup(self, args, kwargs, reason):
        """Compile for ``args`` and ``kwargs`` unless their signature is compiled."""
        leaves, spec = pytree.tree_flatten((args, kwargs))
        key = self._key(leaves, spec)
        return self._cache.lookup(key, lambda: self._compile(args, kwargs, leaves, key,
                                                             reason))

    def _compile(self, args, kwargs, leaves, key, reason):
        from myelin.compiler import Compiler

        start = time.perf_counter()
        timings = {}
        frozen = {}
        for position, tensor in self.frozen.items():
            frozen[position] = leaves[position]       # the tensor of this call
        with limits.scope(self.compiler_options.get("max_tensor_bytes")):
            program = exporting.export(self.module, _detached(args), _detached(kwargs),
                                       timings)
            begin = time.perf_counter()
            imported = importer.import_program(program, frozen=frozen,
                                               bind_parameters=self.bind_parameters,
                                               precision=self.precision)
            timings["import"] = time.perf_counter() - begin
        flow = imported.flow
        for s in imported.inputs:
            flow.vars[s.var].ref = 0 not in s.shape        # read in place
        begin = time.perf_counter()
        network = Compiler(**self.compiler_options).compile(flow)
        timings["compile"] = time.perf_counter() - begin
        cell = network.cell(imported.func)
        signature = tuple((s.name, np.dtype(s.dtype).str, tuple(s.shape))
                          for s in imported.inputs)
        names = [s.name for s in imported.inputs]
        compiled = CompiledCell(imported=imported, network=network, cell=cell,
                                instance=cell.instance(), signature=signature,
                                input_names=names,
                                output_names=[s.name for s in imported.outputs],
                                seconds=time.perf_counter() - start)
        self.timings.append(timings)
        form = _Compiled(self, compiled, imported, program, leaves, key[0], frozen)
        what = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in imported.inputs
                         if s.name not in imported.bound) or "no inputs"
        reason = reason or self._reason(leaves)
        return form, what, reason, compiled.seconds

    def _reason(self, leaves):
        if not self._cache.compiles:
            return "first call"
        previous = self._cache.compiles[-1][0][1]
        changes = []
        now = [_leaf_key(leaf, i in self.frozen) for i, leaf in enumerate(leaves)]
        for i, (old, new) in enumerate(zip(previous, now)):
            if old != new:
                changes.append(f"argument {i}: {_describe(old)} -> {_describe(new)}")
        if len(previous) != len(now):
            changes.append(f"{len(previous)} -> {len(now)} arguments")
        return "; ".join(changes) or "new input signature"


_MISS = object()


class _Compiled:
    """One compiled signature: the compiled cell, where its inputs come from among the
    flattened arguments, and how its results become the module's (nested) results."""

    def __init__(self, model, compiled, imported, program, leaves, spec, frozen):
        self.compiled = compiled
        self.spec = spec
        self.positions = imported.user_inputs            # per cell input: leaf position
        self.bound = [_array(imported.bound[s.name], s.name) for s, p in
                      zip(imported.inputs, imported.user_inputs) if p is None]
        self.bound_tensors = [imported.bound[s.name] for s, p in
                              zip(imported.inputs, imported.user_inputs) if p is None]
        tensor_positions = {p for p in self.positions if p is not None}
        # Leaves that are no cell input: values the compile specialized on (numbers, unused
        # tensors' types) and frozen tensors (constants).
        self.checks = []
        self.frozen = []
        for i, leaf in enumerate(leaves):
            if i in frozen:
                self.frozen.append((i, frozen[i], _version(frozen[i])))
            elif i not in tensor_positions:
                self.checks.append((i, _leaf_key(leaf, False)))
        self.arity = len(leaves)
        self.flat = spec == pytree.tree_flatten((tuple(leaves), {}))[1]
        self.constants = [(t, _version(t)) for t in _program_constants(program)] \
            if not model.bind_parameters else []
        self.results = imported.results
        self.mutations = dict(imported.mutations)        # result position -> leaf position
        self.out_spec = program.call_spec.out_spec
        self.single = self.out_spec.is_leaf()          # one result, no structure around it
        self.anchor = None
        if isinstance(model.module, torch.nn.Module) and not model.frozen:
            self.anchor = next((p for p in model.module.parameters() if p.requires_grad), None)
        self.user_positions = [p for p in self.positions if p is not None]

    def call_flat(self, args):
        """The results for positional ``args`` if they have this signature; _MISS if not."""
        if not self.flat or len(args) != self.arity:
            return _MISS
        return self._run(args, False)

    def call(self, leaves, spec, contiguous):
        """The results for the flattened arguments ``leaves`` (of structure ``spec``); _MISS
        if they do not have this signature. ``contiguous``: strided tensors are copied."""
        if spec != self.spec or len(leaves) != self.arity:
            return _MISS
        return self._run(leaves, contiguous)

    def _run(self, leaves, contiguous):
        for position, value in self.checks:
            if _leaf_key(leaves[position], False) != value:
                return _MISS
        for position, tensor, version in self.frozen:
            leaf = leaves[position]
            if leaf is not tensor or _version(leaf) != version:
                return _MISS
        for tensor, version in self.constants:
            if tensor._version != version:
                return _MISS
        arrays = []
        for position in self.user_positions:
            leaf = leaves[position]
            if not isinstance(leaf, torch.Tensor):
                return _MISS
            array = _array(leaf, position)
            arrays.append(np.ascontiguousarray(array) if contiguous else array)
        if self.bound:
            arrays.extend(self.bound)
        anchor = self._anchor(leaves)
        if anchor is not None:
            held = []
            tracked = iter(_InferenceOnly.apply(self, arrays, held, anchor))
            if not held:
                return _MISS
            results = [next(tracked) if isinstance(r, torch.Tensor) else r for r in held[0]]
            return self._structured(results, leaves)
        outputs = self.compiled.run(arrays, None)
        if outputs is None:
            return _MISS
        return self._structured(self._tensors(outputs), leaves)

    def _anchor(self, leaves):
        """A tensor that autograd would record this call for (None: no need)."""
        if not torch.is_grad_enabled():
            return None
        if self.anchor is not None and self.anchor.requires_grad:
            return self.anchor
        for position in self.user_positions:
            leaf = leaves[position]
            if leaf.requires_grad:
                return leaf
        for _, tensor, _ in self.frozen:
            if tensor.requires_grad:
                return tensor
        return None

    def _tensors(self, outputs):
        """The results in order: tensors of the cell's outputs, or the values known at
        import."""
        results = []
        for entry in self.results:
            if isinstance(entry, importer.Value):
                value = entry.value
                results.append(value.clone() if isinstance(value, torch.Tensor) else value)
            else:
                results.append(types.from_array(outputs[entry]))
        return results

    def _structured(self, results, leaves):
        if self.mutations:
            for position, leaf_position in self.mutations.items():
                with torch.no_grad():
                    leaves[leaf_position].copy_(results[position])
            results = [r for i, r in enumerate(results) if i not in self.mutations]
        if self.single:
            return results[0]
        return pytree.tree_unflatten(results, self.out_spec)


class _InferenceOnly(torch.autograd.Function):
    """The compiled call as autograd sees it: results that require grad, whose backward says
    that myelin computes inference only."""

    @staticmethod
    def forward(ctx, compiled, arrays, held, anchor):
        """The results of the compiled call (the list of all of them put in ``held``; the
        tensors among them returned, to be recorded); nothing if the inputs do not have the
        compiled signature."""
        outputs = compiled.compiled.run(arrays, None)
        if outputs is None:
            return ()
        results = compiled._tensors(outputs)
        held.append(results)
        tensors = [r for r in results if isinstance(r, torch.Tensor)]
        ctx.mark_non_differentiable(*[t for t in tensors if not t.is_floating_point()])
        return tuple(tensors)

    @staticmethod
    def backward(ctx, *grads):
        raise UnsupportedOpError(
            "myelin computes inference only: the results of a model compiled by myelin "
            "(myelin.torch.compile, or torch.compile(backend='myelin')) have no gradient. "
            "Train with PyTorch's own autograd (backend='inductor' or eager), and compile for "
            "inference under torch.no_grad()")


def _program_constants(program):
    """The tensors of ``program``'s parameters, buffers and constants."""
    found = []
    for value in list(program.state_dict.values()) + list(program.constants.values()):
        if isinstance(value, torch.Tensor):
            found.append(value)
    return found


def _version(tensor):
    try:
        return tensor._version
    except (AttributeError, RuntimeError):         # inference tensors keep no version
        return 0


def _array(tensor, where):
    """A NumPy view of ``tensor``'s memory (no copy): InputError for a tensor not on the
    CPU, UnsupportedTypeError for a type myelin lacks."""
    if tensor.requires_grad:
        tensor = tensor.detach()
    if tensor.device.type != "cpu":
        raise InputError(f"argument {where} is on {tensor.device}: myelin computes on the CPU "
                         f"(move it with .cpu())")
    try:
        return types.to_array(tensor)
    except TypeError:
        types.to_myelin(tensor.dtype, f"argument {where}")
        raise
    except RuntimeError:           # a conjugate or negative view, a sparse tensor
        return types.to_array(tensor.resolve_conj().resolve_neg().contiguous())


def _leaf_key(leaf, frozen):
    """What the signature keeps of an argument: a tensor's type and shape (and, when it is
    frozen, which tensor and its version); another value itself."""
    if isinstance(leaf, torch.Tensor):
        if frozen:
            return ("frozen", id(leaf), _version(leaf), leaf.dtype, tuple(leaf.shape))
        return ("tensor", leaf.dtype, tuple(leaf.shape))
    if isinstance(leaf, (bool, int, float, str, type(None), torch.dtype, torch.device)):
        return ("value", type(leaf).__name__, leaf)
    raise UnsupportedTypeError(f"myelin.torch takes tensors and Python numbers as arguments, "
                               f"not {type(leaf).__name__}")


def _describe(key):
    if key[0] == "tensor":
        return f"{str(key[1]).replace('torch.', '')}{list(key[2])}"
    if key[0] == "frozen":
        return "parameter changed"
    return repr(key[2])


def _detached(value):
    """Arguments for export: tensors without autograd history."""
    return pytree.tree_map(lambda v: v.detach() if isinstance(v, torch.Tensor) else v, value)
