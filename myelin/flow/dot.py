"""GraphViz pictures of flows: DOT text with a cluster per function, a node per op and per
input, output and constant, and edges labelled with tensor types; SVG and HTML pages of them.

:func:`to_dot` draws one flow, :func:`compare` draws several side by side in one picture (the
flow a model was loaded as and the flow the compiler optimized it into, say). Node ids are
``op:NAME`` and ``var:NAME``, after ``CAPTION:`` in :func:`compare`; labels are HTML-like, so a
name may hold any character. :func:`to_svg` needs GraphViz's ``dot`` program.
"""

import html
import shutil
import subprocess

from myelin.errors import MyelinError

_OP_STYLE = 'shape=box, style="rounded,filled", fillcolor="#f2f2f2"'
_VAR_STYLES = {
    "constant": 'shape=note, style=filled, fillcolor="#fff2cc", fontsize=8',
    "input": 'shape=ellipse, style=filled, fillcolor="#c6efce"',
    "output": 'shape=ellipse, style=filled, fillcolor="#bdd7ee"',
    "free": "shape=ellipse, style=dashed",
}
_ATTRIBUTE_CHARS = 40        # longer attribute values are cut short in op labels


def quote(text):
    """``text`` as a DOT quoted string (for ids)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _label(*lines, bold=True):
    """An HTML-like label of text ``lines``, the first in bold (unless not ``bold``)."""
    first, *rest = (html.escape(line) for line in lines)
    return "<" + "<br/>".join([f"<b>{first}</b>" if bold else first] + rest) + ">"


def _op_lines(op):
    """The lines of an op's label: name, type and its attributes (a fused recipe one step a
    line)."""
    lines = [op.name, op.type]
    for key, value in op.attrs.items():
        if key == "expr":
            lines.extend(value.split(";"))
        else:
            text = f"{key}={value}"
            lines.append(text if len(text) <= _ATTRIBUTE_CHARS
                         else text[:_ATTRIBUTE_CHARS - 3] + "...")
    return lines


def _var_kind(var):
    """The style of a variable drawn as a node of its own, or None for one drawn as edges
    from its producer to its consumers."""
    if var.is_global:
        return "constant"
    if var.is_input:
        return "input"
    if var.is_output:
        return "output"
    if var.producer is None or not var.consumers:
        return "free"
    return None


def _indent(lines):
    return ["  " + line for line in lines]


def _body(flow, prefix=""):
    """The statements drawing ``flow`` with ids starting with ``prefix``: a cluster per function
    with its ops and variable nodes (and loose ones after), then every edge, outside the
    clusters so that no node is drawn in two."""
    groups = {func.name: [] for func in flow.funcs.values()}
    loose, edges = [], []

    def group(op):
        return groups[op.func.name] if op.func is not None else loose

    def op_id(op):
        return quote(f"{prefix}op:{op.name}")

    for op in flow.ops.values():
        group(op).append(f"{op_id(op)} [{_OP_STYLE}, label={_label(*_op_lines(op))}];")
    for var in flow.vars.values():
        users = ([var.producer] if var.producer is not None else []) + var.consumers
        if not users:
            continue
        type_label = _label(var.type_string(), bold=False)
        kind = _var_kind(var)
        if kind is None:
            edges.extend(f"{op_id(var.producer)} -> {op_id(consumer)} [label={type_label}];"
                         for consumer in var.consumers)
            continue
        var_id = quote(f"{prefix}var:{var.name}")
        group(users[0]).append(f"{var_id} [{_VAR_STYLES[kind]}, "
                               f"label={_label(var.name, var.type_string())}];")
        if var.producer is not None:
            edges.append(f"{op_id(var.producer)} -> {var_id} [label={type_label}];")
        edges.extend(f"{var_id} -> {op_id(consumer)};" for consumer in var.consumers)
    lines = []
    for name, nodes in groups.items():
        lines.append(f"subgraph {quote(f'cluster {prefix}{name}')} {{")
        lines.extend(_indent([f"label={_label('function ' + name)};"] + nodes))
        lines.append("}")
    return lines + loose, edges


def _digraph(title, statements):
    head = ["rankdir=TB;", 'node [fontname="Helvetica", fontsize=10];',
            'edge [fontname="Helvetica", fontsize=8];']
    if title:
        head.append(f"labelloc=t; label={_label(title)};")
    return "\n".join(["digraph {"] + _indent(head + statements) + ["}"]) + "\n"


def to_dot(flow, title=None):
    """GraphViz DOT text of ``flow``: a digraph (labelled ``title``) with a cluster per
    function."""
    clusters, edges = _body(flow)
    return _digraph(title, clusters + edges)


def compare(flows, title=None):
    """GraphViz DOT text of several flows side by side in one digraph: ``flows`` maps a caption
    to a flow, drawn in a cluster of that caption holding a cluster per function."""
    statements, all_edges = [], []
    for caption, flow in flows.items():
        clusters, edges = _body(flow, f"{caption}:")
        statements.append(f"subgraph {quote('cluster ' + caption)} {{")
        statements.extend(_indent([f"label={_label(caption)};"] + clusters))
        statements.append("}")
        all_edges.extend(edges)
    return _digraph(title, statements + all_edges)


def to_svg(dot_text):
    """The picture of ``dot_text`` as SVG text, drawn by GraphViz's ``dot``; None when GraphViz
    is not installed."""
    program = shutil.which("dot")
    if program is None:
        return None
    result = subprocess.run([program, "-Tsvg"], input=dot_text, capture_output=True,
                            text=True)
    if result.returncode:
        problem = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise MyelinError(f"GraphViz dot failed (status {result.returncode}): {problem}")
    return result.stdout


def to_html(dot_text, svg=None, title="flow"):
    """A self-contained HTML page showing ``svg`` (from :func:`to_svg`), or without it the DOT
    text and a note on how to draw it."""
    if svg is not None:
        body = svg[svg.index("<svg"):]         # without the XML prologue and DOCTYPE
    else:
        body = ("<p>GraphViz is not installed, so here is the DOT text: install graphviz and "
                "run <code>dot -Tsvg</code> on it, or paste it into any DOT viewer.</p>\n"
                f"<pre>{html.escape(dot_text)}</pre>")
    return (f'<!DOCTYPE html>\n<html>\n<head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title></head>\n<body>\n{body}\n</body>\n</html>\n")
