"""``myelin compile`` (what the compiler made of a model, or code for another target) and
``myelin profile`` (the time of each step)."""

import time

import numpy as np

import myelin
import myelin.control
from myelin.cli.common import (UsageError, cell_inputs, compile_model, compiler_options,
                               load_flow, model_command, random_inputs, repeat,
                               timing_options)
from myelin.ops.control import is_control


def _phases(timings):
    total = sum(timings.values())
    return f"{total:.3f} s: " + ", ".join(f"{name} {seconds:.3f} s"
                                          for name, seconds in timings.items())


def _report(network, timings, out):
    print(f"compiled in {_phases(timings)}", file=out)
    _report_cells(network, out)


def _report_cells(network, out):
    for cell in network.cells:
        steps = [step for step in cell.steps if not step.noop]
        print(f"\ncell {cell.name}: {len(steps)} steps ({len(cell.steps) - len(steps)} views), "
              f"instance {cell.instance_size} bytes ({cell.unshared_size} without reuse)",
              file=out)
        print(f"  {'step':<40} {'op':<14} {'kernel':<24} {'MFLOP':>10}", file=out)
        for step in steps:
            kernel = step.kernel.kernel_name(step) + (f"[{step.variant}]" if step.variant else "")
            mflop = step.kernel.flops(step) / 1e6
            print(f"  {step.name:<40} {step.type:<14} {kernel:<24} {mflop:>10.3f}", file=out)


def compile_command(args, out):
    def dump_flow(name, text):
        print(f"--- flow after {name} ---\n{text}", file=out)

    if args.target:
        _compile_for_target(args, args.dump_flow and dump_flow, out)
        return
    if args.output:
        raise UsageError("--output applies to --target only",
                         "give --target TRIPLE to write code for another machine")
    start = time.perf_counter()
    flow = load_flow(args)
    loaded = time.perf_counter() - start
    if any(is_control(op) for op in flow.ops.values()):
        _compile_program(args, flow, loaded, out)
        return
    network, timings = compile_model(args, flow, dump_flow=args.dump_flow and dump_flow,
                                     dump=args.dump_llvm or args.dump_asm)
    timings["import"] = loaded
    _report(network, timings, out)
    if args.dump_cells:
        for cell in network.cells:
            print(f"\n{cell}", file=out, end="")
    for kind, wanted in (("llvm", args.dump_llvm), ("asm", args.dump_asm)):
        if wanted:
            print(f"\n--- {kind} ---\n{network.dumps[kind]}", file=out, end="")


def profile_command(args, out):
    network, _ = compile_model(args, profile=True)
    rng = np.random.default_rng(0)
    for cell in network.cells:
        data = cell.instance()
        for name, value in random_inputs(cell_inputs(cell), rng).items():
            data[name] = value
        data.compute()                 # warm up, then count only the timed calls
        cell.reset_profile()
        repeat(data.compute, args)
        print(cell.profile(), file=out)


def _compile_program(args, flow, loaded, out):
    """Compile a flow with control flow (myelin.control): its VM instructions, then its
    cells."""
    if args.dump_flow or args.dump_cells or args.dump_llvm or args.dump_asm:
        raise UsageError("the --dump options apply to flows without control flow",
                         "leave them out: the report lists the VM instructions and cells")
    start = time.perf_counter()
    program = myelin.control.compile(flow, **compiler_options(args))
    print(f"compiled {len(program.entries)} functions with control flow into "
          f"{len(program.externals)} cells in {loaded + time.perf_counter() - start:.3f} s "
          f"(import {loaded:.3f} s)\n", file=out)
    print(program.listing(), file=out)
    if program.network is not None:
        _report_cells(program.network, out)


def _compile_for_target(args, dump_flow, out):
    """Compile for another LLVM target: write its assembly (or object file) to --output, or
    print the assembly."""
    if args.dump_cells or args.dump_llvm:
        raise UsageError("--dump-cells and --dump-llvm apply to the host only",
                         "leave them out with --target")
    object_file = bool(args.output) and args.output.endswith(".o")
    compiler = myelin.Compiler(**compiler_options(args), dump_flow=dump_flow)
    start = time.perf_counter()
    flow = load_flow(args)
    loaded = time.perf_counter() - start
    code = compiler.emit(flow, args.target, args.target_cpu, args.target_features, object_file)
    timings = {"import": loaded, **compiler.timings}
    print(f"compiled for {args.target} ({args.target_cpu}) in {_phases(timings)}", file=out)
    if args.output:
        with open(args.output, "wb" if object_file else "w") as file:
            file.write(code)
        what = "an object file" if object_file else "assembly"
        print(f"wrote {args.output}: {len(code)} bytes of {what}", file=out)
    else:
        print(code, file=out, end="")


def add(commands):
    """Add ``compile`` and ``profile`` to the sub-commands."""
    command = model_command(commands, "compile", "compile a model and report its cells: steps, "
                                                 "kernels, instance size, compile time per "
                                                 "phase", compile_command)
    command.add_argument("--dump-cells", action="store_true",
                         help="also print each cell's instance layout and steps")
    command.add_argument("--dump-flow", action="store_true",
                         help="print the flow after each optimization pass that changed it")
    command.add_argument("--dump-llvm", action="store_true",
                         help="print the optimized LLVM IR of the cells")
    command.add_argument("--dump-asm", action="store_true",
                         help="print the assembly of the cells")
    command.add_argument("--target", metavar="TRIPLE",
                         help="compile for another LLVM target, such as "
                              "aarch64-unknown-linux-gnu or riscv64-unknown-linux-gnu, without "
                              "running: print its assembly, or write it with --output")
    command.add_argument("--target-cpu", default="generic",
                         help="the CPU of --target (default generic)")
    command.add_argument("--target-features", default="",
                         help='LLVM features of --target, such as "+v" for RISC-V vectors')
    command.add_argument("-o", "--output", metavar="FILE",
                         help="with --target: write FILE (.o: an object file, else assembly)")
    timing_options(model_command(commands, "profile", "compile a model with the profiler, "
                                                      "compute on random inputs and print the "
                                                      "time of each step", profile_command))
