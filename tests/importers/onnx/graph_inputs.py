"""The inputs of a one-node test model: names, graph inputs, initializers and feeds."""

import numpy as np
from onnx import helper, numpy_helper


def graph_inputs(inputs, initializers=()):
    """(input names, graph input infos, initializers, feeds) for ``inputs``, a list of
    (name, array) (None for an absent optional input, whose name is ""); names in
    ``initializers`` become initializers, the others graph inputs fed their arrays."""
    names, infos, inits, feeds = [], [], [], {}
    for name, value in inputs:
        if value is None:
            names.append("")
            continue
        names.append(name)
        value = np.asarray(value)
        if name in initializers:
            inits.append(numpy_helper.from_array(value, name))
        else:
            infos.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape))
            feeds[name] = value
    return names, infos, inits, feeds
