"""A network's CUDA module: every kernel of its cells in one CUDA C source, compiled once.

The source is the prelude (:mod:`~myelin.codegen.cuda.support`) followed by each kernel's
definition in plan order; NVRTC compiles it for the target's architecture, through the module
cache (:mod:`~myelin.codegen.cuda.modulecache`; by default one per process, in memory and in
``cache_dir("cuda")``, on disk unless $MYELIN_CACHE is "off").
"""

import dataclasses
import os

from myelin.codegen.cuda import support
from myelin.codegen.cuda.modulecache import ModuleCache

_default_cache = None


def default_cache():
    """The process's module cache."""
    global _default_cache
    if _default_cache is None:
        off = os.environ.get("MYELIN_CACHE", "").strip().lower() in ("0", "off", "no", "false")
        _default_cache = ModuleCache(False if off else None)
    return _default_cache


@dataclasses.dataclass
class CudaModule:
    """The compiled module: its ``source``, its kernels (``KernelCode``, in source order),
    the architecture, NVRTC's :class:`~myelin.codegen.cuda.nvrtc.Binary` and where the binary
    came from ("nvrtc", "memory" or "disk")."""

    source: str
    kernels: list
    arch: str
    binary: object
    origin: str


def module_source(kernels):
    """The CUDA C source of a module holding ``kernels``."""
    return support.PRELUDE + "".join("\n" + kernel.source for kernel in kernels)


def build(kernels, target, cache=None, options=()):
    """Compile ``kernels`` into one module for ``target`` (a CudaTarget) with extra NVRTC
    ``options``, through ``cache`` (default: :func:`default_cache`)."""
    cache = cache or default_cache()
    source = module_source(kernels)
    binary = cache.compile(source, target.arch, tuple(options))
    return CudaModule(source, list(kernels), target.arch, binary, cache.origin)
