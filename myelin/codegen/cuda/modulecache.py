"""The CUDA module cache: NVRTC's output kept in memory and on disk for later compiles.

An entry is found by a key, the SHA-256 of everything that decides NVRTC's output
(:meth:`ModuleCache.fields`): the SHA-256 of the module source and of the support header, the
architecture, the NVRTC options and version, and myelin's version and source fingerprint. On
disk an entry is one file, ``<key>.cubin``, in ``cache_dir("cuda")`` of
:mod:`myelin.cachefiles` (written atomically): a magic number and format version, the length
of a JSON header, the header (the key's fields, the sizes and CRC-32 of the payload), then the
payload: the CUBIN, PTX and log. An entry that cannot be read, was written for other fields or
whose payload does not match is ignored with a warning, and compiled and written again.
"""

import hashlib
import json
import logging
import os
import struct
import zlib

from myelin import __version__, cachefiles
from myelin.codegen.cuda import nvrtc, support

log = logging.getLogger("myelin.cache")

FORMAT = 1
MAGIC = b"MYELINCU"
SUFFIX = ".cubin"
_PREAMBLE = struct.Struct("<8sIQ")    # magic, format, header length


def _sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


class ModuleCache:
    """Compiled CUDA modules in memory and, unless ``directory`` is False, on disk (default:
    ``cache_dir("cuda")``). ``origin`` of the last :meth:`compile` tells where its binary came
    from: "memory", "disk" or "nvrtc"."""

    def __init__(self, directory=None):
        if directory is False:
            self.directory = None
        else:
            self.directory = os.fspath(directory or cachefiles.cache_dir("cuda"))
        self.memory = {}
        self.origin = None

    @staticmethod
    def fields(source, arch, options=()):
        """The fields of the key of ``source`` compiled for ``arch`` with ``options``."""
        return {"format": FORMAT, "myelin": __version__,
                "fingerprint": cachefiles.source_fingerprint(), "nvrtc": nvrtc.version(),
                "arch": arch, "options": list(options), "source": _sha256(source),
                "header": _sha256(support.HEADER)}

    @staticmethod
    def key(fields):
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()

    def path(self, key):
        return os.path.join(self.directory, key + SUFFIX)

    def compile(self, source, arch, options=()):
        """The :class:`~myelin.codegen.cuda.nvrtc.Binary` of ``source`` for ``arch``: from
        memory, from disk, or compiled by NVRTC (then kept in both)."""
        fields = self.fields(source, arch, options)
        key = self.key(fields)
        binary = self.memory.get(key)
        self.origin = "memory"
        if binary is None and self.directory is not None:
            binary = self._load(key, fields)
            self.origin = "disk"
        if binary is None:
            binary = nvrtc.compile(source, arch, options)
            self.origin = "nvrtc"
            if self.directory is not None:
                self._store(key, fields, binary)
        self.memory[key] = binary
        return binary

    def _load(self, key, fields):
        path = self.path(key)
        try:
            with open(path, "rb") as file:
                magic, version, length = _PREAMBLE.unpack(file.read(_PREAMBLE.size))
                if magic != MAGIC or version != FORMAT:
                    raise ValueError("not a myelin CUDA module cache entry of this format")
                if length > os.fstat(file.fileno()).st_size:
                    raise ValueError("the header is longer than the entry (a damaged entry)")
                header = json.loads(file.read(length))
                payload = file.read()
            if header["fields"] != fields:
                raise ValueError("written for another key")
            sizes = header["sizes"]
            if len(payload) != sum(sizes) or zlib.crc32(payload) != header["crc32"]:
                raise ValueError("the payload does not match its header (a damaged entry)")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, struct.error) as error:
            log.warning("ignoring CUDA module cache entry %s: %s", path, error)
            return None
        cubin_size, ptx_size, _ = sizes
        ptx_end = cubin_size + ptx_size
        return nvrtc.Binary(payload[:cubin_size], payload[cubin_size:ptx_end].decode(),
                            payload[ptx_end:].decode())

    def _store(self, key, fields, binary):
        pieces = [binary.cubin, binary.ptx.encode(), binary.log.encode()]
        payload = b"".join(pieces)
        header = json.dumps({"fields": fields, "sizes": [len(p) for p in pieces],
                             "crc32": zlib.crc32(payload)}).encode()
        cachefiles.write_atomic(self.directory, key + SUFFIX,
                                [_PREAMBLE.pack(MAGIC, FORMAT, len(header)), header, payload])
