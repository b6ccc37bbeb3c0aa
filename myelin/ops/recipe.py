"""Recipes: the expression language of fused ops (``Calculate`` and ``FusedMatMul``).

A recipe is a list of assignments separated by ``;``, as in SLING Myelin's fused kernels::

    @0=Exp(Sub(%0,%1));@1=Sum(@0)

``%i`` is input i of the fused op, ``@k`` its output k and ``$k`` a temporary; an operation is
an op type applied to arguments, ``Name(arg, ...)``. Each assignment's value may be read by
later ones. The op types are element-wise registry ops, plus reductions (which take the fused
op's ``axis``/``keepdims`` attributes).
"""

import dataclasses
import re

from myelin.errors import FlowError


@dataclasses.dataclass(frozen=True)
class Ref:
    """A value: ``kind`` is ``%`` (input), ``@`` (output) or ``$`` (temporary)."""

    kind: str
    index: int

    def __str__(self):
        return f"{self.kind}{self.index}"


@dataclasses.dataclass(frozen=True)
class Call:
    """An op applied to argument expressions."""

    op: str
    args: tuple

    def __str__(self):
        return f"{self.op}({','.join(str(a) for a in self.args)})"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Assignments ``(target Ref, expression)`` in evaluation order."""

    assignments: tuple

    def __str__(self):
        return ";".join(f"{target}={expr}" for target, expr in self.assignments)

    @property
    def outputs(self):
        """The number of outputs (``@k`` targets)."""
        return sum(1 for target, _ in self.assignments if target.kind == "@")

    def input_count(self):
        """One more than the highest input index read."""
        highest = -1
        for _, expr in self.assignments:
            for node in walk(expr):
                if isinstance(node, Ref) and node.kind == "%":
                    highest = max(highest, node.index)
        return highest + 1


def walk(expr):
    """Every node of ``expr``, arguments before the call that uses them."""
    if isinstance(expr, Call):
        for arg in expr.args:
            yield from walk(arg)
    yield expr


_TOKEN = re.compile(r"\s*(?:([%@$])(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")


def _tokens(text):
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:       # only trailing blanks are left
            break
        kind, number, name, other = match.groups()
        if kind:
            yield ("ref", Ref(kind, int(number)), match.start())
        elif name:
            yield ("name", name, match.start())
        else:
            yield ("punct", other, match.start())
        position = match.end()


def parse(text):
    """Parse a recipe string; raises FlowError naming the position of a syntax error."""
    tokens = list(_tokens(text))
    position = 0

    def fail(message):
        where = tokens[position][2] if position < len(tokens) else len(text)
        raise FlowError(f"recipe {text!r}: {message} at character {where}")

    def peek(kind=None, value=None):
        if position >= len(tokens):
            return False
        token_kind, token_value, _ = tokens[position]
        return (kind is None or token_kind == kind) and (value is None or token_value == value)

    def take(kind, value=None, what=None):
        nonlocal position
        if not peek(kind, value):
            fail(f"expected {what or value or kind}")
        position += 1
        return tokens[position - 1][1]

    def expression():
        if peek("ref"):
            return take("ref")
        name = take("name", what="an op name or a value")
        take("punct", "(")
        args = [expression()]
        while peek("punct", ","):
            take("punct", ",")
            args.append(expression())
        take("punct", ")")
        return Call(name, tuple(args))

    assignments = []
    defined = set()
    while True:
        target = take("ref", what="an assignment target")
        if target.kind == "%":
            fail("an input cannot be assigned")
        take("punct", "=")
        expr = expression()
        for node in walk(expr):
            if isinstance(node, Ref) and node.kind != "%" and node not in defined:
                fail(f"{node} is read before it is assigned")
        if target in defined:
            fail(f"{target} is assigned twice")
        defined.add(target)
        assignments.append((target, expr))
        if not peek("punct", ";"):
            break
        take("punct", ";")
    if position != len(tokens):
        fail("unexpected text")
    outputs = sorted(t.index for t in defined if t.kind == "@")
    if outputs != list(range(len(outputs))):
        raise FlowError(f"recipe {text!r}: outputs must be numbered @0 to @{len(outputs) - 1}")
    return Recipe(tuple(assignments))


def evaluate(recipe, inputs, apply):
    """Evaluate ``recipe`` on ``inputs`` (a list of values); returns the list of outputs.

    ``apply(op_type, args)`` computes one operation on argument values.
    """
    values = {}

    def value(expr):
        if isinstance(expr, Ref):
            return inputs[expr.index] if expr.kind == "%" else values[expr]
        return apply(expr.op, [value(arg) for arg in expr.args])

    outputs = {}
    for target, expr in recipe.assignments:
        values[target] = value(expr)
        if target.kind == "@":
            outputs[target.index] = values[target]
    return [outputs[k] for k in range(len(outputs))]
