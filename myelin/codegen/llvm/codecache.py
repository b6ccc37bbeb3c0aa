"""The compile cache: machine code of compiled networks kept on disk for later compiles.

An entry holds a network's object code, the arrays its kernels made at compile time (packed
weights) and the table of its external symbols (:mod:`myelin.codegen.llvm.externals`), which
the compiler binds again to the addresses of the new network. It is found by a key: the
SHA-256 of everything that changes the generated code (:meth:`CodeCache.key`): the optimized
flow's content, each step's kernel, variant and options, the compile options, myelin's
version and source fingerprint, the target triple, CPU name and features, and the llvmlite
and LLVM versions.

An entry is one file, ``<key>.code``: a magic number and format version, the length of a JSON
header, the header (the key's fields, the symbol table, where the object and each array lie,
the payload's size and CRC-32), then the payload, 64-byte aligned. Entries are written
atomically. One that cannot be read, whose header describes other fields than the key's, or
whose payload has the wrong size or checksum is ignored (with a warning) and rebuilt; it is
never loaded blindly. Loading touches the entry's time, and the cache is pruned, least
recently used entries first, to its size limit.
"""

import dataclasses
import hashlib
import json
import logging
import os
import struct
import time
import zlib

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from myelin import __version__, cachefiles
from myelin.runtime.memory import aligned_zeros

log = logging.getLogger("myelin.cache")

FORMAT = 1
MAGIC = b"MYELINC\0"
_PREAMBLE = struct.Struct("<8sIQ")    # magic, format, header length
_ALIGN = 64
SUFFIX = ".code"
DEFAULT_SIZE_LIMIT = 2 << 30          # bytes; $MYELIN_CACHE_SIZE overrides (e.g. "500M")


@dataclasses.dataclass
class Entry:
    """A loaded cache entry: object code, compile-time arrays and external symbol table."""
    path: str
    object: bytes
    arrays: list
    symbols: list         # [(symbol, key)], as in Externals.table()


@dataclasses.dataclass
class EntryInfo:
    """What ``myelin cache list`` shows of an entry."""
    key: str
    path: str
    size: int
    used: float           # last use, seconds since the epoch
    fields: dict          # the key's fields, None if the header cannot be read
    description: dict     # the cells and number of steps of the network, as stored


