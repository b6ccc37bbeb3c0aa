"""A cell's entry as a Python builtin: ``call()`` runs the cell on one instance and returns
its status, a native call with the GIL released, for a fifth of what ctypes costs.

A ctypes function converts its arguments and result through Python objects and sets up a
foreign call at every call: about 250 ns on the benchmarks' 2-core VM, a quarter of the
guide's model's whole ``compute()``. A builtin function (a ``PyCFunction`` object, as a C
extension's functions are) is called by the interpreter directly. Its C function here is one
of this module's LLVM code, compiled once per process::

    PyObject *myelin_call_cell(PyObject *self, PyObject *unused)

where ``self`` is a NumPy array of two words, the cell's entry address and the instance's
address (read through the array's data pointer, as :func:`myelin.memory.address` reads it):
it releases the GIL, calls ``entry(instance)``, takes the GIL back and returns the status as
a Python int. The function object keeps ``self`` alive.
"""

import ctypes
import threading

import numpy as np
from llvmlite import ir

from myelin.codegen.llvm import engine, irutil
from myelin.codegen.llvm import target as targets
from myelin.memory import DATA_OFFSET

_METH_NOARGS = 0x0004
_API = ("PyEval_SaveThread", "PyEval_RestoreThread", "PyLong_FromLong")


class _MethodDef(ctypes.Structure):
    """CPython's ``PyMethodDef``: what a builtin function object calls."""

    _fields_ = [("name", ctypes.c_char_p), ("function", ctypes.c_void_p),
                ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


def _module():
    """The LLVM module of ``myelin_call_cell``."""
    module = ir.Module("myelin_pycall")
    pointer, word = irutil.PTR, irutil.I64
    save = ir.Function(module, ir.FunctionType(pointer, []), "PyEval_SaveThread")
    restore = ir.Function(module, ir.FunctionType(ir.VoidType(), [pointer]),
                          "PyEval_RestoreThread")
    to_int = ir.Function(module, ir.FunctionType(pointer, [word]), "PyLong_FromLong")
    function = ir.Function(module, ir.FunctionType(pointer, [pointer, pointer]),
                           "myelin_call_cell")
    b = ir.IRBuilder(function.append_basic_block())
    data = b.gep(function.args[0], [irutil.i64(DATA_OFFSET)], source_etype=irutil.I8)
    words = b.load(data, typ=pointer)
    entry = b.load(words, typ=pointer)
    instance = b.load(b.gep(words, [irutil.i64(1)], source_etype=word), typ=pointer)
    state = b.call(save, [])
    status = irutil.call_pointer(b, entry, ir.FunctionType(irutil.I32, [pointer]), [instance])
    b.call(restore, [state])
    b.ret(b.call(to_int, [b.sext(status, word)]))
    return module


class _Builtins:
    """The compiled ``myelin_call_cell`` and the method definition its builtins share."""

    def __init__(self):
        symbols = {name: ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
                   for name in _API}
        self._code = engine.compile_module(_module(), targets.host(), symbols=symbols)
        self._definition = _MethodDef(b"call", self._code.address("myelin_call_cell"),
                                      _METH_NOARGS, None)
        self._new = ctypes.pythonapi.PyCFunction_NewEx
        self._new.restype = ctypes.py_object
        self._new.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]

    def make(self, entry, instance):
        return self._new(ctypes.addressof(self._definition),
                         np.array([entry, instance], np.uint64), None)


_builtins = None
_lock = threading.Lock()


def caller(entry, instance):
    """A builtin ``call()`` that runs the cell whose native entry is at address ``entry`` on
    the instance memory at address ``instance`` and returns the entry's status (an int); the
    caller keeps that memory alive while it may be called."""
    global _builtins
    if _builtins is None:
        with _lock:
            if _builtins is None:
                _builtins = _Builtins()
    return _builtins.make(entry, instance)
