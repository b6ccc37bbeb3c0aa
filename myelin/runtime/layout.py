"""The text description of a compiled cell: its instance layout and steps.

The format follows the Myelin guide: a header with the instance size, one line per instance
tensor (offset, size, alignment; tensors sharing space are printed as ``union`` under the
tensor whose space they use, the inputs of a Concat written in place as ``slice``), the globals the cell reads, then ``out = Kernel[variant](in)``
for each step, with a fused op's recipe as a comment.
"""


def _tensor_line(spec, indent, word):
    where = f"offset {spec.offset} " if spec.offset is not None else ""
    return (f"{indent}{word} {spec.name}: {spec.type_string()}".ljust(44)
            + f"  // {where}size {spec.size} alignment {spec.alignment}")


def describe(cell):
    saved = cell.unshared_size - cell.instance_size
    lines = [f"cell {cell.name} {{  // size {cell.instance_size} "
             f"({cell.unshared_size} without reuse, {saved} saved)"]
    owners = [t for t in cell.tensors if _owner(t) is t]
    owners.sort(key=lambda t: (t.offset, t.name))
    sharing = {}
    for spec in cell.tensors:
        if _owner(spec) is not spec:
            sharing.setdefault(id(_owner(spec)), []).append(spec)
    for spec in owners:
        word = {"input": "input var", "output": "output var"}.get(spec.kind, "var")
        if spec.kind == "input" and spec.is_output:
            word = "input output var"
        lines.append(_tensor_line(spec, "  ", word))
        for other in sharing.get(id(spec), []):
            word = "union" if other.slice_of is None else "slice"
            lines.append(_tensor_line(other, "    ", word))
    globals_seen = []
    for step in cell.steps:
        for tensor in step.inputs + step.outputs:
            if tensor.is_global and tensor not in globals_seen:
                globals_seen.append(tensor)
    if globals_seen:
        lines.append("")
    for spec in globals_seen:
        word = "const" if spec.kind == "constant" else "learnable"
        lines.append(f"  {word} {spec.name}: {spec.type_string()}".ljust(44)
                     + f"  // size {spec.size} alignment {spec.alignment}")
    if cell.steps:
        lines.append("")
    for step in cell.steps:
        outputs = ", ".join(t.name for t in step.outputs)
        inputs = ", ".join(t.name for t in step.inputs)
        kernel = step.kernel.kernel_name(step)
        variant = f"[{step.variant}]" if step.variant else ""
        note = ("  // empty, no code" if step.empty else "  // view, no code" if step.noop
                else "")
        if "expr" in step.attrs:
            note = f"  // {step.attrs['expr']}"      # a fused op's recipe
        lhs = f"{outputs} = " if outputs else ""
        lines.append(f"  {lhs}{kernel}{variant}({inputs}){note}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _owner(spec):
    """The tensor that owns the space ``spec`` uses."""
    while spec.view_of is not None or spec.shares is not None or spec.slice_of is not None:
        spec = spec.view_of or spec.shares or spec.slice_of
    return spec
