"""``myelin export``: compile a model into a shared library with a C API and its header
(:mod:`myelin.aot`), for this machine or another target."""

import time

from myelin.cli.common import load_flow, model_command


def export_command(args, out):
    from myelin import aot

    start = time.perf_counter()
    flow = load_flow(args)
    name = args.name or aot.default_name(args.model)
    options = {"opt_level": args.opt_level}
    if args.toolchain:
        options["toolchain"] = args.toolchain.split()
    done = aot.export(flow, args.output, name=name, target=args.target, cpu=args.cpu,
                      features=args.cpu_features, threads=args.threads, **options)
    print(f"wrote {done.library} and {done.header} for {done.triple} in "
          f"{time.perf_counter() - start:.1f} s (linked with {' '.join(done.toolchain)})",
          file=out)


def add(commands):
    """Add ``export`` to the sub-commands."""
    command = model_command(
        commands, "export", "compile a model into a shared library with a C API (lib<name>.so "
                            "and <name>.h) that runs without Python", export_command,
        details=": the code, the weights, the worker pool and functions to create instances, "
                "reach their tensors by name or index and compute; linked with zig cc where "
                "the ziglang package is installed, else with the system's cc")
    command.add_argument("-o", "--output", required=True, help="the directory to write to")
    command.add_argument("--name", help="the library's name and its functions' prefix "
                                        "(default: the model file's name)")
    command.add_argument("--target", help="an LLVM triple to compile for, such as "
                                          "aarch64-linux-gnu (default: this machine)")
    command.add_argument("--cpu", help="the target's CPU (default: generic for --target)")
    command.add_argument("--toolchain", help='the C compiler command that links, such as '
                                             '"cc" or "zig cc -target aarch64-linux-gnu"')
