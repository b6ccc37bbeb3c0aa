"""Compiled networks and how to compute with them.

A :class:`Network` holds the compiled cells of a flow and the global tensors (constants and
learnable parameters). A :class:`Cell` is one compiled function: its code and the layout of its
instance block. An :class:`Instance` is one such block of memory; ``compute()`` is a single call
into native code (the GIL is released, so instances compute concurrently on threads; one
instance computes on one thread at a time).
:class:`Tensor` is a zero-copy view of one tensor in an instance or of a global.
"""

import reprlib

import numpy as np

from myelin.codegen.llvm import pycall
from myelin.errors import InputError
from myelin.flow import dtypes
from myelin.flow.graph import Variable
from myelin.memory import address, aligned_zeros


class Tensor:
    """A view of one tensor: element access ``t[i, j]``, and NumPy's array interface, so
    ``np.asarray(t)`` is a writeable view without a copy."""

    def __init__(self, name, array, owner):
        self._name = name
        self._array = array
        self._owner = owner  # keeps the memory alive

    def name(self):
        return self._name

    def rank(self):
        return self._array.ndim

    def shape(self):
        return list(self._array.shape)

    def type(self):
        return dtypes.from_numpy(self._array.dtype)

    def numpy(self):
        """The NumPy view (no copy)."""
        return self._array

    @property
    def __array_interface__(self):
        if self._array.dtype.kind == "V":   # bfloat16: the interface's type is only its size,
            raise AttributeError("__array_interface__")     # so NumPy asks __array__
        return self._array.__array_interface__

    def __array__(self, dtype=None, copy=None):
        if copy:
            return np.array(self._array, dtype=dtype)
        return self._array if dtype is None else self._array.astype(dtype, copy=False)

    def __len__(self):
        return len(self._array) if self._array.ndim else 1

    def __iter__(self):
        """The rows (elements of a vector; the one value of a scalar)."""
        if not self._array.ndim:
            yield self._array.item()
            return
        for index in range(len(self._array)):
            yield self[index]

    def __getitem__(self, index):
        try:
            value = self._array[index]
        except (IndexError, TypeError, ValueError) as error:
            raise InputError(f"tensor {self._name} of shape {self.shape()}: index {index!r}: "
                             f"{error}") from None
        return value.item() if isinstance(value, np.generic) else value

    def __setitem__(self, index, value):
        try:
            self._array[index] = value
        except (IndexError, TypeError, ValueError, OverflowError) as error:
            raise InputError(f"tensor {self._name} of shape {self.shape()}: cannot set "
                             f"{index!r} to the value given: {error}") from None

    def __repr__(self):
        return f"Tensor({self._name}: {self.type()}{self.shape()})"

    def __str__(self):
        return str(self._array)


def tensor_name(key):
    """The name a tensor key stands for: a name, or a Variable's name; InputError for any
    other key (a bool, a float, None, an array, ...)."""
    if isinstance(key, str):
        return key
    if isinstance(key, Variable):
        return key.name
    raise InputError(f"tensors are looked up by Variable or name (in an instance also by "
                     f"index), not by {type(key).__name__} {reprlib.repr(key)}")


