"""Where myelin's on-disk caches live, and the file handling they share.

Every cache has a directory of its own under one root: $MYELIN_CACHE_DIR, else
$XDG_CACHE_HOME/myelin, else ~/.cache/myelin. Entries are written atomically (a temporary file
in the same directory renamed over the entry), so a reader sees a whole entry or none, even
with several processes writing at once. :func:`source_fingerprint` identifies this copy of
myelin's code, for keys of entries that its code generation decides.
"""

import hashlib
import logging
import os
import tempfile

log = logging.getLogger("myelin.cache")

_fingerprint = None


def cache_dir(kind):
    """The default directory of the cache ``kind`` ("code", "tuning")."""
    root = os.environ.get("MYELIN_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                ".cache")
        root = os.path.join(base, "myelin")
    return os.path.join(root, kind)


def write_atomic(directory, name, pieces):
    """Write the bytes-like ``pieces`` as ``directory/name``, atomically; returns False (and
    logs why) when the directory cannot be written."""
    temporary = None
    try:
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(".tmp", f".{name}.", directory)
        with os.fdopen(handle, "wb") as file:
            for piece in pieces:
                file.write(piece)
        os.replace(temporary, os.path.join(directory, name))
        return True
    except OSError as error:
        log.warning("cannot write %s in the cache %s: %s", name, directory, error)
        if temporary is not None and os.path.exists(temporary):
            os.remove(temporary)
        return False


def source_fingerprint():
    """A SHA-256 of every Python source file of the myelin package (names and contents):
    changes whenever the code that generates code does."""
    global _fingerprint
    if _fingerprint is None:
        root = os.path.dirname(os.path.abspath(__file__))
        digest = hashlib.sha256()
        for directory, subdirectories, files in os.walk(root):
            subdirectories.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    digest.update(os.path.relpath(path, root).encode() + b"\0")
                    with open(path, "rb") as file:
                        digest.update(file.read())
        _fingerprint = digest.hexdigest()
    return _fingerprint
