"""Initial values of learnable parameters: the init kinds and how each draws its values.

An :class:`Init` is a kind and a scale, with an optional fan-in; it is kept in a variable's
attributes (``init``, ``init_scale``, ``fan_in``), so it survives a ``.flow`` file:

=============  ===============================================================================
``uniform``    ``scale * U(-1, 1) / sqrt(fan_in)``
``normal``     ``scale * N(0, 1) / sqrt(fan_in)``
``orthogonal`` ``scale * Q``: the matrix of ``shape[0]`` rows by the product of the other
               dimensions has orthonormal rows (when it is wide) or columns (when it is tall),
               from the QR decomposition of a normal matrix, as ``torch.nn.init.orthogonal_``
``zeros``      zeros
=============  ===============================================================================

``fan_in`` defaults to the number of inputs each output sees in myelin's conventions: the rows
of a matrix (``x W`` with ``W`` of shape ``[in, out]``), the length of a vector, and for rank 3
or more the product of all dimensions but the first (a convolution's ``[out, in, kh, kw]``).
"""

import dataclasses
import math

import numpy as np

from myelin.errors import FlowError

KINDS = ("uniform", "normal", "orthogonal", "zeros")


@dataclasses.dataclass(frozen=True)
class Init:
    """How a parameter is initialized: ``kind`` (one of :data:`KINDS`), ``scale``, and
    ``fan_in`` (None: from the shape)."""

    kind: str = "uniform"
    scale: float = 1.0
    fan_in: int | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise FlowError(f"unknown init kind {self.kind!r}; kinds: {', '.join(KINDS)}")
        if not math.isfinite(self.scale):
            raise FlowError(f"init scale must be a finite number, not {self.scale}")
        if self.fan_in is not None and self.fan_in < 1:
            raise FlowError(f"fan_in must be positive, not {self.fan_in}")

    def to_attrs(self, attrs):
        """Store the init in a variable's attributes."""
        attrs["init"] = self.kind
        if self.scale != 1.0:
            attrs["init_scale"] = repr(float(self.scale))
        if self.fan_in is not None:
            attrs["fan_in"] = self.fan_in

    @classmethod
    def of(cls, var):
        """The init stored in ``var``'s attributes, or None if it has none."""
        if "init" not in var.attrs:
            return None
        return cls(var.attrs["init"], var.attrs.get_float("init_scale", 1.0),
                   var.attrs.get_int("fan_in"))

    def check(self, shape):
        """Raise FlowError if this init cannot fill a tensor of ``shape``."""
        if self.kind == "orthogonal" and len(shape) < 2:
            raise FlowError(f"orthogonal init needs a shape of rank 2 or more, not "
                            f"{list(shape)}")

    def values(self, shape, rng):
        """A float64 array of ``shape`` drawn from ``rng`` (a NumPy Generator)."""
        self.check(shape)
        shape = tuple(shape)
        if self.kind == "zeros":
            return np.zeros(shape)
        if self.kind == "orthogonal":
            return self.scale * _orthogonal(shape, rng)
        if self.kind == "uniform":
            draw = rng.uniform(-1.0, 1.0, shape)
        else:
            draw = rng.standard_normal(shape)
        return draw * (self.scale / math.sqrt(self.fan_in or default_fan_in(shape)))


def default_fan_in(shape):
    """The fan-in of a tensor of ``shape`` (see the module docstring)."""
    if len(shape) <= 2:
        return max(shape[0], 1) if shape else 1
    return max(math.prod(shape[1:]), 1)


def _orthogonal(shape, rng):
    rows, cols = shape[0], math.prod(shape[1:])
    matrix = rng.standard_normal((rows, cols))
    if rows < cols:
        matrix = matrix.T
    q, r = np.linalg.qr(matrix)
    q *= np.sign(np.diag(r))      # the unique Q with a positive diagonal in R: uniform (Haar)
    if rows < cols:
        q = q.T
    return q.reshape(shape)
