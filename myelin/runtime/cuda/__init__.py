"""The GPU runtime: networks planned and compiled by :mod:`myelin.codegen.cuda`, computing in
device memory.

:mod:`~myelin.runtime.cuda.network` loads a network's module once, keeps its globals and each
instance's block in device memory and queues the kernels and library calls in plan order on
the instance's stream, through a :class:`~myelin.runtime.cuda.driver.Driver`: the CUDA driver
API and cuBLAS on a real GPU (:mod:`~myelin.runtime.cuda.cudadriver`), or the tests'
emulated driver. ``data[x]`` is a :class:`~myelin.runtime.cuda.tensor.DeviceTensor`
(copies to and from the host, ``__cuda_array_interface__`` and DLPack,
:mod:`~myelin.runtime.cuda.dlpack`). The public face is :mod:`myelin.cuda`.
"""