def coerce_value(spec_name, spec_dtype, shape, value):
    """``value`` as an array of the tensor's dtype and shape, or InputError saying why not."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as error:   # ragged lists, objects NumPy cannot take
        raise InputError(f"tensor {spec_name} cannot take {type(value).__name__} "
                         f"{reprlib.repr(value)}: {error}") from None
    target = dtypes.to_numpy(spec_dtype)
    if array.dtype != target and not np.can_cast(array.dtype, target, casting="same_kind"):
        raise InputError(f"tensor {spec_name} holds {spec_dtype}; cannot take {array.dtype} "
                         f"values")
    if array.shape != shape:
        if array.size == int(np.prod(shape)) and array.ndim == 0:
            array = np.broadcast_to(array, shape)
        else:
            raise InputError(f"tensor {spec_name} has shape {list(shape)}, "
                             f"got a value of shape {list(array.shape)}")
    return array


class Network:
    """A compiled flow: cells by function name and the global tensors they share."""

    def __init__(self, cells, globals_, code, target, flow=None, packed=()):
        self._cells = {cell.name: cell for cell in cells}
        self._globals = globals_   # name -> (TensorSpec, ndarray)
        self._global_names = {}
        for name, (spec, _) in globals_.items():
            for key in [name] + list(spec.aliases):
                self._global_names.setdefault(key, name)
        self._code = code          # keeps the machine code alive
        self._packed = list(packed)  # arrays the code reads (packed weights)
        self.target = target
        self.flow = flow
        for cell in cells:
            cell.network = self

    @property
    def cells(self):
        return list(self._cells.values())

    def cell(self, name):
        """The cell compiled from function ``name``."""
        try:
            return self._cells[name]
        except KeyError:
            raise InputError(f"network has no cell {name!r}; cells: "
                             f"{', '.join(self._cells) or 'none'}") from None

    def _global(self, key):
        name = tensor_name(key)
        resolved = self._global_names.get(name)
        if resolved is None:
            raise InputError(f"network has no global tensor {name!r}")
        return self._globals[resolved]

    def tensor(self, key):
        """A view of a global tensor (constant or learnable parameter)."""
        spec, array = self._global(key)
        return Tensor(spec.name, array, self)

    def __getitem__(self, key):
        spec, array = self._global(key)
        return array.item() if array.ndim == 0 else Tensor(spec.name, array, self)

    def __setitem__(self, key, value):
        spec, array = self._global(key)
        if not array.flags.writeable:
            raise InputError(f"global tensor {spec.name} is a constant, compiled into the "
                             f"code; make it a learnable variable to change it")
        array[...] = coerce_value(spec.name, spec.dtype, array.shape, value)

    def globals(self):
        return list(self._globals)

    # Saving and pickling (myelin.runtime.serialize): the machine code, the globals' values
    # and the cells' layout, loaded in another process without compiling.
    def __reduce__(self):
        from myelin.runtime import serialize
        return serialize.network_from_bytes, (serialize.network_bytes(self),)

    def save(self, path):
        """Write the network to the file ``path``: its code, globals (current values) and
        cells, which :meth:`load` loads in any process on a CPU with the features it was
        compiled for, without compiling (see :mod:`myelin.runtime.serialize`)."""
        from myelin.runtime import serialize
        serialize.save(self, path)

    @classmethod
    def load(cls, path):
        """The network saved in the file ``path`` by :meth:`save`; SerializationError if the
        file is not one, is damaged, or needs CPU features this machine lacks."""
        from myelin.runtime import serialize
        return serialize.load(path, Network)


class Cell:
    """A compiled function: native code plus the layout of its instance memory, and, when
    compiled with ``Compiler(profile=True)``, the profile counters its code adds to."""

    def __init__(self, name, tensors, steps, address, instance_size, unshared_size,
                 alignment=64, counters=None):
        self.name = name
        self.network = None
        self.steps = steps
        self.instance_size = instance_size
        self.unshared_size = unshared_size
        self.instance_alignment = alignment
        self.address = address
        self._counters = counters  # int64 [1 + steps, 2] the code adds to, or None
        self._tensors = [t for t in tensors if not t.is_global]
        self._references = sum(1 for t in self._tensors if t.ref)
        self._index = {}
        for i, tensor in enumerate(self._tensors):
            for key in [tensor.name] + list(tensor.aliases):
                self._index.setdefault(key, i)

    @property
    def tensors(self):
        """The instance tensors of the cell (inputs, outputs and locals)."""
        return list(self._tensors)

    @property
    def inputs(self):
        return [t.name for t in self._tensors if t.kind == "input"]

    @property
    def outputs(self):
        return [t.name for t in self._tensors if t.kind == "output" or t.is_output]

    def index(self, key):
        """The parameter index of a tensor (faster lookups than by name)."""
        name = tensor_name(key)
        try:
            return self._index[name]
        except KeyError:
            raise InputError(f"cell {self.name} has no tensor {name!r}") from None

    def __contains__(self, key):
        return isinstance(key, (str, Variable)) and tensor_name(key) in self._index

    def position(self, key):
        """The index of a tensor given by Variable, name, alias or index; InputError for an
        index out of range or a key of another kind (bools are not indices)."""
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if not 0 <= key < len(self._tensors):
                raise InputError(f"cell {self.name} has no tensor index {key}")
            return int(key)
        return self.index(key)

    def spec(self, key):
        return self._tensors[self.position(key)]

    def instance(self):
        """A new instance: a zeroed block of memory for this cell's tensors."""
        return Instance(self)

    def __reduce__(self):     # (its network, and its name there)
        if self.network is None:
            raise InputError(f"cell {self.name} belongs to no network")
        return Network.cell, (self.network, self.name)

    @property
    def profiling(self):
        """True if the cell was compiled with a profiler (``Compiler(profile=True)``)."""
        return self._counters is not None

    def _profile_counters(self):
        if self._counters is None:
            raise InputError(f"cell {self.name} was compiled without profiling; compile it "
                             f"with Compiler(profile=True) to profile it")
        return self._counters

    def profile(self):
        """The :class:`~myelin.runtime.profile.Profile` of this cell: time per step, summed
        over every call of every instance since compiling or :meth:`reset_profile`."""
        from myelin.runtime.profile import Profile  # (it loads LLVM and the kernels)
        return Profile(self, self._profile_counters().copy())

    def reset_profile(self):
        """Set the profile counters to zero (calls running meanwhile may count in part)."""
        self._profile_counters().fill(0)

    def layout(self):
        """The instance layout and steps, in the format of the Myelin guide."""
        from myelin.runtime.layout import describe
        return describe(self)

    def __str__(self):
        return self.layout()

    def __repr__(self):
        return f"<Cell {self.name}: {len(self.steps)} steps, instance {self.instance_size} bytes>"


