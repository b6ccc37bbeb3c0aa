"""``myelin convert``: save the flow of a model (imported from ONNX, optionally optimized) as a
.flow file."""

from myelin.cli.common import count, load_flow, model_command


def convert_command(args, out):
    flow = load_flow(args)
    if args.optimize:
        from myelin import optimize
        from myelin.codegen.llvm import elementwise
        optimize.optimize(flow, args.opt_level, fusable=elementwise.supported)
    flow.save(args.output, args.version)
    print(f"wrote {args.output} (.flow version {args.version}): "
          f"{count(len(flow.funcs), 'function')}, {count(len(flow.ops), 'op')}, "
          f"{count(len(flow.vars), 'variable')}", file=out)



def add(commands):
    """Add ``convert`` to the sub-commands."""
    command = model_command(commands, "convert", "import an ONNX model (or read a .flow file) "
                                                 "and save its flow as a .flow file",
                            convert_command, compiles=False)
    command.add_argument("output", help="the .flow file to write")
    command.add_argument("--optimize", action="store_true",
                         help="save the flow after the graph optimizer (at --opt-level)")
    command.add_argument("--version", type=int, default=6, choices=range(3, 7),
                         help=".flow file format version (default 6)")
