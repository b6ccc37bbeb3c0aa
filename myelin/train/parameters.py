"""Learnable parameters: made in a flow with an init, filled in a compiled network from a seed,
saved into a flow as constants and loaded back.

A learnable variable is a global of the compiled network: one array, allocated (zeroed) when
the network is compiled and shared by every instance of every cell that reads it (the model,
its gradient, the optimizer). ``network[name]`` reads and writes it; :func:`learnables` lists
them all.

::

    W = train.parameter(f, "W", [64, 10], init="orthogonal")
    net = myelin.Compiler().compile(flow)
    train.initialize(net, seed=1)          # the same values for the same seed, every time
    train.save_parameters(net, flow)       # W is now a constant of flow holding its values
    flow.save("model.flow")
"""

import zlib

import numpy as np

from myelin.errors import FlowError, InputError
from myelin.flow import dtypes
from myelin.flow.dtypes import DT_FLOAT
from myelin.flow.graph import Flow, Variable
from myelin.train.init import Init


def parameter(builder, name, shape, init="uniform", scale=1.0, *, dtype=DT_FLOAT,
              fan_in=None):
    """A new learnable parameter ``<func>/<name>`` of ``builder``'s function, with the init
    of kind ``init`` (see :mod:`myelin.train.init`) and ``scale`` kept in its attributes.

    Raises FlowError for an unknown init kind, a non-float ``dtype``, a shape with a dimension
    below 1, or an init the shape does not allow (orthogonal needs rank 2 or more)."""
    spec = Init(init, float(scale), fan_in)
    shape = tuple(int(d) for d in shape)
    if any(d < 1 for d in shape):
        raise FlowError(f"parameter {name} needs a shape of positive sizes, not {list(shape)}")
    if not dtypes.is_float(dtypes.canonical(dtype)):
        raise FlowError(f"parameter {name} must have a float type, not {dtype}")
    spec.check(shape)
    var = builder.var(name, dtype, shape)
    var.learnable = True
    spec.to_attrs(var.attrs)
    return var


def learnables(network):
    """``{name: array}`` of the network's learnable globals (views, not copies)."""
    return {name: network.tensor(name).numpy() for name in network.globals()
            if network.flow.var_named(name).learnable}


def initialize(network, seed=0):
    """Fill every learnable global of ``network`` from its init (zeros without one).

    Each parameter draws from a generator seeded by ``seed`` and its name, so its values
    depend on nothing else: not on the order or number of other parameters."""
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, not {seed!r}")
    for name, array in learnables(network).items():
        spec = Init.of(network.flow.var_named(name)) or Init("zeros")
        rng = np.random.default_rng([int(seed), zlib.crc32(name.encode())])
        array[...] = spec.values(array.shape, rng)


def save_parameters(network, flow):
    """Copy the values of ``network``'s learnables into the variables of the same names in
    ``flow``, which become constants (LEARNABLE cleared), as SLING's SaveParameters; returns
    the names saved."""
    values = learnables(network)
    saved = []
    for var in flow.vars.values():
        if var.learnable and var.name in values:
            var.data = np.array(values[var.name], copy=True)
            var.learnable = False
            saved.append(var.name)
    return saved


def load_parameters(network, source):
    """Set every learnable of ``network`` from ``source``: a Flow (its constants of the same
    names, as :func:`save_parameters` writes them) or a mapping of names or Variables to
    arrays. Raises InputError for a learnable missing from ``source``, a name in a mapping
    that is no learnable of the network, or a value of the wrong shape or type."""
    targets = learnables(network)
    if isinstance(source, Flow):
        values = {}
        for name in targets:
            var = source.var_named(name)
            if var is not None and var.constant:
                values[name] = var.data
    else:
        values = {key.name if isinstance(key, Variable) else key: value
                  for key, value in source.items()}
        unknown = sorted(set(values) - set(targets))
        if unknown:
            raise InputError(f"not learnable parameters of the network: {', '.join(unknown)}")
    missing = sorted(set(targets) - set(values))
    if missing:
        raise InputError(f"no values for learnable parameters {', '.join(missing)}")
    for name, value in values.items():
        network[name] = value
