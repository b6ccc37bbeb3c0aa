"""Each step's kernel as a function in an LLVM module of its own, named by what it computes.

A step's kernel is emitted into a fresh module as ``i32 kernel(ptr t0, ..., ptr tn, ptr kept)``:
``t0 .. tn`` address the step's root tensors (in the order :func:`roots` gives), ``kept`` is a
table of the addresses of the arrays the kernel made at compile time (packed weights), in
the order it kept them. The function returns 0, or 1 where it found bad input at run time
(:meth:`~myelin.codegen.llvm.kernels.EmitContext.fail_if`). Nothing in the module depends on
where the tensors are, nor on the step's name: it is the kernel alone, its shapes, types,
alignments and options. So the module's text names the kernel: its function is
``myelin.kernel.<SHA-256 of the text>``, and steps whose kernels have the same text (the
identical blocks of a ResNet or a transformer) call one function, compiled once, and machine
code compiled for one network serves any other with that kernel
(the compile cache keeps it by symbol: :attr:`~myelin.codegen.llvm.codecache.CodeCache.kernels`).

A root argument is ``noalias`` where no other root of the step may overlap it (see
:func:`~.kernels.base.may_alias`). Constants
small enough to be compiled into the code stay in it (:func:`~.kernels.base.inlined`): their
values are part of the text; those that steps alike but for them take as arguments
(:func:`~.kernels.constants.pass_constants`) are not.
"""

import dataclasses
import hashlib
import math

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil
from myelin.codegen.llvm.kernels.base import (ArgumentContext, EmitContext, inlined,
                                              inlined_bytes, may_alias)
from myelin.errors import CompileError, MyelinError

PREFIX = "myelin.kernel."
_PLACEHOLDER = "myelin.kernel"


@dataclasses.dataclass
class KernelFunction:
    """A step's kernel: its function's ``symbol``, its module's ``text`` (LLVM IR), the root
    tensors its arguments address (``roots``), the arrays its ``kept`` table addresses and
    whether it can fail (``fails``)."""
    symbol: str
    text: str
    roots: list
    kept: list
    fails: bool


def roots(step):
    """The root tensors of ``step`` that a kernel function takes as arguments, in order: each
    distinct root of its inputs and outputs but the constants compiled into the code."""
    found = {}
    for tensor in list(step.inputs) + list(step.outputs):
        root = tensor.root()
        if not inlined(root):
            found.setdefault(id(root), root)
    return list(found.values())


class Helpers:
    """The helper functions of kernel functions (:meth:`EmitContext.function
    <myelin.codegen.llvm.kernels.EmitContext.function>`: a matrix product's tile, an outlined
    convolution and the tiles it calls), each built once for all kernels, in a module of its
    own named by its IR as a kernel's is (``add(symbol, text)`` is called with each), and
    declared in the module of each kernel or helper that calls it."""

    def __init__(self, target, add):
        self.target = target
        self.add = add
        self._made = {}           # key -> (symbol, the function as built)

    def declare(self, module, key, build):
        """The helper ``build(module)`` makes for ``key``, declared in ``module``."""
        made = self._made.get(key)
        if made is None:
            own = ir.Module(name="helper")
            irutil.set_target(own, self.target)
            own.myelin_helpers = self       # (the helpers it calls are shared too)
            function = build(own)
            function.linkage = ""
            symbol, text = _named(own, function.name)
            self.add(symbol, text)
            made = self._made[key] = (symbol, function)
        symbol, function = made
        declared = module.globals.get(symbol)
        if declared is None:
            declared = ir.Function(module, function.ftype, symbol)
            for attribute in function.attributes:
                declared.attributes.add(attribute)
            for mine, theirs in zip(declared.args, function.args):
                for attribute in theirs.attributes:
                    mine.add_attribute(attribute)
        return declared


def _named(module, name):
    """(symbol, text) of ``module`` with its function ``name`` renamed to the symbol its text
    gives it."""
    text = str(module)
    symbol = PREFIX + hashlib.sha256(text.encode()).hexdigest()[:40]
    return symbol, text.replace(f'@"{name}"', f'@"{symbol}"')


class KernelFunctions:
    """A network's kernel functions as its cells are emitted: the module text of each
    distinct kernel and helper by symbol (``texts``), the helpers (:class:`Helpers`, built
    once for all cells) and the functions so far by :func:`signature`.

    With a ``cache`` (:class:`~myelin.codegen.llvm.kernelcache.KernelCache`), a kernel that
    shares code is first looked up there by signature: found, it is not emitted, and its
    machine code and its helpers' are in ``found`` (by symbol) instead of ``texts``; the
    signature of each one emitted is in ``emitted`` (by symbol), to be kept once compiled.
    ``on_text(symbol, text)``, if given, is called with each new text as it is made (to
    compile it while the next is emitted)."""

    def __init__(self, target, cache=None, on_text=None):
        self.texts = {}
        self.helpers = Helpers(target, self.add)
        self.by_signature = {}
        self.cache = cache
        self.found = {}
        self.emitted = {}
        self.on_text = on_text

    def add(self, symbol, text):
        """Record the module ``text`` of the function ``symbol`` (once)."""
        if symbol not in self.texts:
            self.texts[symbol] = text
            if self.on_text:
                self.on_text(symbol, text)


