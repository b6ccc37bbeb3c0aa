"""The compile cache: machine code of compiled networks kept on disk for later compiles.

An entry holds a network's object code, the arrays its kernels made at compile time (packed
weights) and the table of its external symbols (:mod:`myelin.codegen.llvm.externals`), which
the compiler binds again to the addresses of the new network. It is found by a key: the
SHA-256 of everything that changes the generated code (:meth:`CodeCache.key`): the optimized
flow's content, each step's kernel, variant and options, the compile options, myelin's
version and source fingerprint, the target triple, CPU name and features, and the llvmlite
and LLVM versions.

Each kernel function (:mod:`myelin.codegen.llvm.kernelfunc`) has an entry of its own, in the
cache's ``kernels`` directory (:attr:`CodeCache.kernels`, guarded and pruned alike), found by
its symbol (which names its LLVM IR), the target and the engine that compiled it
(:func:`engine_fingerprint`), but not the network nor myelin's other code: a network made of
kernels compiled before, for any network, links their code and compiles only the rest. A
kernel that shares code has a second entry, found by its step's signature, so that it is
not even emitted (:mod:`myelin.codegen.llvm.kernelcache`). A network's entry holds the code
of its cells, which call the kernel functions; it is used only when the entry of every
kernel it calls is there too.

An entry is one file, ``<key>.code``, in the signed frame of every cache
(:func:`myelin.cachefiles.write_signed`: a magic number, the format version, the length of a
JSON header and an HMAC-SHA256 of the whole file, then the header, then the payload, 64-byte
aligned). The header holds the key's fields, the object's size, each array's type and shape,
the symbol table with the size of what each symbol addresses, and a description; the
payload is the object, then each array, each at the next multiple of 64 bytes. Entries are
written atomically, and the cache is pruned, least recently used entries first,
to its size limit (and of the temporary files of killed writers).

What an entry must pass before any of it is used; failing any check is a miss (a warning,
the code is generated afresh and the entry replaced), never an error:

- the directory is trusted and the file is private to this user (:mod:`myelin.cachefiles`);
- the file is no larger than the cache's limit, its magic number and format are this
  myelin's, and its HMAC, keyed by the directory's secret (a file only this user can read),
  matches: this covers every byte, header included, so damage of any kind (a bit flipped, a
  truncated or extended file, an edited header) and any entry this user's myelin did not
  write through this directory (copied from another account or machine, planted by anyone
  who could once write there) is rejected here, before the header is parsed;
- the header has exactly the fields the writer gives it, each of its type and range; the
  object and arrays lie exactly where the writer puts them, filling the payload; the
  arrays' types are numeric and their shapes non-negative integers; each symbol's name is the
  one its target gives it (:func:`myelin.codegen.llvm.externals.symbol`), so that a table
  whose targets are exchanged is rejected even where their sizes agree; the key's fields are
  the ones asked for (an entry renamed to another key is rejected);
- every symbol the object code leaves undefined is bound by the symbol table or found in
  this process (:mod:`myelin.codegen.llvm.elf`), and, in the compiler, every symbol binds to
  something of this network of the recorded size
  (:func:`myelin.codegen.llvm.externals.rebind`) and every cell's function is in the code.

The threat model, honestly: the signature stops other users and stray copies, but not
someone who runs code as this user (who can read the secret, or edit myelin itself) or as
root; nothing can, and the object code is machine code that no check short of the signature
can vouch for. The structural checks make a signed entry that is inconsistent (a writer's
bug) a miss rather than a crash; they cannot make wrong code, correctly signed, right.
"""

import ctypes
import dataclasses
import hashlib
import json
import logging
import math
import os
import time

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from myelin import cachefiles, limits
from myelin.codegen.llvm import elf, engine, externals, kernelfunc, target
from myelin.version import __version__

log = logging.getLogger("myelin.cache")

FORMAT = 3
MAGIC = b"MYELINC\0"
SUFFIX = ".code"
KERNELS = "kernels"                   # the directory of the kernel functions' entries
DEFAULT_SIZE_LIMIT = 2 << 30          # bytes; $MYELIN_CACHE_SIZE overrides (e.g. "500M")

