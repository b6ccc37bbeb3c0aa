"""``myelin graph``: draw a model's flow as loaded and as optimized (DOT, SVG or HTML)."""

import os

import myelin
from myelin.cli.common import UsageError, compiler_options, count, load_flow, model_command
from myelin.flow import dot


def graph_command(args, out):
    stem, kind = os.path.splitext(args.output)
    if kind not in (".dot", ".svg", ".html"):
        raise UsageError(f"cannot tell what to draw {args.output} as",
                         "give an output file ending in .dot, .svg or .html")
    flow = load_flow(args)
    optimized = myelin.Compiler(**compiler_options(args)).compile(flow).flow
    title = os.path.basename(args.model)
    text = dot.compare({"input": flow, "optimized": optimized}, title)
    svg = dot.to_svg(text) if kind != ".dot" else None
    if kind == ".svg" and svg is None:
        with open(stem + ".dot", "w") as file:
            file.write(text)
        raise UsageError(f"GraphViz is not installed: wrote {stem}.dot, not {args.output}",
                         f"install graphviz and run dot -Tsvg {stem}.dot -o {args.output}, or "
                         f"draw to a .html file")
    with open(args.output, "w") as file:
        file.write(dot.to_html(text, svg, title) if kind == ".html" else svg or text)
    print(f"wrote {args.output}: the input flow has {count(len(flow.ops), 'op')}, the "
          f"optimized flow {count(len(optimized.ops), 'op')}", file=out)
    if kind == ".html" and svg is None:
        print("GraphViz is not installed: the page shows the DOT text (install graphviz for "
              "a picture)", file=out)



def add(commands):
    """Add ``graph`` to the sub-commands."""
    command = model_command(commands, "graph", "draw the flow of a model as loaded and as "
                                               "optimized, side by side: DOT text, or SVG or "
                                               "an HTML page drawn by GraphViz's dot",
                            graph_command)
    command.add_argument("-o", "--output", required=True, metavar="OUT",
                         help="OUT.dot (DOT text), OUT.svg (needs GraphViz: without it, writes "
                              "OUT.dot and fails) or OUT.html (the SVG in a page; without "
                              "GraphViz, the DOT text)")