def emit_kernel(step, target, instance_alignment, threads, externals, functions):
    """The :class:`KernelFunction` of ``step`` (its kernel emitted for ``target``, splitting
    work over ``threads``; the worker pool's address goes to ``externals``), its text and
    its helpers' added to ``functions`` (:class:`KernelFunctions`). A step whose kernel shares
    code (:attr:`~myelin.codegen.llvm.kernels.Kernel.shares_code`) with an earlier step of
    the same :func:`signature` takes that step's function, with arrays of its own kept, and
    is not emitted again."""
    arguments = roots(step)
    key = None
    if step.kernel.shares_code:
        key = signature(step, arguments, instance_alignment)
        first = functions.by_signature.get(key) or _cached(key, functions, externals)
        if first is not None:
            placed = EmitContext(None, target, None, instance_alignment, threads, externals)
            return dataclasses.replace(first, roots=arguments,
                                       kept=step.kernel.kept(placed, step))
    function = _emit(step, arguments, target, instance_alignment, threads, externals,
                     functions.helpers)
    functions.add(function.symbol, function.text)
    if key is not None:
        functions.by_signature[key] = function
        if functions.cache is not None:
            functions.emitted.setdefault(function.symbol, (key, function.fails))
    return function


def _cached(key, functions, externals):
    """The kernel function of signature ``key`` found in ``functions.cache`` (its code and
    its helpers' added to ``functions.found``, its external symbols to ``externals``), or
    None."""
    found = functions.cache and functions.cache.find(key)
    if not found:
        return None
    functions.found.update(found.objects)
    externals.adopt(found.symbols, found.addresses)
    function = KernelFunction(found.symbol, None, None, None, found.fails)
    functions.by_signature[key] = function
    return function


def signature(step, arguments, instance_alignment):
    """All a kernel that shares code may read of ``step`` (whose kernel function takes the
    root tensors ``arguments``) as it emits: the kernel, the step's type, attributes, variant
    and options, and of each tensor its type, what the code depends on of its shape
    (:meth:`~myelin.codegen.llvm.kernels.Kernel.code_shapes`), which argument holds it,
    whether its root is a global and of which kind, how that is aligned and may alias the
    others, and the values of constants compiled into the code. The target, threads and
    alignment of the instance are the network's."""
    position = {id(root): index for index, root in enumerate(arguments)}
    tensors = []
    for tensor, shape in zip(list(step.inputs) + list(step.outputs),
                             step.kernel.code_shapes(step)):
        root = tensor.root()
        var = getattr(root, "var", None)
        tensors.append((tensor.dtype, shape, position.get(id(root)),
                        tensor is root, root.is_global and root.kind, root.ref,
                        root.address is None,
                        root.alignment, var is not None and var.data is not None,
                        None if root.offset is None else math.gcd(root.offset,
                                                                  instance_alignment),
                        inlined_bytes(root)))
    return (type(step.kernel), step.type, step.variant, tuple(sorted(step.attrs.items())),
            repr(sorted(step.choice.items())), tuple(tensors),
            tuple(may_alias(root, arguments) for root in arguments))


def _emit(step, arguments, target, instance_alignment, threads, externals, helpers):
    """The :class:`KernelFunction` of ``step`` taking ``arguments``, emitted."""
    module = ir.Module(name="kernel")
    irutil.set_target(module, target)
    module.myelin_helpers = helpers
    function = ir.Function(module, kernel_type(len(arguments)), _PLACEHOLDER)
    function.attributes.add("nounwind")
    for argument, root in zip(function.args, arguments):
        if not may_alias(root, arguments):
            argument.add_attribute("noalias")
    entry = function.append_basic_block("entry")
    builder = ir.IRBuilder(entry)
    body = function.append_basic_block("body")
    builder.branch(body)
    builder.position_at_end(body)
    placed = EmitContext(builder, target, None, instance_alignment, threads, externals)
    ctx = _KernelContext(step, builder, dict(zip(map(id, arguments), function.args)), placed,
                         function.args[-1])
    try:
        step.kernel.emit(ctx, step)
    except MyelinError:
        raise
    except Exception as error:
        raise CompileError(f"kernel {step.kernel.kernel_name(step)} failed on step "
                           f"{step.name} ({step.type}): {error}") from error
    builder.ret(ir.Constant(irutil.I32, 0))
    symbol, text = _named(module, _PLACEHOLDER)
    return KernelFunction(symbol, text, arguments, ctx.kept, ctx.fails)


def kernel_type(count):
    """The LLVM type of a kernel function of ``count`` root tensors."""
    return ir.FunctionType(irutil.I32, [irutil.PTR] * (count + 1))


class _KernelContext(ArgumentContext):
    """The emit context of a kernel function: tensors are its arguments (aligned as placed),
    kept arrays its table's entries, and a failure returns 1."""

    def __init__(self, step, builder, pointers, placed, table):
        super().__init__(builder, placed.target, pointers, placed, placed.threads,
                         alignment=placed.alignment, table=(table, 0))
        self.step = step
        self.fails = False

    def fail_if(self, condition):
        self.fails = True
        super().fail_if(condition)

    def parallel(self, name, tensors, count, emit_task, outline=False):
        # (task functions are named without the step's name, which is not the kernel's)
        if self.step.name:
            name = name.replace(self.step.name, "step")
        super().parallel(name, tensors, count, emit_task, outline)