_HEADER = {"fields", "object", "arrays", "symbols", "description", "created"}
_MACHINE = ("triple", "cpu", "features")     # fields of every key, shown by `cache list`
_DTYPES = {np.dtype(name).str for name in ("bool", "int8", "uint8", "int16", "uint16",
                                            "int32", "uint32", "int64", "uint64", "float16",
                                            "float32", "float64", "complex64", "complex128")}
_MAX_DIMS = 32
_KINDS = {"global": str, "counters": str, "array": int, "pool": int}   # kind: its "what"
_PROCESS = ctypes.CDLL(None)
_engine_fingerprint = None


def _in_process(name):
    """Whether this process has the symbol ``name`` (the C library's memcpy, say), as the JIT
    finds it when it links code: LLVM's own symbol table holds only what was added to it."""
    try:
        getattr(_PROCESS, name)
    except AttributeError:
        return bool(llvm.address_of_symbol(name))
    return True


@dataclasses.dataclass
class Entry:
    """A loaded cache entry: object code, compile-time arrays and external symbol table."""
    path: str
    object: bytes
    arrays: list
    symbols: list         # [(symbol, key, size)], as in Externals.table()
    description: dict     # as stored (see :func:`_check`)


@dataclasses.dataclass
class EntryInfo:
    """What ``myelin cache list`` shows of an entry."""
    key: str
    path: str
    size: int
    used: float           # last use, seconds since the epoch
    fields: dict          # the key's fields, None if the entry would not be used
    description: dict     # the cells and number of steps of the network, as stored
    problem: str = None   # why the entry would not be used (None if it would)


def size_limit(text=None):
    """The cache's size limit in bytes from ``text`` (or $MYELIN_CACHE_SIZE): a number of
    bytes with an optional K, M or G suffix."""
    text = (text if text is not None else os.environ.get("MYELIN_CACHE_SIZE", "")).strip()
    if not text:
        return DEFAULT_SIZE_LIMIT
    try:
        return limits.parse_size(text)
    except (ValueError, OverflowError):
        log.warning("ignoring MYELIN_CACHE_SIZE=%r: not a size such as 500M", text)
        return DEFAULT_SIZE_LIMIT


def engine_fingerprint():
    """A SHA-256 of what decides the machine code of given LLVM IR: the llvmlite and LLVM
    versions and myelin's engine and target code (how it optimizes and compiles), for keys of
    entries whose IR is known (kernel functions, :mod:`myelin.codegen.llvm.kernelfunc`)."""
    global _engine_fingerprint
    if _engine_fingerprint is None:
        digest = hashlib.sha256(f"{llvmlite.__version__} {llvm.llvm_version_info}".encode())
        for module in (engine, target):
            with open(module.__file__, "rb") as file:
                digest.update(file.read())
        _engine_fingerprint = digest.hexdigest()
    return _engine_fingerprint


def environment():
    """The fields of a key that depend on this installation rather than on the network."""
    return {"format": FORMAT, "myelin": __version__, "source": cachefiles.source_fingerprint(),
            "llvmlite": llvmlite.__version__,
            "llvm": ".".join(map(str, llvm.llvm_version_info))}


