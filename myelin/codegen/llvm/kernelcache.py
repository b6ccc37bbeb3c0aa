"""Kernel functions in the compile cache, found by symbol and by signature.

By symbol: a kernel or helper function's machine code, for the LLVM IR its symbol names
(:mod:`myelin.codegen.llvm.kernelfunc`), whatever network or myelin made that IR.

By signature: a step whose kernel shares code (:attr:`~.kernels.Kernel.shares_code`) makes
code that depends only on its :func:`~.kernelfunc.signature`, myelin's source, the target,
the threads and the instance alignment; an entry under those (the signature as canonical
JSON, hashed) holds the kernel's machine code and names the helpers it calls, so a network
whose kernels were compiled before (the same model with other weights, another model with
the same layers) finds its code without emitting any IR. A signature that does not
serialize exactly (an attribute of an unknown type) is not looked up: the kernel is emitted.
"""

import dataclasses
import hashlib
import json

import numpy as np

from myelin.codegen.llvm import codecache, elf, externals, kernelfunc

_SIGNATURE_FORMAT = 1


@dataclasses.dataclass
class Found:
    """A kernel found by signature: its ``symbol``, whether it can fail (``fails``), the
    machine code of it and of the helpers it calls (``objects``, by symbol), the table rows
    of the external symbols it uses (``symbols``) and their ``addresses`` in this process."""
    symbol: str
    fails: bool
    objects: dict
    symbols: list
    addresses: dict


class KernelCache:
    """The kernel functions of ``cache`` (a :class:`~.codecache.CodeCache`'s ``kernels``)
    for one compile: ``target``, LLVM's ``opt_level`` for kernels, ``threads`` and the
    instance's ``alignment``."""

    def __init__(self, cache, target, opt_level, threads, alignment):
        self.cache = cache
        self.target = target
        self.opt_level = opt_level
        self.threads = threads
        self.alignment = alignment

    def _machine(self):
        return {"triple": self.target.triple, "cpu": self.target.cpu,
                "features": self.target.features}

    def symbol_fields(self, symbol):
        """The key's fields of the function ``symbol``: its symbol names its code (LLVM IR),
        which LLVM compiles for the target alike whatever made it (but the engine that
        compiles it)."""
        return {"format": codecache.FORMAT, "kernel": symbol,
                "opt_level": self.opt_level, "engine": codecache.engine_fingerprint(),
                **self._machine()}

    def signature_fields(self, signature):
        """The key's fields of the kernel of ``signature``, or None if it has no exact
        canonical form."""
        try:
            text = json.dumps(_canonical(signature), separators=(",", ":"))
        except (TypeError, ValueError):
            return None
        return {**codecache.environment(), "engine": codecache.engine_fingerprint(),
                **self._machine(), "signature_format": _SIGNATURE_FORMAT,
                "signature": hashlib.sha256(text.encode()).hexdigest(),
                "threads": self.threads, "alignment": self.alignment,
                "opt_level": self.opt_level}

    def load(self, symbol):
        """The entry of the function ``symbol``, or None."""
        return self.cache.load(self.symbol_fields(symbol))

    def store(self, symbol, object_bytes, symbols):
        """Keep the machine code of the function ``symbol`` (``symbols``: the table rows of
        the external symbols it uses)."""
        self.cache.store(self.symbol_fields(symbol), object_bytes, [], symbols,
                         {"kernel": symbol})

    def find(self, signature):
        """The :class:`Found` kernel of ``signature``, or None (none kept, a helper it calls,
        or one they call, gone, or an external symbol it uses that this compile does not bind)."""
        fields = self.signature_fields(signature)
        entry = fields and self.cache.load(fields)
        symbol = entry and entry.description.get("kernel")
        if not symbol or not isinstance(entry.description.get("helpers"), list):
            return None
        objects = {symbol: entry.object}
        wanted = list(entry.description["helpers"])
        while wanted:           # (and the helpers those call)
            helper = wanted.pop()
            if helper in objects:
                continue
            found = self.load(helper)
            if found is None or found.symbols:
                return None
            objects[helper] = found.object
            wanted += _helpers(found.object)
        try:
            addresses = externals.rebind(entry.symbols, {}, [], {}, self.threads)
        except KeyError:
            return None
        return Found(symbol, bool(entry.description.get("fails")), objects, entry.symbols,
                     addresses)

    def remember(self, signature, symbol, fails, object_bytes, symbols):
        """Keep ``symbol``'s machine code under ``signature`` as well, with the helpers it
        calls."""
        fields = self.signature_fields(signature)
        if fields is None:
            return
        helpers = _helpers(object_bytes)
        self.cache.store(fields, object_bytes, [], symbols,
                         {"kernel": symbol, "fails": bool(fails), "helpers": helpers})


def _helpers(object_bytes):
    """The helper functions that the machine code ``object_bytes`` calls, by symbol."""
    return sorted(name for name in elf.undefined_symbols(object_bytes)
                  if name.startswith(kernelfunc.PREFIX))


def _canonical(value):
    """``value`` (a signature) as plain JSON values, exactly; TypeError for a part of a type
    it does not know."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return [_canonical(item) for item in value]
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, type):
        return {"class": f"{value.__module__}.{value.__qualname__}"}
    if isinstance(value, np.dtype):
        return {"dtype": value.str}
    if isinstance(value, np.generic):
        return {"scalar": value.dtype.str, "value": value.item()}
    if isinstance(value, np.ndarray):
        return {"array": value.dtype.str, "shape": list(value.shape),
                "bytes": np.ascontiguousarray(value).tobytes().hex()}
    if isinstance(value, dict):
        return {"dict": [[_canonical(k), _canonical(v)] for k, v in sorted(value.items())]}
    raise TypeError(f"no canonical form for {type(value).__name__}")
