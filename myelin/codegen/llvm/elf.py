"""The symbols an ELF object file uses but does not define (and those it defines for others),
read with every offset and size checked.

The compile cache (:mod:`myelin.codegen.llvm.codecache`) loads object code made in an earlier
process. LLVM's loader ends the process when the code uses a symbol nothing defines, and
symbols bound for other code (``llvm.add_symbol`` is process-wide) would silently serve one
that the entry forgot; so before loading, the cache compares this list with the symbols it
binds. Only little-endian ELF64, the object format of Linux on x86-64 and AArch64, is read.
"""

import struct

import numpy as np

_SECTION = np.dtype([("name", "<u4"), ("type", "<u4"), ("flags", "<u8"), ("addr", "<u8"),
                     ("offset", "<u8"), ("size", "<u8"), ("link", "<u4"), ("info", "<u4"),
                     ("addralign", "<u8"), ("entsize", "<u8")])
_SYMBOL = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                    ("value", "<u8"), ("size", "<u8")])
_SYMTAB = 2           # section type of a symbol table
_UNDEFINED = 0        # section index of a symbol defined elsewhere
_EXPORTED = (1, 2)    # symbol bindings others may use: global, weak


def undefined_symbols(data):
    """The names of the symbols the object file ``data`` (bytes-like) uses and leaves to be
    defined elsewhere; ValueError if it is not a well-formed little-endian ELF64 object."""
    return _names(data, lambda symbols: symbols["shndx"] == _UNDEFINED)


def defined_symbols(data):
    """The names of the global and weak symbols the object file ``data`` defines (what other
    object files loaded with it may call); ValueError as :func:`undefined_symbols`."""
    return _names(data, lambda symbols: (symbols["shndx"] != _UNDEFINED)
                  & np.isin(symbols["info"] >> 4, _EXPORTED))


def _names(data, select):
    """The names of the symbols of the object file ``data`` that ``select`` (a mask of a
    symbol table) picks."""
    data = memoryview(data).cast("B")
    if len(data) < 64 or bytes(data[:6]) != b"\x7fELF\x02\x01":
        raise ValueError("the object code is not a little-endian ELF64 file")
    (offset,), (entry, count) = struct.unpack_from("<Q", data, 0x28), \
        struct.unpack_from("<HH", data, 0x3A)
    sections = _table(data, offset, count, entry, _SECTION, "section headers")
    tables = sections[sections["type"] == _SYMTAB]
    if not len(tables):
        raise ValueError("the object code has no symbol table")
    names = set()
    for table in tables:
        if table["link"] >= len(sections):
            raise ValueError("a symbol table names a string table that does not exist")
        strings = _section(data, sections[table["link"]])
        entry = int(table["entsize"])
        if entry != _SYMBOL.itemsize or int(table["size"]) % entry:
            raise ValueError("a symbol table's entries are not ELF64 symbols")
        symbols = _table(data, int(table["offset"]), int(table["size"]) // entry, entry,
                         _SYMBOL, "symbol table")
        for offset in symbols["name"][select(symbols) & (symbols["name"] > 0)]:
            end = strings.find(b"\0", int(offset))
            if offset >= len(strings) or end < 0:
                raise ValueError("a symbol's name lies outside its string table")
            names.add(strings[int(offset):end].decode("ascii"))
    return names


def _table(data, offset, count, entry, dtype, what):
    """``count`` records of ``dtype`` at ``offset`` of ``data``, ``entry`` bytes each."""
    if entry != dtype.itemsize or offset + count * entry > len(data):
        raise ValueError(f"the object code's {what} lie outside it")
    return np.frombuffer(data, dtype, count, offset)


def _section(data, section):
    """The bytes of ``section``."""
    start, size = int(section["offset"]), int(section["size"])
    if start + size > len(data):
        raise ValueError("a section of the object code lies outside it")
    return bytes(data[start:start + size])