class CodeCache:
    """A directory of compile cache entries (default: ``cache_dir("code")`` of
    :mod:`myelin.cachefiles`), pruned to ``limit`` bytes (default :func:`size_limit`)."""

    def __init__(self, directory=None, limit=None):
        self.directory = os.fspath(directory or cachefiles.cache_dir("code"))
        self.limit = size_limit() if limit is None else int(limit)
        self._written = None       # bytes written since the last prune (None: never pruned)
        self._kernels = None

    @property
    def kernels(self):
        """The cache of kernel functions' code (the directory ``kernels`` of this one, with
        the same size limit), or None while this one's directory is not trusted: nothing is
        made in a directory that is not."""
        if self._kernels is None and cachefiles.trusted(self.directory, create=True):
            self._kernels = CodeCache(os.path.join(self.directory, KERNELS), self.limit)
        return self._kernels

    @staticmethod
    def key(fields):
        """The key of an entry for ``fields`` (plain JSON values)."""
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()

    def path(self, key):
        return os.path.join(self.directory, key + SUFFIX)

    def load(self, fields):
        """The entry stored under the key of ``fields`` if it passes every check (see the
        module) and was written for them, else None: a missing entry silently, a bad one with
        a warning."""
        path = self.path(self.key(fields))
        if not cachefiles.trusted(self.directory):
            return None
        try:
            header, entry = self._open(path)
            if header["fields"] != json.loads(json.dumps(fields)):
                raise ValueError("it was written for another key")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError, MemoryError) as error:
            log.warning("ignoring compile cache entry %s: %s; compiling afresh", path, error)
            return None
        try:
            os.utime(path)                 # recently used: pruned last
        except OSError:
            pass
        return entry

    def store(self, fields, object_bytes, arrays, symbols, description=None):
        """Write the entry for ``fields`` (atomically, signed), then prune the cache if needed.
        ``symbols`` is the table of :meth:`Externals.table`. Nothing is written where the
        entry could not be checked when loaded (an object file that is not ELF)."""
        try:
            elf.undefined_symbols(object_bytes)
        except ValueError as error:
            log.info("not keeping compiled code in the cache: %s", error)
            return
        arrays = [np.ascontiguousarray(array) for array in arrays]
        offsets, size = _layout(len(object_bytes), [array.nbytes for array in arrays])
        pieces, end = [object_bytes], len(object_bytes)
        for array, offset in zip(arrays, offsets):
            pieces += [bytes(offset - end), array.reshape(-1).view(np.uint8)]
            end = offset + array.nbytes
        pieces.append(bytes(size - end))
        header = json.dumps({"fields": fields, "object": len(object_bytes),
                             "arrays": [[array.dtype.str, list(array.shape)]
                                        for array in arrays],
                             "symbols": [[symbol, list(key), nbytes]
                                         for symbol, key, nbytes in symbols],
                             "description": description or {},
                             "created": time.time()}).encode()
        written = cachefiles.write_signed(self.directory, self.key(fields) + SUFFIX, MAGIC,
                                          FORMAT, header, pieces)
        if written:
            self._note_written(written)

    def entries(self):
        """Every entry in the cache, most recently used first, checked as :meth:`load` checks
        it (except for the key it was asked for)."""
        trusted = cachefiles.trusted(self.directory)
        found = []
        for path, size, used in self._files():
            header, problem = {}, None
            if not trusted:
                problem = "the directory is not trusted"
            else:
                try:
                    header, _ = self._open(path)
                except FileNotFoundError:
                    continue
                except (OSError, ValueError, RecursionError, MemoryError) as error:
                    problem = str(error)
            found.append(EntryInfo(os.path.basename(path)[:-len(SUFFIX)], path, size, used,
                                   header.get("fields"), header.get("description"), problem))
        return sorted(found, key=lambda info: -info.used)

    def clear(self):
        """Remove every entry, the kernels' included; returns (entries, bytes) removed."""
        count = total = 0
        if os.path.isdir(os.path.join(self.directory, KERNELS)) and self.kernels is not None:
            count, total = self.kernels.clear()
        for path, size, _ in self._files():
            try:
                os.remove(path)
            except OSError:
                continue
            count, total = count + 1, total + size
        return count, total

    def prune(self):
        """Remove the least recently used entries until the cache fits its limit, and the
        stale temporary files of killed writers
        (:func:`myelin.cachefiles.remove_stale_temporaries`)."""
        total = 0
        for path, size, _ in sorted(self._files(), key=lambda file: -file[2]):
            total += size
            if total > self.limit:
                try:
                    os.remove(path)
                except OSError:
                    pass
        cachefiles.remove_stale_temporaries(self.directory)
        self._written = 0

    def _files(self):
        """(path, size, last use) of each entry file."""
        try:
            listing = list(os.scandir(self.directory))
        except OSError:
            return []
        found = []
        for item in listing:
            try:
                if item.name.endswith(SUFFIX) and item.is_file(follow_symlinks=False):
                    status = item.stat(follow_symlinks=False)
                    found.append((item.path, status.st_size, status.st_mtime))
            except OSError:
                continue
        return found

    def _open(self, path):
        """(header, Entry) of the entry file ``path``, every check of the module passed but
        the key's; OSError or ValueError names the first that fails."""
        text, payload = cachefiles.read_signed(self.directory, path, MAGIC, FORMAT,
                                               self.limit)
        header = json.loads(text)
        offsets = _check(header, payload.size)
        entry = Entry(path, bytes(payload[:header["object"]]),
                      [_array(payload, dtype, shape, offset)
                       for (dtype, shape), offset in zip(header["arrays"], offsets)],
                      [(symbol, tuple(key), nbytes)
                       for symbol, key, nbytes in header["symbols"]],
                      header["description"])
        bound = {symbol for symbol, _, _ in entry.symbols}
        for name in elf.undefined_symbols(entry.object) - bound:
            if name.startswith(kernelfunc.PREFIX):
                continue          # a kernel function: the compiler loads its own entry
            if name.startswith(externals.PREFIX) or not _in_process(name):
                raise ValueError(f"its code uses the symbol {name}, which nothing binds")
        return header, entry

    def _note_written(self, size):
        # Scanning the directory after every write would cost more than small entries: prune
        # on the first write of this cache object, then each time an eighth of the limit has
        # been written.
        if self._written is None or self._written + size > self.limit // 8:
            self.prune()
        else:
            self._written += size


