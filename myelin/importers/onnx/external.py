"""External data: ONNX tensors whose bytes live in files beside the model.

A tensor stored outside the model names a file by a location relative to a base directory:
the folder of the model's file, or, for a model given as bytes or a ModelProto (which has no
folder), the ``base_dir`` its caller gives. The location must name a file inside that
directory: an absolute location, or one that leads out of it (``../``, a symbolic link), is
refused, never read. The bytes are read into a copy of the model, so a ModelProto of the
caller's is left as it was.
"""

import os

import onnx
from onnx import external_data_helper

from myelin.errors import FlowFormatError, InputError


def _external_tensors(model):
    return [tensor for tensor in external_data_helper._get_all_tensors(model)
            if external_data_helper.uses_external_data(tensor)]


def _location(tensor):
    for entry in tensor.external_data:
        if entry.key == "location":
            return entry.value
    return ""


def _check_location(tensor, base_dir):
    """Refuse a location that is not a file inside ``base_dir``."""
    location = _location(tensor)
    where = f"tensor {tensor.name!r} keeps its data in external file {location!r}"
    if not location or os.path.isabs(location) or os.path.splitdrive(location)[0]:
        raise FlowFormatError(f"{where}: the location must be a path relative to the model's "
                              f"directory")
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, path]) != root:
        raise FlowFormatError(f"{where}, which is outside the model's directory {base_dir}")


def load(model, base_dir, copy=True):
    """``model`` with the data of its external tensors read from files in ``base_dir`` (a
    copy of it when ``copy`` and it has any; ``model`` itself when it has none). Raises
    InputError when it has some and ``base_dir`` is None, FlowFormatError for a location
    outside ``base_dir`` or a file that cannot be read as the tensor's data."""
    tensors = _external_tensors(model)
    if not tensors:
        return model
    if base_dir is None:
        names = ", ".join(repr(t.name) for t in tensors[:3]) + (", ..." if len(tensors) > 3
                                                                 else "")
        raise InputError(f"tensors {names} of the model keep their data in external files: "
                         f"give the directory holding them (base_dir=...), or load the model "
                         f"from its file")
    base_dir = os.fspath(base_dir)
    if not os.path.isdir(base_dir):
        raise InputError(f"base_dir {base_dir} is not a directory")
    for tensor in tensors:
        _check_location(tensor, base_dir)
    if copy:
        model, original = onnx.ModelProto(), model
        model.CopyFrom(original)
    try:
        external_data_helper.load_external_data_for_model(model, base_dir)
    except Exception as exc:  # onnx raises ValidationError, ValueError, OSError
        raise FlowFormatError(f"cannot read the external data of the model from {base_dir}: "
                              f"{exc}") from None
    return model