class Instance:
    """One set of the cell's tensors in memory; ``compute()`` runs the cell on it.

    A reference input (a variable flagged ``ref``) is not copied into the instance: an array
    of the caller's is bound to it (:meth:`bind`, or ``data[x] = array``) and the cell reads
    it in place.

    An instance is one set of tensors, so it computes on one thread at a time: ``compute()``
    raises InputError while it is computing on another thread. Threads compute at once on
    instances of their own (of one cell or several)."""

    def __init__(self, cell):
        self.cell = cell
        self._memory = aligned_zeros(max(cell.instance_size, 1), cell.instance_alignment)
        self._address = self._memory.ctypes.data
        # The native entry as a builtin: call() runs it on this instance, the GIL released.
        self._call = pycall.caller(cell.address, self._address)
        # A token that compute() takes for its native call: an atomic test-and-set (list.pop
        # and append), four times cheaper than a lock's non-blocking acquire and release.
        self._token = [True]
        self._views = {}
        self._bound = {}     # id of a reference input -> the array bound to it
        # The block as 64-bit words, where reference inputs keep their arrays' addresses.
        self._words = self._memory[:self._memory.size // 8 * 8].view(np.uint64)

    def __reduce__(self):
        from myelin.errors import SerializationError
        raise SerializationError(f"an instance of cell {self.cell.name} cannot be pickled: "
                                 f"pickle its network (or cell) and make an instance where "
                                 f"it is loaded")

    def compute(self):
        """Run the cell: one native call (the GIL is released meanwhile).

        Raises InputError if a reference input is not bound, if the instance is computing on
        another thread (use an instance per thread), or if a step found bad input (an index
        out of range); the outputs of that step and later ones are then unspecified."""
        if len(self._bound) < self.cell._references:
            missing = [t.name for t in self.cell._tensors
                       if t.ref and id(t) not in self._bound]
            raise InputError(f"cell {self.cell.name}: reference inputs {missing} are not bound "
                             f"(bind arrays with data.bind(name, array) or data[name] = array)")
        try:
            self._token.pop()
        except IndexError:
            raise InputError(f"this instance of cell {self.cell.name} is computing on another "
                             f"thread: an instance computes on one thread at a time (give "
                             f"each thread an instance of its own)") from None
        try:
            status = self._call()
        finally:
            self._token.append(True)
        if status:
            raise self.failure(status)

    def runner(self, count, keys):
        """A builtin ``run(*arrays)`` of ``count`` arguments that binds the argument at each
        position of ``keys`` (position -> reference input, by Variable, name, alias or index)
        to its input and computes as :meth:`compute` does, without its checks (its caller
        serializes its calls): it returns the cell's status (nonzero where a step found bad
        input, :meth:`failure` being compute()'s error for it), or -1, binding and computing
        nothing, if an argument is not an ``ndarray`` (not a subclass) of the input's very
        dtype object and shape, C-contiguous. ``keys`` names every reference input of the
        cell. The runner binds in native code, not as :meth:`bind` does: its caller keeps the
        arrays alive while they are read, and computes through the runner alone."""
        inputs = []
        for position, key in keys.items():
            spec = self.cell._tensors[self._resolve(key)]
            if not spec.ref:
                raise InputError(f"tensor {spec.name} is not a reference input")
            inputs.append((position, dtypes.to_numpy(spec.dtype), spec.shape, spec.offset))
        if len(inputs) != self.cell._references:
            raise InputError(f"cell {self.cell.name} has {self.cell._references} reference "
                             f"inputs: a runner binds them all")
        return pycall.runner(self.cell.address, self._address, count, inputs)

    def failure(self, status):
        """The InputError :meth:`compute` raises for the nonzero ``status`` of a call."""
        step = self.cell.steps[status - 1]
        return InputError(f"op {step.name} ({step.type}): an index is out of range "
                          f"(found at run time)")

    def clear(self):
        """Set every tensor of the instance to zero (reference inputs stay bound)."""
        self._memory.fill(0)
        for spec in self.cell._tensors:
            if id(spec) in self._bound:
                self._words[spec.offset // 8] = address(self._bound[id(spec)])

    def bind(self, key, array):
        """Make reference input ``key`` read ``array`` in place (no copy): a C-contiguous
        NumPy array of the tensor's dtype and shape, kept alive by the instance until another
        is bound. Raises InputError for any other tensor or array."""
        if not self.binder(key)(array):
            raise _unbindable(self.cell._tensors[self._resolve(key)], array)

    def binder(self, key):
        """A function ``bind(array)`` for binding arrays to reference input ``key`` at every
        call, the key resolved once: it binds an array that :meth:`bind` takes and returns
        True, or returns False, binding nothing, for one that bind refuses."""
        spec = self.cell._tensors[self._resolve(key)]
        if not spec.ref:
            raise InputError(f"tensor {spec.name} is not a reference input; assign its value "
                             f"with data[name] = value")
        dtype, shape, token = dtypes.to_numpy(spec.dtype), spec.shape, id(spec)
        words, slot, bound = self._words, spec.offset // 8, self._bound
        ndarray, read_address = np.ndarray, address     # (closure variables: found faster)

        def bind(array):
            if not (isinstance(array, ndarray) and
                    (array.dtype is dtype or array.dtype == dtype) and
                    array.shape == shape and array.flags.c_contiguous):
                return False
            if bound.get(token) is not array:
                words[slot] = read_address(array)
                bound[token] = array
            return True

        return bind

    def _view(self, index):
        spec = self.cell._tensors[index]
        root = spec.root()
        if root.ref:
            array = self._bound.get(id(root))
            if array is None:
                raise InputError(f"reference input {root.name} is not bound")
            return array.reshape(spec.shape)
        view = self._views.get(index)
        if view is None:
            dtype, shape = dtypes.to_numpy(spec.dtype), spec.shape
            if root.address is not None:
                view = self.cell.network.tensor(root.name).numpy().view(dtype).reshape(shape)
            else:
                view = np.ndarray(shape, dtype, buffer=self._memory, offset=root.offset)
            self._views[index] = view
        return view

    def _resolve(self, key):
        return self.cell.position(key)

    def array(self, key):
        """The NumPy view of a tensor of this instance (no copy), by Variable, name, alias or
        index."""
        return self._view(self._resolve(key))

    def tensor(self, key):
        """A Tensor view of a tensor of this instance, by Variable, name, alias or index."""
        index = self._resolve(key)
        return Tensor(self.cell._tensors[index].name, self._view(index), self)

    def __getitem__(self, key):
        index = self._resolve(key)
        view = self._view(index)
        if view.ndim == 0:
            return view.item()
        return Tensor(self.cell._tensors[index].name, view, self)

    def __setitem__(self, key, value):
        index = self._resolve(key)
        spec = self.cell._tensors[index]
        if spec.ref:     # bound in place when it can be, else to a converted copy
            array = coerce_value(spec.name, spec.dtype, spec.shape, value)
            self.bind(index, np.ascontiguousarray(array, dtypes.to_numpy(spec.dtype)))
            return
        view = self._view(index)
        view[...] = coerce_value(spec.name, spec.dtype, view.shape, value)

    def __str__(self):
        lines = []
        for index, spec in enumerate(self.cell._tensors):
            bound = not spec.root().ref or id(spec.root()) in self._bound
            lines.append(f"{spec.name} = {self._view(index) if bound else '(not bound)'}")
        return "\n".join(lines)


def _unbindable(spec, array):
    """The InputError for binding ``array`` to reference input ``spec``, which it does not
    fit."""
    target = dtypes.to_numpy(spec.dtype)
    if not isinstance(array, np.ndarray) or array.dtype != target:
        return InputError(f"reference input {spec.name} binds {spec.dtype} arrays, not "
                          f"{getattr(array, 'dtype', type(array).__name__)}")
    layout = "C-contiguous" if array.flags.c_contiguous else "non-contiguous"
    return InputError(f"reference input {spec.name} binds C-contiguous arrays of shape "
                      f"{list(spec.shape)}, not a {layout} one of shape {list(array.shape)}")
