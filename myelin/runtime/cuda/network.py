"""The GPU runtime: networks whose cells compute in device memory.

:func:`compile` plans a flow for the GPU of a driver (default: the process's
:class:`~myelin.runtime.cuda.cudadriver.CudaDriver`), compiles its module with NVRTC for that
device's architecture and returns a :class:`CudaNetwork`. The network loads the module once,
and uploads its globals (weights) once. Each :class:`CudaInstance` has one block of device
memory laid out by the plan, and a stream of its own. ``compute()`` queues the cell's kernels
and GEMMs in plan order on that stream; a cell with index checks (Gather) waits at the end to
read its status words and raises InputError naming the step, as on the CPU.

The API is the CPU runtime's (:mod:`myelin.runtime.network`; :class:`CudaNetwork` and
:class:`CudaCell` share its code): ``net.cell(name)``, ``cell.instance()``, ``data[x] = array``
(one copy to the device), ``data[y]`` (a :class:`~myelin.runtime.cuda.tensor.DeviceTensor`:
``.numpy()`` copies to the host, ``__cuda_array_interface__`` and DLPack share the device
buffer), ``data.compute()``, ``data.clear()``. Nothing is copied unless asked for.
"""

import functools
import weakref

import numpy as np

from myelin import optimize
from myelin.codegen.cuda import module as modules
from myelin.codegen.cuda import planner
from myelin.codegen.cuda.kernels import GemmCall, KernelCode
from myelin.codegen.cuda.target import CudaTarget
from myelin.errors import FlowError, InputError
from myelin.flow import dtypes
from myelin.plan.cell import CONSTANT
from myelin.runtime.cuda.driver import Arguments, column_major
from myelin.runtime.cuda.tensor import DeviceTensor
from myelin.runtime.network import Cell, Network

_STATUS = np.dtype(np.int32)     # a kernel's status word


def compile(flow, driver=None, opt_level=optimize.DEFAULT_LEVEL, reuse_memory=True,
            disable_passes=(), nvrtc_options=()):
    """Compile every function of ``flow`` for the GPU of ``driver``; returns a CudaNetwork.
    Without a usable GPU, raises DeviceError saying why."""
    if driver is None:
        from myelin.runtime.cuda.cudadriver import default_driver
        driver = default_driver()
    target = CudaTarget.from_capability(*driver.capability)
    plan = planner.plan(flow, target, opt_level, reuse_memory, disable_passes)
    return CudaNetwork(plan, modules.build(plan.kernels(), target, options=nvrtc_options),
                       driver)


def _release(driver, stream, addresses):
    driver.destroy_stream(stream)
    for address in addresses:
        driver.free(address)


class CudaNetwork(Network):
    """A :class:`~myelin.codegen.cuda.planner.CudaPlan` on ``driver``'s GPU, its ``module``
    loaded and its globals in device memory (constants uploaded, learnables zero)."""

    def __init__(self, plan, module, driver):
        self.driver = driver
        self.plan = plan
        functions = driver.load(module)
        if any(isinstance(item, GemmCall) for cell in plan.cells for _, items in cell.work
               for item in items):
            driver.enable_gemm()
        self.stream = driver.create_stream()
        addresses = {name: driver.allocate(spec.size) for name, spec in plan.globals.items()}
        weakref.finalize(self, _release, driver, self.stream, list(addresses.values()))
        globals_ = {}
        for name, spec in plan.globals.items():
            globals_[name] = spec, DeviceTensor(spec, addresses[name], driver, self.stream, self)
            if spec.kind == CONSTANT:
                data = np.asarray(spec.var.data)
                if data.size != spec.elements:
                    raise FlowError(f"constant {name} has {data.size} elements, its shape "
                                    f"{list(spec.shape)} needs {spec.elements}")
                driver.upload(addresses[name], np.ascontiguousarray(
                    data.reshape(spec.shape), dtypes.to_numpy(spec.dtype)), self.stream)
            else:
                driver.zero(addresses[name], spec.size, self.stream)
        driver.synchronize(self.stream)
        cells = [CudaCell(cell, functions, driver) for cell in plan.cells]
        super().__init__(cells, globals_, module, plan.target, plan.flow)

    def address(self, name):
        """The device address of global tensor ``name``."""
        return self._globals[name][1].address

    def tensor(self, key):
        """The DeviceTensor of a global tensor (constant or learnable parameter)."""
        return self._global(key)[1]

    def __getitem__(self, key):
        tensor = self._global(key)[1]
        return tensor.numpy().item() if tensor.rank() == 0 else tensor

    def __setitem__(self, key, value):
        """Copy ``value`` to a learnable global, for every instance's next compute."""
        self._global(key)[1].assign(value)
        self.driver.synchronize(self.stream)


