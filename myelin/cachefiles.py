"""Where myelin's on-disk caches live, which of them may be trusted, and the file handling
they share.

Every cache has a directory of its own under one root: $MYELIN_CACHE_DIR, else
$XDG_CACHE_HOME/myelin, else ~/.cache/myelin.

A cache hands back what was put in it (the compile cache: machine code that this process
will run), so a cache directory is used only if no one but this user can have written it
(:func:`trusted`): it must be owned by the effective user and writable by neither group nor
others. Otherwise myelin says so once per directory and process, with a warning, and
neither reads nor writes there: the cache is off, the work is done afresh. It makes its own
directories with mode 0700. This is pip's rule (it disables its cache when the directory
belongs to someone else) and OpenSSH's StrictModes; ccache and Python's ``__pycache__``
check nothing and rely on the permissions alone, which a directory shared by mistake (a
``chmod 777``, a group-writable home) defeats. A file an entry is read from is opened
without following links and checked the same way (:func:`open_private`).

Each directory also has a secret (:func:`secret`): 32 random bytes in the file ``.key``,
mode 0600, made on first use, with which a cache signs its entries (HMAC-SHA256), so that an
entry that was not written by this user's myelin through this directory (copied in from
another machine or account, planted while the directory was open to others, or damaged) is
rejected before anything in it is used.

Every cache's entry has the same frame (:func:`write_signed`, :func:`read_signed`): a magic
number naming the cache, its format version, the length of a JSON header and the HMAC of
every other byte of the file, then the header, then a payload (if any) at the next multiple
of 64 bytes. A reader checks the file, the magic number, the format, the lengths and the
HMAC before it parses the header; a cache then checks the header's fields itself.

Entries are written atomically (:func:`write_atomic`): into a temporary file of the same
directory (``.<name>.<random>.tmp``), then renamed over the entry; a reader sees a whole entry
or none, even with several processes writing at once. They are not flushed to the disk (a
compile that writes 66 entries spent a quarter of a second in ``fsync``): after a power
failure an entry may be missing, or damaged where the file system kept the new name but not
its data, which its signature check rejects as a miss (compiled again and replaced). A
directory's key, whose loss would make every entry a miss, is flushed to the disk, and the
directory with it. A writer killed before the rename leaves its
temporary file: those older than :data:`STALE_SECONDS` are removed
(:func:`remove_stale_temporaries`) on a process's first write into a directory and when the
compile cache is pruned; younger ones may belong to a writer still at work.
:func:`source_fingerprint` identifies this copy of myelin's code, for keys of entries that
its code generation decides.
"""

import hashlib
import hmac
import logging
import os
import stat
import struct
import tempfile
import time

from myelin.memory import aligned_zeros

log = logging.getLogger("myelin.cache")

SECRET = ".key"
_SECRET_SIZE = 32
PREAMBLE = struct.Struct("<8sIQ32s")     # magic, format, header length, HMAC-SHA256
SIGNED = 20                              # the preamble's bytes before the HMAC (signed)
ALIGN = 64                               # a payload starts at a multiple of this
TEMPORARY = ".tmp"                       # the suffix of a writer's temporary file
STALE_SECONDS = 600                      # a temporary file this old is a killed writer's

_fingerprint = None
_warned = set()       # directories whose trouble has been reported
_swept = set()        # directories whose stale temporary files this process has removed


