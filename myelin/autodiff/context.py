"""What a gradient rule works with: :class:`Adjoints`, the state of one gradient pass, and
:class:`OpContext`, its view for the op whose rule runs.

A rule is the ``gradient`` of an op's registry entry, ``rule(g)`` with ``g`` an OpContext. It
reads the incoming adjoints of the op's outputs (``g.dy``, ``g.adjoint(i)``), the forward values
it needs (``g.x``, ``g.y``, ``g.value(var)``), builds terms with ``g.b`` (a
:class:`~myelin.builder.Builder` of the gradient function) and hands each input's term to
``g.add(i, term)``, for the inputs where ``g.needs(i)``. A term may have any shape that
broadcasts with the input's: the pass sums the terms of a variable and sums a broadcast term
back to the variable's shape (or broadcasts a smaller one up to it).
"""

from myelin.autodiff import names
from myelin.autodiff.primal import PRIMAL
from myelin.builder import Builder
from myelin.flow.graph import VarFlags


class Adjoints:
    """The adjoint terms of the forward variables of ``forward`` and the forward values the
    gradient function ``gradient`` reads, during one gradient pass; ``active`` holds the ids
    of the variables that carry gradients (between a differentiable input and an output)."""

    def __init__(self, flow, forward, gradient, active):
        self.forward = forward
        self.builder = Builder(flow, gradient)
        self.active = active
        self._terms = {}      # id(var) -> [terms]
        self._sums = {}       # id(var) -> the summed adjoint
        self._values = {}     # id(forward var) -> its reference input in the gradient
        self.referenced = []  # forward variables the gradient reads, in first-use order

    def needs(self, var):
        """True if ``var`` carries a gradient."""
        return id(var) in self.active

    def add(self, var, term):
        """Add ``term`` (of a shape that broadcasts with ``var``'s) to the adjoint of ``var``."""
        if self.needs(var):
            self._terms.setdefault(id(var), []).append(term)

    def adjoint(self, var):
        """The sum of the terms of ``var`` in its shape, or None when it has none."""
        if id(var) not in self._sums:
            terms = self._terms.get(id(var))
            if not terms:
                return None
            total = terms[0]
            for term in terms[1:]:
                total = self.builder.add(total, term)
            self._sums[id(var)] = self._fit(total, var.shape)
        return self._sums[id(var)]

    def value(self, var):
        """The forward value of ``var`` in the gradient function: a global itself, else a
        reference input bound to the forward instance's tensor (see :mod:`.primal`)."""
        if var.is_global:
            return var
        ref = self._values.get(id(var))
        if ref is None:
            flow = self.builder.flow
            name = flow.unique_var_name(names.primal_name(self.forward, var.name))
            ref = flow.var(name, var.dtype, var.shape)
            ref.flags |= VarFlags.IN | VarFlags.REF
            ref.attrs[PRIMAL] = var.name
            self._values[id(var)] = ref
            self.referenced.append(var)
        return ref

    def _fit(self, term, shape):
        """``term`` summed over the axes it was broadcast along, then broadcast to ``shape``
        where it is smaller."""
        b, shape = self.builder, tuple(shape)
        if term.shape == shape:
            return term
        lead = term.rank - len(shape)
        axes = list(range(max(lead, 0)))
        axes += [i + lead for i, d in enumerate(shape)
                 if i + lead >= 0 and d == 1 and term.shape[i + lead] != 1]
        if axes:
            kept = [1 if i + lead < 0 or i + lead in axes else term.shape[i + lead]
                    for i in range(len(shape))]
            term = b.sum(term, axes)
            if list(term.shape) != kept:
                term = b.reshape(term, kept)
        if term.shape != shape:
            term = b.op("BroadcastTo", [term], attrs={"shape": list(shape)})
        return term

    def zeros(self, dtype, shape):
        """Zeros of ``dtype`` and ``shape`` in the gradient function."""
        b = self.builder
        return b.op("BroadcastTo", [b.const(0, dtype)], attrs={"shape": list(shape)})


class OpContext:
    """The view of a gradient pass that the rule of forward op ``op`` gets."""

    def __init__(self, adjoints, op):
        self._adjoints = adjoints
        self.op = op
        self.b = adjoints.builder

    @property
    def x(self):
        """The forward value of the op's first input."""
        return self._adjoints.value(self.op.inputs[0])

    @property
    def y(self):
        """The forward value of the op's first output."""
        return self._adjoints.value(self.op.outputs[0])

    @property
    def dy(self):
        """The adjoint of the op's first output (None if it has none)."""
        return self.adjoint(0)

    def input(self, index):
        """The forward value of input ``index``."""
        return self._adjoints.value(self.op.inputs[index])

    def value(self, var):
        """The forward value of ``var``."""
        return self._adjoints.value(var)

    def adjoint(self, index):
        """The adjoint of output ``index``, or None when nothing reads it."""
        return self._adjoints.adjoint(self.op.outputs[index])

    def needs(self, index):
        """True if input ``index`` carries a gradient."""
        return self._adjoints.needs(self.op.inputs[index])

    def add(self, index, term):
        """Add ``term`` to the adjoint of input ``index``."""
        self._adjoints.add(self.op.inputs[index], term)

    def zeros(self, dtype, shape):
        """See :meth:`Adjoints.zeros`."""
        return self._adjoints.zeros(dtype, shape)