class CudaCell(Cell):
    """A cell of a CudaNetwork: the layout of its instance block and its ``work``, (step,
    KernelCode, function, launch configuration) or (step, GemmCall, None, None) in order;
    ``checks`` are the steps of the kernels with a status word, in order."""

    def __init__(self, planned, functions, driver):
        super().__init__(planned.name, planned.tensors, planned.steps, None, *planned.sizes,
                         planner.GPU_ALIGNMENT)
        self.work, self.checks = [], []
        for step, items in planned.work:
            for item in items:
                if isinstance(item, KernelCode):
                    function = functions[item.name]
                    self.work.append((step, item, function,
                                      driver.configure(function, item.launch)))
                    if item.status:
                        self.checks.append(step)
                else:
                    self.work.append((step, item, None, None))

    def instance(self):
        """A new instance: a zeroed block of device memory and a stream."""
        return CudaInstance(self)


class CudaInstance:
    """One set of a CudaCell's tensors in device memory, with a stream of its own; instances
    compute independently. A reference input gets a device buffer of its own."""

    def __init__(self, cell):
        self.cell = cell
        network = cell.network
        self._driver = driver = network.driver
        self._network = network
        self.stream = driver.create_stream()
        self.address = driver.allocate(cell.instance_size)
        self._references = {id(t): driver.allocate(t.size) for t in cell.tensors if t.ref}
        self._status = driver.allocate(_STATUS.itemsize * len(cell.checks))
        weakref.finalize(self, _release, driver, self.stream,
                         [self.address, self._status, *self._references.values()])
        self.clear()
        self._calls = self._prepare()

    def _device_address(self, spec):
        root = spec.root()
        if root.is_global:
            return self._network.address(root.name)
        if root.ref:
            return self._references[id(root)]
        return self.address + root.offset

    def _prepare(self):
        """The driver calls of compute(), bound to this instance's memory and stream."""
        calls, checks = [], 0
        for _, item, function, configuration in self.cell.work:
            if function is None:
                gemm = column_major(item, *map(self._device_address, (item.a, item.b, item.c)))
                calls.append(functools.partial(self._driver.gemm, gemm, self.stream))
                continue
            pointers = [self._device_address(param.tensor) for param in item.params]
            if item.status:
                pointers.append(self._status + _STATUS.itemsize * checks)
                checks += 1
            calls.append(functools.partial(self._driver.launch, function, *configuration,
                                           self.stream, Arguments(pointers)))
        return calls

    def compute(self):
        """Queue the cell's work on the instance's stream. Reading a tensor waits for it; a
        cell with index checks waits here and raises InputError if a step found an index out
        of range (the outputs of that step and later ones are then unspecified)."""
        for call in self._calls:
            call()
        if self.cell.checks:
            status = np.empty(len(self.cell.checks), _STATUS)
            self._driver.download(status, self._status, self.stream)
            self._driver.synchronize(self.stream)
            if status.any():
                self._driver.zero(self._status, status.nbytes, self.stream)
                step = self.cell.checks[int(np.flatnonzero(status)[0])]
                raise InputError(f"op {step.name} ({step.type}): an index is out of range "
                                 f"(found at run time)")

    def synchronize(self):
        """Wait until the work queued on the instance's stream is done."""
        self._driver.synchronize(self.stream)

    def clear(self):
        """Set every tensor of the instance to zero."""
        self._driver.zero(self.address, self.cell.instance_size, self.stream)
        self._driver.zero(self._status, _STATUS.itemsize * len(self.cell.checks), self.stream)
        for spec in self.cell.tensors:
            if spec.ref:
                self._driver.zero(self._references[id(spec)], spec.size, self.stream)

    def _resolve(self, key):
        return self.cell.spec(key)

    def tensor(self, key):
        """The DeviceTensor of a tensor of this instance, by Variable, name, alias or index."""
        spec = self._resolve(key)
        return DeviceTensor(spec, self._device_address(spec), self._driver, self.stream, self)

    def array(self, key):
        """A host copy of a tensor of this instance."""
        return self.tensor(key).numpy()

    def __getitem__(self, key):
        tensor = self.tensor(key)
        return tensor.numpy().item() if tensor.rank() == 0 else tensor

    def __setitem__(self, key, value):
        self.tensor(key).assign(value)

    def __str__(self):
        return "\n".join(f"{spec.name} = {self.array(spec.name)}" for spec in self.cell.tensors)
