"""The CUDA module cache: NVRTC's output kept in memory and on disk for later compiles.

An entry is found by a key, the SHA-256 of everything that decides NVRTC's output
(:meth:`ModuleCache.fields`): the SHA-256 of the module source and of the support header, the
architecture, the NVRTC options and version, and myelin's version and source fingerprint. On
disk an entry is one file, ``<key>.cubin``, in ``cache_dir("cuda")`` of
:mod:`myelin.cachefiles`, in the signed frame every cache uses
(:func:`myelin.cachefiles.write_signed`): its header holds the key's fields, the PTX and
NVRTC's log; its payload is the CUBIN.

An entry is used only if the directory is trusted, the file is private to this user, no
larger than ``MAX_ENTRY``, of this format and signed with the directory's secret (over every
byte), and its header has exactly the writer's fields, of their types, for the key asked for:
a CUBIN the driver will load is so never one that this user's myelin did not write there.
Failing any check is a miss: a warning, the module is compiled again and the entry replaced.
"""

import hashlib
import json
import logging
import os

from myelin import cachefiles
from myelin.codegen.cuda import nvrtc, support
from myelin.version import __version__

log = logging.getLogger("myelin.cache")

FORMAT = 2
MAGIC = b"MYELINCU"
SUFFIX = ".cubin"
MAX_ENTRY = 1 << 30              # bytes; a larger file is not read
_HEADER = {"fields", "ptx", "log"}


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
        """The binary of the entry ``key`` if it passes every check (see the module) and was
        written for ``fields``, else None: a missing entry silently, a bad one with a
        warning."""
        path = self.path(key)
        if not cachefiles.trusted(self.directory):
            return None
        try:
            text, cubin = cachefiles.read_signed(self.directory, path, MAGIC, FORMAT,
                                                 MAX_ENTRY)
            header = json.loads(text)
            if not (isinstance(header, dict) and header.keys() == _HEADER
                    and isinstance(header["ptx"], str) and isinstance(header["log"], str)):
                raise ValueError("its header does not have the fields of an entry")
            if header["fields"] != json.loads(json.dumps(fields)):
                raise ValueError("it was written for another key")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError, MemoryError) as error:
            log.warning("ignoring CUDA module cache entry %s: %s; compiling afresh", path,
                        error)
            return None
        return nvrtc.Binary(bytes(cubin), header["ptx"], header["log"])

    def _store(self, key, fields, binary):
        header = json.dumps({"fields": fields, "ptx": binary.ptx, "log": binary.log})
        cachefiles.write_signed(self.directory, key + SUFFIX, MAGIC, FORMAT, header.encode(),
                                [binary.cubin])
