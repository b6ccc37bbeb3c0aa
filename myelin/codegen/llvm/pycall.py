"""A cell's entry as Python builtins: a native call with the GIL released, for a fraction of
what ctypes and Python-level binding cost.

A ctypes function converts its arguments and result through Python objects and sets up a
foreign call at every call: about 250 ns on the benchmarks' 2-core VM, a quarter of the
guide's model's whole ``compute()``. A builtin function (a ``PyCFunction`` object, as a C
extension's functions are) is called by the interpreter directly. Its C functions here are
this module's LLVM code, compiled once per process:

- ``PyObject *myelin_call_cell(PyObject *self, PyObject *unused)`` (:func:`caller`): runs
  the cell on its instance and returns the status;
- ``PyObject *myelin_run_cell(PyObject *self, PyObject *const *args, Py_ssize_t nargs)``
  (:func:`runner`): checks that each argument the cell reads in place is an ``ndarray`` of
  its dtype and shape, C-contiguous, writes the arrays' addresses into the instance, runs
  the cell and returns the status, or -1 (computing nothing, writing nothing) if an argument
  does not pass. In Python those checks and the binding took 200 ns an input.

``self`` is a NumPy array of 64-bit words, read through the array's data pointer: the entry's
address, the instance's address, and for the runner a table of the inputs (below). The
function object keeps ``self`` alive. The runner reads NumPy's array objects by the offsets of
``PyArrayObject_fields`` in NumPy's C API (data, nd, dimensions, descr, flags), fixed by its
ABI; :func:`_numpy_layout` checks them against an array once per process.
"""

import ctypes
import threading

import numpy as np
from llvmlite import ir

from myelin.codegen.llvm import engine, irutil
from myelin.codegen.llvm import target as targets
from myelin.errors import CompileError
from myelin.memory import DATA_OFFSET

_METH_NOARGS = 0x0004
_METH_FASTCALL = 0x0080
_API = ("PyEval_SaveThread", "PyEval_RestoreThread", "PyLong_FromLong")

# Byte offsets in an object: its type (the object header's last word), and in an ndarray
# (NumPy's PyArrayObject_fields, after the header) the number of dimensions (an int), the
# dimensions (a pointer to npy_intp), the descr (the dtype object) and the flags (an int).
_TYPE = DATA_OFFSET - 8
_NDIM, _DIMENSIONS, _DESCR, _FLAGS = DATA_OFFSET + 8, DATA_OFFSET + 16, DATA_OFFSET + 40, \
    DATA_OFFSET + 48
_C_CONTIGUOUS = 0x0001          # NPY_ARRAY_C_CONTIGUOUS
# The runner's table: entry, instance, the ndarray type, the argument count, the inputs read
# in place, then a record per such input (position, dtype, dimensions, the byte offset of its
# address in the instance, the index of its first dimension in the table), then the inputs'
# dimensions.
_HEADER, _RECORD = 5, 5


class _MethodDef(ctypes.Structure):
    """CPython's ``PyMethodDef``: what a builtin function object calls."""

    _fields_ = [("name", ctypes.c_char_p), ("function", ctypes.c_void_p),
                ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


class _Emitter:
    """Builds the module's functions; ``word(pointer, index)`` loads the index-th 64-bit
    word at a pointer, ``at(pointer, offset)`` the pointer ``offset`` bytes on."""

    def __init__(self):
        self.module = ir.Module("myelin_pycall")
        pointer, word = irutil.PTR, irutil.I64
        self.save = ir.Function(self.module, ir.FunctionType(pointer, []), "PyEval_SaveThread")
        self.restore = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [pointer]),
                                   "PyEval_RestoreThread")
        self.to_int = ir.Function(self.module, ir.FunctionType(pointer, [word]),
                                  "PyLong_FromLong")

    @staticmethod
    def word(b, pointer, index, typ=irutil.I64):
        if not isinstance(index, int) or index:
            pointer = b.gep(pointer, [irutil.i64(index) if isinstance(index, int) else index],
                            source_etype=irutil.I64)
        return b.load(pointer, typ=typ)

    def table(self, b, obj):
        """The words of the NumPy array ``obj`` (the builtin's ``self``)."""
        return b.load(irutil.byte_ptr(b, obj, DATA_OFFSET), typ=irutil.PTR)

    def compute(self, b, table):
        """Run the entry (table word 0) on the instance (word 1), the GIL released; return
        the status as a Python int."""
        entry = self.word(b, table, 0, irutil.PTR)
        instance = self.word(b, table, 1, irutil.PTR)
        state = b.call(self.save, [])
        status = irutil.call_pointer(b, entry, ir.FunctionType(irutil.I32, [irutil.PTR]),
                                     [instance])
        b.call(self.restore, [state])
        b.ret(b.call(self.to_int, [b.sext(status, irutil.I64)]))

    def call_cell(self):
        function = ir.Function(self.module, ir.FunctionType(irutil.PTR, [irutil.PTR] * 2),
                               "myelin_call_cell")
        b = ir.IRBuilder(function.append_basic_block())
        self.compute(b, self.table(b, function.args[0]))

    def run_cell(self):
        word = irutil.I64
        function = ir.Function(self.module, ir.FunctionType(irutil.PTR, [irutil.PTR] * 2 + [word]),
                               "myelin_run_cell")
        self_, args, count = function.args
        b = ir.IRBuilder(function.append_basic_block("entry"))
        refuse = function.append_basic_block("refuse")
        table = self.table(b, self_)
        inputs = self.word(b, table, 4)
        self._check(b, b.icmp_unsigned("==", count, self.word(b, table, 3)), refuse)

        def record(index, field):
            return self.word(b, table, b.add(b.mul(index, irutil.i64(_RECORD)),
                                             irutil.i64(_HEADER + field)))

        def argument(index):
            return self.word(b, args, record(index, 0), irutil.PTR)

        with irutil.for_range(b, 0, inputs, name="check") as index:
            array = argument(index)
            ndim = record(index, 2)
            checks = [
                (b.load(irutil.byte_ptr(b, array, _TYPE), typ=word), self.word(b, table, 2)),
                (b.load(irutil.byte_ptr(b, array, _DESCR), typ=word), record(index, 1)),
                (b.zext(b.load(irutil.byte_ptr(b, array, _NDIM), typ=irutil.I32), word), ndim)]
            for value, wanted in checks:
                self._check(b, b.icmp_unsigned("==", value, wanted), refuse)
            flags = b.load(irutil.byte_ptr(b, array, _FLAGS), typ=irutil.I32)
            contiguous = b.and_(flags, ir.Constant(irutil.I32, _C_CONTIGUOUS))
            self._check(b, b.icmp_unsigned("!=", contiguous, ir.Constant(irutil.I32, 0)), refuse)
            dimensions = b.load(irutil.byte_ptr(b, array, _DIMENSIONS), typ=irutil.PTR)
            first = record(index, 4)
            with irutil.for_range(b, 0, ndim, name="dimension") as d:
                self._check(b, b.icmp_unsigned("==", self.word(b, dimensions, d),
                                               self.word(b, table, b.add(first, d))), refuse)
        instance = self.word(b, table, 1, irutil.PTR)
        with irutil.for_range(b, 0, inputs, name="bind") as index:
            data = b.load(irutil.byte_ptr(b, argument(index), DATA_OFFSET), typ=word)
            b.store(data, irutil.byte_ptr(b, instance, record(index, 3)))
        self.compute(b, table)
        b.position_at_end(refuse)
        b.ret(b.call(self.to_int, [irutil.i64(-1)]))

    @staticmethod
    def _check(b, condition, refuse):
        passed = b.append_basic_block("passed")
        b.cbranch(condition, passed, refuse)
        b.position_at_end(passed)