def _layout(object_size, sizes):
    """(offset of each array, payload size) for an object of ``object_size`` bytes followed by
    arrays of ``sizes`` bytes, each aligned."""
    offsets, end = [], object_size
    for size in sizes:
        offsets.append(cachefiles.aligned(end))
        end = offsets[-1] + size
    return offsets, cachefiles.aligned(end)



def _expect(condition, what):
    if not condition:
        raise ValueError(f"its header has a bad {what}")


def _count(value):
    """True if ``value`` is a non-negative JSON integer (not a bool)."""
    return type(value) is int and value >= 0


def _check(header, size):
    """The offsets of the arrays of ``header``, an entry's whose payload has ``size`` bytes,
    once every field is checked to have the type and range its writer gives it (ValueError
    names the first that has not)."""
    _expect(isinstance(header, dict) and header.keys() == _HEADER, "set of fields")
    fields, description = header["fields"], header["description"]
    _expect(isinstance(fields, dict) and all(isinstance(fields.get(name), str)
                                             for name in _MACHINE), "key")
    _expect(isinstance(description, dict)
            and description.keys() <= {"cells", "steps", "kernel", "fails", "helpers"}
            and isinstance(description.get("kernel", ""), str)
            and isinstance(description.get("fails", False), bool)
            and isinstance(description.get("helpers", []), list)
            and all(isinstance(name, str) for name in description.get("helpers", []))
            and _count(description.get("steps", 0))
            and isinstance(description.get("cells", []), list)
            and all(isinstance(cell, str) for cell in description.get("cells", [])),
            "description")
    _expect(type(header["created"]) in (int, float), "creation time")
    _expect(_count(header["object"]) and 0 < header["object"] <= size, "object size")
    arrays = header["arrays"]
    _expect(isinstance(arrays, list), "array list")
    sizes = []
    for spec in arrays:
        _expect(isinstance(spec, list) and len(spec) == 2, "array")
        dtype, shape = spec
        _expect(isinstance(dtype, str) and dtype in _DTYPES, "array type")
        _expect(isinstance(shape, list) and len(shape) <= _MAX_DIMS
                and all(map(_count, shape)), "array shape")
        sizes.append(math.prod(shape) * np.dtype(dtype).itemsize)
        _expect(sizes[-1] <= size, "array size")
    offsets, end = _layout(header["object"], sizes)
    _expect(end == size, "payload size (the object and arrays do not fill the payload)")
    symbols = header["symbols"]
    _expect(isinstance(symbols, list), "symbol table")
    for item in symbols:
        _expect(isinstance(item, list) and len(item) == 3, "symbol")
        symbol, key, nbytes = item
        _expect(isinstance(key, list) and len(key) == 2 and isinstance(key[0], str)
                and type(key[1]) is _KINDS.get(key[0]), "symbol key")
        _expect(key[0] != "array" or 0 <= key[1] < len(arrays), "array symbol")
        _expect(symbol == externals.symbol(key), "symbol name (not the name of its target)")
        _expect(_count(nbytes), "symbol size")
    return offsets


def _array(payload, dtype, shape, offset):
    """A view of an array of the payload (it keeps the payload alive)."""
    count = math.prod(shape)
    return np.frombuffer(payload, np.dtype(dtype), count, offset).reshape(shape)
