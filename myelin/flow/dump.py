"""Human-readable dumps of a flow: a text listing and GraphViz DOT pictures of functions."""


def _flag_words(var):
    words = []
    for flag in ("learnable", "is_input", "is_output", "ref", "unique", "dynamic", "nogradient"):
        if getattr(var, flag):
            words.append(flag.replace("is_", ""))
    if var.constant:
        words.append("const")
    return words


def to_text(flow):
    """The flow as text: variables, operations, functions, connectors and blobs."""
    lines = []
    for var in flow.vars.values():
        head = f"var {var.name} : {var.type_string()}"
        words = _flag_words(var)
        if words:
            head += " " + " ".join(words)
        body = []
        for alias in var.aliases:
            body.append(f"  aka {alias}")
        if var.producer is not None:
            body.append(f"  from {var.producer.name}")
        for consumer in var.consumers:
            body.append(f"  to {consumer.name}")
        for key, value in var.attrs.items():
            body.append(f"  {key} = {value}")
        lines.append(head + (" {" if body else ""))
        if body:
            lines.extend(body)
            lines.append("}")
    if flow.vars:
        lines.append("")
    for op in flow.ops.values():
        lines.append(f"op {op.name} : {op.type} {{")
        for var in op.inputs:
            lines.append(f"  input {var.name} : {var.type_string()}")
        for var in op.outputs:
            lines.append(f"  output {var.name} : {var.type_string()}")
        for key, value in op.attrs.items():
            lines.append(f"  {key} = {value}")
        lines.append("}")
        lines.append("")
    for func in flow.funcs.values():
        words = [w for w in ("training", "backprop") if getattr(func, w)]
        lines.append(" ".join(words + [f"func {func.name} {{"]))
        for op in func.ops:
            lines.append(f"  {op.name} : {op.type}")
        lines.append("}")
        lines.append("")
    for cnx in flow.cnxs.values():
        lines.append(f"connector {cnx.name} {{")
        for var in cnx.links:
            lines.append(f"  {var.name} : {var.type_string()}")
        lines.append("}")
        lines.append("")
    for blob in flow.blobs.values():
        lines.append(f"blob {blob.name} : {blob.type} {{ {len(blob.data)} bytes }}")
    return "\n".join(lines).rstrip() + "\n"


def _quote(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def op_label(op):
    """The label of an op node: its type, plus a fused op's recipe when it has one."""
    label = op.type
    if "expr" in op.attrs:
        label += "\\n" + op.attrs["expr"].replace(";", "\\n")
    return label


def to_dot(flow, func=None):
    """GraphViz DOT text for one function: inputs green, outputs blue, constants as boxes."""
    if func is None:
        func = next(iter(flow.funcs.values()))
    elif isinstance(func, str):
        func = flow.funcs[func]
    lines = [f"digraph {_quote(func.name)} {{",
             "  rankdir=TB;",
             '  node [fontname="Helvetica", fontsize=10];']
    for op in func.ops:
        lines.append(f"  {_quote(op.name)} [shape=ellipse, style=filled, fillcolor=\"#f2f2f2\", "
                     f"label={_quote(op_label(op))}, tooltip={_quote(op.name)}];")
    emitted = set()

    def var_node(var):
        if var.name in emitted:
            return
        emitted.add(var.name)
        label = f"{var.name}\\n{var.type_string()}"
        if var.constant or var.learnable:
            style = 'shape=box, style=filled, fillcolor="#fff2cc"'
        elif var.is_input:
            style = 'shape=ellipse, style=filled, fillcolor="#c6efce"'
        elif var.is_output:
            style = 'shape=ellipse, style=filled, fillcolor="#bdd7ee"'
        else:
            return
        lines.append(f"  {_quote(var.name)} [{style}, label={_quote(label)}];")

    members = set(map(id, func.ops))
    for op in func.ops:
        for var in op.inputs:
            source = var.producer
            if source is not None and id(source) in members:
                lines.append(f"  {_quote(source.name)} -> {_quote(op.name)} "
                             f"[label={_quote(var.type_string())}];")
            else:
                var_node(var)
                lines.append(f"  {_quote(var.name)} -> {_quote(op.name)};")
        for var in op.outputs:
            if var.is_output or not any(id(c) in members for c in var.consumers):
                var_node(var)
                if var.name in emitted:
                    lines.append(f"  {_quote(op.name)} -> {_quote(var.name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"
