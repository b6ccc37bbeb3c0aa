"""Bounds on the named dimensions of an ONNX model's inputs (their ``dim_param``s), as
``myelin.onnx.load(path, dynamic={"batch": (1, 64), "sequence": (1, 512)})`` gives them.

:class:`DynamicDims` checks the bounds where the model is loaded (each name one of the
model's, each bound a pair of sizes) and the inputs of every new signature against them: a
size outside its bounds, or a name with two sizes at once, is an InputError before anything
compiles. Each size within the bounds is compiled when first used, as without bounds: one
compile for every size is not implemented yet, and the model's ``compiles`` say so.
"""

import operator

from myelin.errors import InputError


class DynamicDims:
    """The bounds ``(low, high)`` of named dimensions by name (``bounds``) and where each name
    occurs among the inputs of ``graph``: ``places[name]`` lists (input name, axis)."""

    def __init__(self, graph, bounds):
        initializers = {t.name for t in graph.initializer}
        named = {}
        for value in graph.input:
            if value.name in initializers:
                continue
            for axis, dim in enumerate(value.type.tensor_type.shape.dim):
                if dim.dim_param:
                    named.setdefault(dim.dim_param, []).append((value.name, axis))
        if not isinstance(bounds, dict):
            raise InputError(f"dynamic maps dimension names to (low, high) bounds, not "
                             f"{type(bounds).__name__}")
        unknown = sorted(set(bounds) - set(named))
        if unknown:
            raise InputError(f"dynamic names dimensions {unknown} that no input of the model "
                             f"has; its named dimensions are {sorted(named) or 'none'}")
        self.bounds = {name: _bounds(name, given) for name, given in bounds.items()}
        self.places = {name: named[name] for name in self.bounds}

    def check(self, shapes):
        """The size of each bounded dimension in ``shapes`` (input name -> shape); InputError
        for a size outside its bounds or a name with different sizes in two inputs."""
        sizes = {}
        for name, places in self.places.items():
            low, high = self.bounds[name]
            for value, axis in places:
                shape = shapes.get(value)
                if shape is None or axis >= len(shape):
                    continue            # (an input of another rank: the import says so)
                size = shape[axis]
                if name in sizes and sizes[name][1] != size:
                    raise InputError(f"dimension {name} is {sizes[name][1]} in input "
                                     f"{sizes[name][0]} but {size} in input {value}")
                if not low <= size <= high:
                    raise InputError(f"input {value}: dimension {name} (axis {axis}) is "
                                     f"{size}, outside its bounds {low}..{high} (dynamic)")
                sizes[name] = (value, size)
        return {name: size for name, (_, size) in sizes.items()}

    def describe(self, sizes):
        """A note for a compile at ``sizes`` (from :meth:`check`)."""
        return ("compiled for " + ", ".join(f"{name}={size}" for name, size in sizes.items())
                + " (each size of a dynamic dimension is compiled when first used)")


def _bounds(name, given):
    """``given`` as (low, high) sizes, 0 <= low <= high; InputError otherwise."""
    try:
        low, high = (operator.index(bound) for bound in given)
    except (TypeError, ValueError):
        raise InputError(f"the bounds of dimension {name} are a pair of ints (low, high), "
                         f"not {given!r}") from None
    if not 0 <= low <= high:
        raise InputError(f"the bounds of dimension {name} must satisfy 0 <= low <= high, "
                         f"not {(low, high)}")
    return low, high
