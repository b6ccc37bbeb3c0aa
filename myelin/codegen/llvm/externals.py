"""The addresses a compiled module uses but does not hold: global tensors, arrays made at
compile time (packed weights), profile counters and the worker pool's entry point.

Code never embeds such an address as a number: it refers to an external symbol that is
bound to the address when the machine code is loaded (see
:func:`myelin.codegen.llvm.engine.load_object`). The same machine code can so be loaded again
in another process, or for another network, with the addresses of that one: this is what lets
the compile cache keep it.

Each symbol has a key saying what it addresses, which is all a cache entry needs to bind it
again: ``("global", name)``, ``("array", index)`` (the index-th kept array), ``("counters",
cell)`` or ``("pool", threads)``. The symbol's name is made from its key (:func:`symbol`:
``myelin.ext.`` and 32 hexadecimal digits of the key's SHA-256), so the code itself says what
each symbol addresses: a table that pairs a symbol with another key, even one of the same
size, is told apart from the one the code was made with. The table a cache entry keeps
(:meth:`Externals.table`) also has the size of each target, so that :func:`rebind` refuses a
table that would bind code to something of another size.
"""

import hashlib
import json

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil, threads

PREFIX = "myelin.ext."


def symbol(key):
    """The name of the external symbol of ``key`` (a tuple or list, as in a table): ``PREFIX``
    and the first 128 bits of the SHA-256 of the key as JSON."""
    return PREFIX + hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:32]


class Externals:
    """The external symbols of one module: their keys, addresses and declared alignments, and
    the compile-time arrays (``arrays``) the code reads."""

    def __init__(self):
        self.arrays = []
        self.addresses = {}        # symbol -> address in this process
        self._keys = {}            # symbol -> key

    def pointer(self, builder, key, address, align=1):
        """A ptr value for the external ``key`` (at ``address`` in this process, aligned to
        ``align`` bytes), declared in ``builder``'s module on first use."""
        name = symbol(key)
        if name not in self._keys:
            self._keys[name] = key
            self.addresses[name] = address
        module = builder.module
        variable = module.globals.get(name)
        if variable is None:
            variable = ir.GlobalVariable(module, irutil.I8, name)
            variable.linkage = "external"
            variable.align = align
            variable.type = irutil.PTR    # used as an opaque ptr, as kernels expect
        return variable

    def adopt(self, table, addresses):
        """Take the symbols of ``table`` (rows of :meth:`table`, of code compiled before) at
        ``addresses`` (from :func:`rebind`), for code loaded beside this module's."""
        for name, key, _ in table:
            self._keys.setdefault(name, tuple(key))
            self.addresses.setdefault(name, addresses[name])

    def keep(self, builder, array):
        """A ptr to the first element of ``array`` (made at compile time, kept as long as the
        code: it becomes ``("array", index)``)."""
        for index, kept in enumerate(self.arrays):
            if kept is array:
                break
        else:
            index = len(self.arrays)
            self.arrays.append(array)
        return self.pointer(builder, ("array", index), array.ctypes.data)

    def table(self, globals_, counters, pool_threads):
        """[(symbol, key, size)] for every symbol, ``size`` the bytes of what it addresses (the
        arguments are those of :func:`rebind`): what a cache entry stores to bind them
        again."""
        return [(name, list(key), _target(key, globals_, self.arrays, counters, pool_threads)[1])
                for name, key in self._keys.items()]


def rebind(table, globals_, arrays, counters, pool_threads):
    """The addresses in this process of the symbols of ``table`` (from :meth:`Externals.table`
    of code compiled before): ``globals_`` maps a global's name to its TensorSpec (placed),
    ``arrays`` are the kept arrays in order, ``counters`` maps a cell's function symbol to
    its profile counters (None without) and ``pool_threads`` is the worker pool's size.
    KeyError names a symbol none of them can bind, one whose target here has another size
    than the table says, or a symbol or target that is bound twice."""
    addresses, targets = {}, set()
    for name, key, size in table:
        key = tuple(key)
        address, actual = _target(key, globals_, arrays, counters, pool_threads)
        if actual != size:
            raise KeyError(f"symbol {name} addresses {key}, which has {actual} bytes here, "
                           f"not {size}")
        if name in addresses or key in targets:
            raise KeyError(f"symbol {name} or its target {key} is bound twice")
        addresses[name] = address
        targets.add(key)
    return addresses


def _target(key, globals_, arrays, counters, pool_threads):
    """(address, size in bytes) in this process of what ``key`` addresses."""
    kind, what = key
    if kind == "global" and what in globals_:
        return globals_[what].address, globals_[what].size
    if kind == "array" and 0 <= what < len(arrays):
        return arrays[what].ctypes.data, arrays[what].nbytes
    if kind == "counters" and counters.get(what) is not None:
        return counters[what].ctypes.data, counters[what].nbytes
    if kind == "pool" and what == pool_threads:
        return threads.pool(what).parallel_for_address, 0
    raise KeyError(f"nothing here for the symbol key {key}")
