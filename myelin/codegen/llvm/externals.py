"""The addresses a compiled module uses but does not hold: global tensors, arrays made at
compile time (packed weights), profile counters and the worker pool's entry point.

Code never embeds such an address as a number: it refers to an external symbol
(``myelin.ext.N``) that is bound to the address when the machine code is loaded (see
:func:`myelin.codegen.llvm.engine.load_object`). The same machine code can so be loaded again
in another process, or for another network, with the addresses of that one: this is what lets
the compile cache keep it.

Each symbol has a key saying what it addresses, which is all a cache entry needs to bind it
again: ``("global", name)``, ``("array", index)`` (the index-th kept array), ``("counters",
cell)`` or ``("pool", threads)``.
"""

import llvmlite.ir as ir

from myelin.codegen.llvm import irutil, threads


class Externals:
    """The external symbols of one module: their keys, addresses and declared alignments, and
    the compile-time arrays (``arrays``) the code reads."""

    def __init__(self):
        self.arrays = []
        self.addresses = {}        # symbol -> address in this process
        self._symbols = {}         # key -> symbol
        self._keys = {}            # symbol -> key

    def pointer(self, builder, key, address, align=1):
        """A ptr value for the external ``key`` (at ``address`` in this process, aligned to
        ``align`` bytes), declared in ``builder``'s module on first use."""
        symbol = self._symbols.get(key)
        if symbol is None:
            symbol = f"myelin.ext.{len(self._symbols)}"
            self._symbols[key] = symbol
            self._keys[symbol] = key
            self.addresses[symbol] = address
        module = builder.module
        variable = module.globals.get(symbol)
        if variable is None:
            variable = ir.GlobalVariable(module, irutil.I8, symbol)
            variable.linkage = "external"
            variable.align = align
            variable.type = irutil.PTR    # used as an opaque ptr, as kernels expect
        return variable

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

    def table(self):
        """[(symbol, key)] for every symbol: what a cache entry stores to bind them again."""
        return [(symbol, list(key)) for symbol, key in self._keys.items()]


def rebind(table, globals_, arrays, counters):
    """The addresses in this process of the symbols of ``table`` (from :meth:`Externals.table`
    of code compiled before): ``globals_`` maps a global's name to its TensorSpec (placed),
    ``arrays`` are the kept arrays in order and ``counters`` maps a cell's function symbol to
    its profile counters. KeyError names a symbol none of them can bind."""
    addresses = {}
    for symbol, (kind, what) in table:
        if kind == "global":
            address = globals_[what].address
        elif kind == "array":
            address = arrays[what].ctypes.data
        elif kind == "counters":
            address = counters[what].ctypes.data
        elif kind == "pool":
            address = threads.pool(what).parallel_for_address
        else:
            raise KeyError(f"symbol {symbol} addresses an unknown kind {kind!r}")
        addresses[symbol] = address
    return addresses