def _numpy_layout():
    """CompileError unless an array's fields are where the runner reads them."""
    array = np.zeros((3, 5), np.float32)[:, :4]
    word, int32 = ctypes.c_uint64.from_address, ctypes.c_int32.from_address
    base = id(array)
    dimensions = word(base + _DIMENSIONS).value
    found = (word(base + _TYPE).value, word(base + DATA_OFFSET).value, int32(base + _NDIM).value,
             word(dimensions).value, word(dimensions + 8).value, word(base + _DESCR).value,
             int32(base + _FLAGS).value & _C_CONTIGUOUS)
    wanted = (id(np.ndarray), array.ctypes.data, 2, 3, 4, id(array.dtype), 0)
    if found != wanted:
        raise CompileError(f"this NumPy ({np.__version__}) lays out its arrays otherwise than "
                           f"myelin reads them (found {found}, expected {wanted})")


class _Builtins:
    """The compiled functions and the method definitions their builtins share."""

    def __init__(self):
        _numpy_layout()
        emitter = _Emitter()
        emitter.call_cell()
        emitter.run_cell()
        symbols = {name: ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
                   for name in _API}
        # (without LLVM's passes: 12 ms of every process's first compile instead of 20, and
        # the guide's model's run is as fast)
        self._code = engine.compile_module(emitter.module, targets.host(), opt_level=0,
                                           symbols=symbols)
        self.call = _MethodDef(b"call", self._code.address("myelin_call_cell"), _METH_NOARGS)
        self.run = _MethodDef(b"run", self._code.address("myelin_run_cell"), _METH_FASTCALL)
        self._new = ctypes.pythonapi.PyCFunction_NewEx
        self._new.restype = ctypes.py_object
        self._new.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]

    def make(self, definition, words):
        return self._new(ctypes.addressof(definition), np.array(words, np.uint64), None)


_builtins = None
_lock = threading.Lock()


def _compiled():
    global _builtins
    if _builtins is None:
        with _lock:
            if _builtins is None:
                _builtins = _Builtins()
    return _builtins


def caller(entry, instance):
    """A builtin ``call()`` that runs the cell whose native entry is at address ``entry`` on
    the instance memory at address ``instance`` and returns the entry's status (an int); the
    caller keeps that memory alive while it may be called."""
    code = _compiled()
    return code.make(code.call, [entry, instance])


def runner(entry, instance, count, inputs):
    """A builtin ``run(*arrays)`` taking ``count`` arguments that binds some to reference
    inputs of the instance and runs the cell as :func:`caller`'s call does. ``inputs`` lists
    (position, dtype, shape, offset) per input read in place: the argument at ``position``
    must be an ``ndarray`` (not a subclass) of that NumPy ``dtype`` object (the very object)
    and ``shape``, C-contiguous; its address goes to the word at byte ``offset`` of the
    instance. ``run`` returns the status, or -1 if an argument does not pass (nothing is
    bound then, and nothing computed). The caller keeps the arrays alive while the instance
    may read them."""
    code = _compiled()
    words = [entry, instance, id(np.ndarray), count, len(inputs)]
    dimensions = _HEADER + _RECORD * len(inputs)
    for position, dtype, shape, offset in inputs:
        words += [position, id(dtype), len(shape), offset, dimensions]
        dimensions += len(shape)
    for _, _, shape, _ in inputs:
        words += list(shape)
    return code.make(code.run, words)