def size_limit(text=None):
    """The cache's size limit in bytes from ``text`` (or $MYELIN_CACHE_SIZE): a number of
    bytes with an optional K, M or G suffix."""
    text = (text if text is not None else os.environ.get("MYELIN_CACHE_SIZE", "")).strip()
    if not text:
        return DEFAULT_SIZE_LIMIT
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    try:
        return int(float(text[:-1] if scale > 1 else text) * scale)
    except ValueError:
        log.warning("ignoring MYELIN_CACHE_SIZE=%r: not a size such as 500M", text)
        return DEFAULT_SIZE_LIMIT


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

    @staticmethod
    def key(fields):
        """The key of an entry for ``fields`` (plain JSON values)."""
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()

    def path(self, key):
        return os.path.join(self.directory, key + SUFFIX)

    def load(self, fields):
        """The entry stored under the key of ``fields`` if it is sound and was written for
        them, else None (a missing entry silently, a bad one with a warning)."""
        path = self.path(self.key(fields))
        try:
            with open(path, "rb") as file:
                header, payload = _read(file)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, struct.error) as error:
            log.warning("ignoring unreadable compile cache entry %s: %s", path, error)
            return None
        if header.get("fields") != json.loads(json.dumps(fields)):
            log.warning("ignoring compile cache entry %s: written for another key", path)
            return None
        try:
            start, size = header["object"]
            entry = Entry(path, bytes(payload[start:start + size]),
                          [_array(payload, *spec) for spec in header["arrays"]],
                          [(symbol, tuple(key)) for symbol, key in header["symbols"]])
        except (ValueError, KeyError, TypeError) as error:
            log.warning("ignoring compile cache entry %s: %s", path, error)
            return None
        try:
            os.utime(path)                 # recently used: pruned last
        except OSError:
            pass
        return entry

    def store(self, fields, object_bytes, arrays, symbols, description=None):
        """Write the entry for ``fields`` (atomically), then prune the cache if needed."""
        layout, offset = [], _aligned(len(object_bytes))
        pieces = [object_bytes, bytes(offset - len(object_bytes))]
        for array in arrays:
            data = np.ascontiguousarray(array)
            layout.append([data.dtype.str, list(data.shape), offset])
            end = offset + data.nbytes
            pieces += [data.reshape(-1).view(np.uint8), bytes(_aligned(end) - end)]
            offset = _aligned(end)
        checksum = 0
        for piece in pieces:
            checksum = zlib.crc32(piece, checksum)
        header = json.dumps({"fields": fields, "object": [0, len(object_bytes)],
                             "arrays": layout, "symbols": symbols, "payload": offset,
                             "crc32": checksum, "description": description or {},
                             "created": time.time()}).encode()
        preamble = _PREAMBLE.pack(MAGIC, FORMAT, len(header))
        head = preamble + header
        head += bytes(_aligned(len(head)) - len(head))
        if cachefiles.write_atomic(self.directory, self.key(fields) + SUFFIX, [head] + pieces):
            self._note_written(len(head) + offset)

    def entries(self):
        """Every entry in the cache, most recently used first."""
        found = []
        try:
            listing = list(os.scandir(self.directory))
        except FileNotFoundError:
            return []
        for item in listing:
            if not item.name.endswith(SUFFIX) or not item.is_file():
                continue
            stat = item.stat()
            try:
                with open(item.path, "rb") as file:
                    header = _read_header(file)
            except (OSError, ValueError, KeyError, TypeError, struct.error):
                header = {}
            found.append(EntryInfo(item.name[:-len(SUFFIX)], item.path, stat.st_size,
                                   stat.st_mtime, header.get("fields"),
                                   header.get("description")))
        return sorted(found, key=lambda info: -info.used)

    def clear(self):
        """Remove every entry; returns (entries, bytes) removed."""
        count = size = 0
        for info in self.entries():
            try:
                os.remove(info.path)
            except FileNotFoundError:
                continue
            count, size = count + 1, size + info.size
        return count, size

    def prune(self):
        """Remove the least recently used entries until the cache fits its limit."""
        total = 0
        for info in self.entries():
            total += info.size
            if total > self.limit:
                try:
                    os.remove(info.path)
                except FileNotFoundError:
                    pass
        self._written = 0

    def _note_written(self, size):
        # Scanning the directory after every write would cost more than small entries: prune
        # on the first write of this cache object, then each time an eighth of the limit has
        # been written.
        if self._written is None or self._written + size > self.limit // 8:
            self.prune()
        else:
            self._written += size


def _aligned(offset):
    return -(-offset // _ALIGN) * _ALIGN


def _read_header(file):
    magic, version, length = _PREAMBLE.unpack(file.read(_PREAMBLE.size))
    if magic != MAGIC:
        raise ValueError("not a myelin compile cache entry")
    if version != FORMAT:
        raise ValueError(f"entry format {version}, this myelin reads {FORMAT}")
    header = json.loads(file.read(length))
    if not isinstance(header, dict):
        raise ValueError("bad header")
    return header


def _read(file):
    """(header, payload) of an entry file, the payload in 64-byte aligned memory, its size
    and CRC-32 checked."""
    header = _read_header(file)
    file.seek(_aligned(file.tell()))
    size = int(header["payload"])
    payload = aligned_zeros(size, _ALIGN)
    if file.readinto(memoryview(payload)) != size or file.read(1):
        raise ValueError("payload has the wrong size (a truncated or damaged entry)")
    if zlib.crc32(payload) != header["crc32"]:
        raise ValueError("payload checksum does not match (a damaged entry)")
    return header, payload


def _array(payload, dtype, shape, offset):
    """A view of an array of the payload (it keeps the payload alive)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if offset % _ALIGN or offset + count * dtype.itemsize > payload.size:
        raise ValueError("an array lies outside the payload")
    return np.frombuffer(payload, dtype, count, offset).reshape(shape)
