"""DLPack capsules of device tensors, so other frameworks take a GPU tensor without a copy.

:func:`capsule` makes a ``"dltensor"`` PyCapsule holding a (legacy, unversioned)
``DLManagedTensor`` over device memory, made with ctypes: the struct, its shape array and the
object owning the memory are kept alive in :data:`_LIVE` until the consumer calls the deleter,
or until the capsule is destroyed unconsumed (then its destructor calls the deleter).
"""

import ctypes

import numpy as np

KDL_CUDA = 2
_KINDS = {"i": 0, "u": 1, "f": 2, "b": 6}       # DLDataTypeCode by NumPy kind
_NAME = b"dltensor"


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    """DLPack's ``DLManagedTensor``: a DLTensor, the producer's context, its deleter."""


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", _DELETER)]

_LIVE = {}     # address of a DLManagedTensor -> (it, its shape array, the memory's owner)


@_DELETER
def _delete(managed):
    _LIVE.pop(ctypes.addressof(managed.contents), None)


def _api(name, result, *arguments):
    """A C-API function of Python's own, with a prototype of this module's."""
    return ctypes.PYFUNCTYPE(result, *arguments)((name, ctypes.pythonapi))


_capsule_new = _api("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                    ctypes.c_void_p)
_capsule_valid = _api("PyCapsule_IsValid", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
_capsule_pointer = _api("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p,
                        ctypes.c_char_p)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _destroy_capsule(capsule):
    if _capsule_valid(capsule, _NAME):      # never consumed
        _delete(ctypes.cast(_capsule_pointer(capsule, _NAME), ctypes.POINTER(DLManagedTensor)))


def capsule(address, shape, dtype, device_id, owner):
    """A DLPack capsule of the C-contiguous ``shape`` array of NumPy ``dtype`` at device
    ``address`` on CUDA device ``device_id``; ``owner`` is kept alive while it is used."""
    dtype = np.dtype(dtype)
    sizes = np.array(shape, np.int64)
    managed = DLManagedTensor()
    managed.dl_tensor = DLTensor(address, DLDevice(KDL_CUDA, device_id), len(shape),
                                 DLDataType(_KINDS[dtype.kind], dtype.itemsize * 8, 1),
                                 sizes.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), None, 0)
    managed.deleter = _delete
    pointer = ctypes.addressof(managed)
    _LIVE[pointer] = (managed, sizes, owner)
    return _capsule_new(pointer, _NAME, ctypes.cast(_destroy_capsule, ctypes.c_void_p))
