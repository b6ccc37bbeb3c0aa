"""A human-readable text listing of a flow (pictures: :mod:`myelin.flow.dot`)."""


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
        signature = ""
        if func.results is not None:
            signature = (f"({', '.join(v.name for v in func.params)}) -> "
                         f"({', '.join(v.name for v in func.results)}) ")
        lines.append(" ".join(words + [f"func {func.name} {signature}{{"]))
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
