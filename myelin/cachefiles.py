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

Entries are written atomically and durably (:func:`write_atomic`): into a temporary file of
the same directory, flushed to disk, renamed over the entry, and the directory flushed; a
reader sees a whole entry or none, even with several processes writing at once or after a
power failure. :func:`source_fingerprint` identifies this copy of myelin's code, for keys of
entries that its code generation decides.
"""

import hashlib
import logging
import os
import stat
import tempfile

log = logging.getLogger("myelin.cache")

SECRET = ".key"
_SECRET_SIZE = 32

_fingerprint = None
_warned = set()       # directories whose trouble has been reported


def cache_dir(kind):
    """The default directory of the cache ``kind`` ("code", "tuning")."""
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
        handle, temporary = tempfile.mkstemp(".tmp", SECRET + ".", directory)
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


def write_atomic(directory, name, pieces):
    """Write the bytes-like ``pieces`` as ``directory/name``, atomically and durably; returns
    False (and logs why) when the directory is not trusted or cannot be written."""
    if not trusted(directory, create=True):
        return False
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(".tmp", f".{name}.", directory)
        with os.fdopen(handle, "wb") as file:
            for piece in pieces:
                file.write(piece)
            _flush(file)
        os.replace(temporary, os.path.join(directory, name))
        temporary = None
        _sync_directory(directory)
        return True
    except OSError as error:
        log.warning("cannot write %s in the cache %s: %s", name, directory, error)
        return False
    finally:
        if temporary is not None and os.path.lexists(temporary):
            os.remove(temporary)


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