def cache_dir(kind):
    """The default directory of the cache ``kind`` ("code", "cuda", "tuning")."""
    root = os.environ.get("MYELIN_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                ".cache")
        root = os.path.join(base, "myelin")
    return os.path.join(root, kind)


def distrust(status, private=False):
    """Why a file or directory with ``os.stat`` result ``status`` cannot be trusted (None if
    it can): it must be owned by this process's effective user and writable by no one else
    (``private``: nor readable)."""
    if status.st_uid != os.geteuid():
        return f"owned by user {status.st_uid}, not by this user ({os.geteuid()})"
    if status.st_mode & (0o077 if private else 0o022):
        return ("readable or writable" if private else "writable") + \
            f" by group or others (mode {stat.S_IMODE(status.st_mode):04o})"
    return None


def trusted(directory, create=False):
    """True if the cache ``directory`` can be used (made, mode 0700, if it does not exist and
    ``create`` is set). A directory that is missing is not, silently; one that is unsafe or
    cannot be made is not, with a warning the first time."""
    try:
        if create:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        status = os.stat(directory)
    except FileNotFoundError:
        return False
    except OSError as error:
        _warn_once(directory, "not using the cache %s: %s", directory, error)
        return False
    problem = distrust(status) if stat.S_ISDIR(status.st_mode) else "not a directory"
    if problem:
        _warn_once(directory, "not using the cache %s: it is %s; a cache must be writable by "
                   "its owner alone (chmod 700 it, or choose another with "
                   "MYELIN_CACHE_DIR)", directory, problem)
    return problem is None


def open_private(path):
    """``path`` opened for reading in binary, if it is a regular file (not a link) that only
    this user can have written; OSError or ValueError otherwise."""
    # (not blocking: a FIFO put there must not stop the reader; it is refused below)
    handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    file = os.fdopen(handle, "rb")
    status = os.fstat(handle)
    problem = distrust(status) if stat.S_ISREG(status.st_mode) else "not a regular file"
    if problem:
        file.close()
        raise ValueError(f"the file is {problem}")
    return file


def secret(directory, create=False):
    """The secret of the trusted cache ``directory`` (bytes), or None if it has none that only
    this user can read. With ``create``, one is made if there is none, and replaced (with a
    warning) if the one there is not private: whatever it signed is then rejected."""
    path = os.path.join(directory, SECRET)
    try:
        with open_private(path) as file:
            problem = distrust(os.fstat(file.fileno()), private=True)
            key = file.read(_SECRET_SIZE + 1)
        if problem is None and len(key) == _SECRET_SIZE:
            return key
        problem = problem or f"{len(key)} bytes long, not {_SECRET_SIZE}"
    except FileNotFoundError:
        problem = None
    except (OSError, ValueError) as error:
        problem = str(error)
    if not create:
        return None
    if problem:
        log.warning("replacing the key of the cache %s: %s", directory, problem)
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(TEMPORARY, SECRET + ".", directory)
        with os.fdopen(handle, "wb") as file:
            file.write(os.urandom(_SECRET_SIZE))
            _flush(file)
        if problem:
            os.replace(temporary, path)
        else:
            try:
                os.link(temporary, path)        # never over a key another process made
            except FileExistsError:
                pass
        _sync_directory(directory)
    except OSError as error:
        _warn_once(directory, "cannot make a key for the cache %s: %s", directory, error)
        return None
    finally:
        if temporary is not None and os.path.lexists(temporary):
            os.remove(temporary)
    return secret(directory)


def write_signed(directory, name, magic, version, header, payload=()):
    """Write an entry ``directory/name`` of the cache whose entries begin with ``magic`` (8
    bytes) in format ``version``: the JSON ``header`` (bytes) and the bytes-like ``payload``
    pieces, signed with the directory's secret, atomically. Returns the entry's
    size in bytes, or None (logged) when the directory is not trusted, has no secret or
    cannot be written."""
    if not trusted(directory, create=True):
        return None
    key = secret(directory, create=True)
    if key is None:
        return None
    start = aligned(PREAMBLE.size + len(header))
    body = [header, bytes(start - PREAMBLE.size - len(header)), *payload]
    signed = PREAMBLE.pack(magic, version, len(header), bytes(32))[:SIGNED]
    preamble = PREAMBLE.pack(magic, version, len(header), sign(key, [signed] + body))
    if not write_atomic(directory, name, [preamble] + body):
        return None
    return start + sum(memoryview(piece).nbytes for piece in payload)


def read_signed(directory, path, magic, version, limit):
    """(header, payload) of the entry file ``path`` of the cache ``directory`` (trusted),
    written by :func:`write_signed` with ``magic`` and ``version``: the header's bytes and the
    payload as a uint8 array whose data is 64-byte aligned. The file must be private to this
    user (:func:`open_private`), at most ``limit`` bytes long, of this magic number and
    format, and signed with the directory's secret, over every byte; OSError or ValueError
    (FileNotFoundError for a missing file) names the first check that fails."""
    with open_private(path) as file:
        size = os.fstat(file.fileno()).st_size
        if size > limit:
            raise ValueError(f"it has {size} bytes, more than the cache's limit")
        data = aligned_zeros(size, ALIGN)
        if file.readinto(memoryview(data)) != size:
            raise ValueError("it changed while it was read")
    if size < PREAMBLE.size:
        raise ValueError("it is too short to be an entry")
    found, format_, length, signature = PREAMBLE.unpack_from(data)
    if found != magic:
        raise ValueError(f"it is not an entry of this cache (magic number {found!r})")
    if format_ != version:
        raise ValueError(f"its format is {format_}, this myelin reads {version}")
    start = aligned(PREAMBLE.size + length)
    if start > size:
        raise ValueError("its header length runs past its end")
    key = secret(directory)
    if key is None or not hmac.compare_digest(
            signature, sign(key, [data[:SIGNED], data[PREAMBLE.size:]])):
        raise ValueError("its signature does not match this cache's key (it is damaged, "
                         "or was not written by this user's myelin)")
    return bytes(data[PREAMBLE.size:PREAMBLE.size + length]), data[start:]


def sign(key, pieces):
    """The HMAC-SHA256 of the bytes-like ``pieces`` with ``key``."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for piece in pieces:
        mac.update(piece)
    return mac.digest()


def write_atomic(directory, name, pieces):
    """Write the bytes-like ``pieces`` as ``directory/name``, atomically (not flushed to the
    disk: see the module); returns False (and logs why) when the directory is not trusted or
    cannot be written. The first write of this process into ``directory`` removes its stale
    temporary files."""
    if not trusted(directory, create=True):
        return False
    if directory not in _swept:
        _swept.add(directory)
        remove_stale_temporaries(directory)
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(TEMPORARY, f".{name}.", directory)
        with os.fdopen(handle, "wb") as file:
            for piece in pieces:
                file.write(piece)
        os.replace(temporary, os.path.join(directory, name))
        temporary = None
        return True
    except OSError as error:
        log.warning("cannot write %s in the cache %s: %s", name, directory, error)
        return False
    finally:
        if temporary is not None and os.path.lexists(temporary):
            os.remove(temporary)


def remove_stale_temporaries(directory, age=STALE_SECONDS):
    """Remove the temporary files (``.<name>.<random>.tmp``) that writers left in the cache
    ``directory`` (trusted) more than ``age`` seconds ago: they were killed before renaming
    them; a younger one may be being written. Returns how many were removed."""
    if not trusted(directory):
        return 0
    try:
        listing = list(os.scandir(directory))
    except OSError:
        return 0
    removed, now = 0, time.time()
    for item in listing:
        try:
            if (item.name.startswith(".") and item.name.endswith(TEMPORARY)
                    and item.is_file(follow_symlinks=False)
                    and now - item.stat(follow_symlinks=False).st_mtime > age):
                os.remove(item.path)
                removed += 1
        except OSError:          # (removed by another process meanwhile)
            continue
    return removed


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


def aligned(offset):
    """``offset`` rounded up to a multiple of :data:`ALIGN`."""
    return -(-offset // ALIGN) * ALIGN


def _flush(file):
    """Put what was written to ``file`` on the disk."""
    file.flush()
    os.fsync(file.fileno())


def _sync_directory(directory):
    """Put ``directory``'s entries (a rename into it) on the disk."""
    handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _warn_once(directory, message, *args):
    if directory not in _warned:
        _warned.add(directory)
        log.warning(message, *args)
