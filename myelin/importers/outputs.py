"""Where a compiled model's run puts the outputs (``OnnxModel.run``, and the compiled cells
of :mod:`myelin.importers.compiled`): fresh arrays, or the caller's (``out=``).

Without ``out`` every output is a fresh array of the caller's, which no later run writes over.
``out`` is a list of arrays in output order, or a dict by output name; each array given (None,
or an output the dict leaves out: a fresh array) must be a writeable NumPy array of its
output's dtype and shape, and gets the output written into it; ``run`` returns those arrays.
"""

import numpy as np

from myelin.errors import InputError


def targets(out, names):
    """``out`` as a list in output order (None for an output that comes fresh); InputError
    for another kind of ``out``, another count, or a name that is no output's."""
    if isinstance(out, (list, tuple)):
        if len(out) != len(names):
            raise InputError(f"out gives {len(out)} arrays; the model has {len(names)} "
                             f"outputs ({names})")
        return out
    if not isinstance(out, dict):
        raise InputError(f"out must be a list of arrays in output order or a dict by output "
                         f"name, not {type(out).__name__}")
    unknown = [name for name in out if name not in names]
    if unknown:
        raise InputError(f"out names {unknown}, which are not outputs of the model; its "
                         f"outputs are {names}")
    return [out.get(name) for name in names]


def deliver(results, targets, names, copy):
    """The outputs as run returns them: each of ``results`` written into its target, or for
    a target of None a fresh array: a copy of the result if ``copy`` (``results`` are views a
    later run writes over), else the result itself. InputError for a target that is not a
    writeable array of its result's dtype and shape (the outputs before it are written)."""
    delivered = []
    for result in results:      # (costs less than a loop over zip(targets, results))
        target = targets[len(delivered)]
        if target is None:
            delivered.append(result.copy() if copy else result)
        elif isinstance(target, np.ndarray) and target.shape == result.shape and \
                (target.dtype is result.dtype or target.dtype == result.dtype):
            try:
                target[...] = result
            except ValueError:      # what else assigning an array of its dtype and shape raises
                raise InputError(f"out for output {names[len(delivered)]} is a read-only "
                                 f"array") from None
            delivered.append(target)
        else:
            given = (f"a {target.dtype} array of shape {list(target.shape)}"
                     if isinstance(target, np.ndarray) else type(target).__name__)
            raise InputError(f"out for output {names[len(delivered)]} must be a "
                             f"{result.dtype} array of shape {list(result.shape)}, not {given}")
    return delivered
