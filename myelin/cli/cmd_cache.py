"""``myelin cache``: list or clear the compile cache (:mod:`myelin.codegen.llvm.codecache`).

``list`` checks each entry as a compile would and shows, on one line, why one would not be
used (damaged, not signed with this cache's key, another format): it is rebuilt on its next
use; the entries of kernel functions (and of the helpers they call) are counted. ``clear``
removes them too. A directory that is not trusted is said so (a warning) and its entries
listed as not used."""

import os
import time

from myelin.codegen.llvm.codecache import KERNELS, CodeCache
from myelin.codegen.llvm.target import Target


def _size(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _machine(fields):
    """"cpu isa" of an entry's key fields, as ``znver3 AVX2``."""
    target = Target(fields["triple"], fields["cpu"], fields["features"])
    return f"{target.cpu} {target.isa()}"


def list_command(args, out):
    cache = CodeCache(args.dir)
    entries = cache.entries()
    total = sum(info.size for info in entries)
    print(f"compile cache {cache.directory}: {len(entries)} entries, {_size(total)} "
          f"(limit {_size(cache.limit)})", file=out)
    kernels = cache.kernels.entries() if os.path.isdir(os.path.join(cache.directory, KERNELS)) \
        and cache.kernels else []
    if kernels:
        # (an entry by signature is a kernel's code kept again under what it computes)
        signed = sum("helpers" in (info.description or {}) for info in kernels)
        print(f"  and the code of {len(kernels) - signed} kernel and helper functions and "
              f"{signed} kernels by signature, {_size(sum(info.size for info in kernels))}, "
              f"in {cache.kernels.directory}", file=out)
    if not entries:
        return
    print(f"  {'key':<12}  {'size':>9}  {'last used':<16}  {'machine':<16}  {'steps':>5}  "
          f"cells", file=out)
    for info in entries:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.used))
        if info.problem:
            print(f"  {info.key[:12]:<12}  {_size(info.size):>9}  {used:<16}  (not used: "
                  f"{info.problem})", file=out)
            continue
        description = info.description or {}
        print(f"  {info.key[:12]:<12}  {_size(info.size):>9}  {used:<16}  "
              f"{_machine(info.fields):<16}  {description.get('steps', '?'):>5}  "
              f"{', '.join(description.get('cells', []))}", file=out)


def clear_command(args, out):
    cache = CodeCache(args.dir)
    count, size = cache.clear()
    print(f"removed {count} entries ({_size(size)}) from {cache.directory}", file=out)


def add(commands):
    """Add ``cache list`` and ``cache clear`` to the sub-commands."""
    command = commands.add_parser("cache", help="list or clear the compile cache",
                                  description="list or clear the compile cache, where compiled "
                                              "code is kept for later compiles of the same "
                                              "model with the same options on the same CPU")
    actions = command.add_subparsers(dest="action", required=True)
    for name, run, text in (("list", list_command, "list the entries, most recently used "
                                                   "first"),
                            ("clear", clear_command, "remove every entry")):
        action = actions.add_parser(name, help=text, description=text)
        action.set_defaults(run=run)
        action.add_argument("--dir", default=None,
                            help="the cache directory (default: $MYELIN_CACHE_DIR/code, else "
                                 "$XDG_CACHE_HOME/myelin/code, else ~/.cache/myelin/code)")
        action.add_argument("--debug", action="store_true", help="show tracebacks of errors")
