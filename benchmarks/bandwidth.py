"""The read bandwidth of this machine from L2, L3 and memory, and how close myelin's products
with one row (a vector times a constant matrix: batch-1 layers, a decoder step) and the MLP
784-512-512-10 at batch 1 come to the bound that reading their weights implies.

The bound is measured with a loop of its own, not with a myelin kernel: an LLVM function
that sums a buffer in four vector accumulators (whole cache lines, nothing else to do),
compiled with llvmlite for this CPU and called through ctypes (which releases the GIL) from
one thread per core, each reading its own part, as a product split over threads does. Each
size is read over and over (``READ_BYTES`` in all a sample: reads of a few milliseconds
varied by 2x on a shared VM), so a buffer that fits a cache level is read from it.

Then ``y = x W`` for x [1, K] and a constant W [K, N] of the same sizes, compiled with 1
thread and with the default pool: its weight bytes over its latency, and that as a share of
the bound of the same size and thread count, each pair measured one after the other in
``ROUNDS`` rounds (a shared machine's speed drifts; the median share is printed).

Last, the MLP of issue 25 (784-512-512-10 with ReLUs and a softmax, batch 1, its weights
2.7 MB), built with the Builder as ONNX import makes it (matrix products with their bias and
ReLU as epilogues): its weight bytes over the latency of ``compute()`` and of the runner that
a model's ``run`` uses, against the bound of its weight bytes on the default threads.

Run: ``python benchmarks/bandwidth.py``.
"""

import ctypes
import os
import statistics
import sys
import threading
import time

import llvmlite.binding as llvm
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import time_call  # noqa: E402

import myelin  # noqa: E402
from myelin.codegen.llvm import threads as pool  # noqa: E402

SIZES = {"L2": 256 << 10, "L3": 4 << 20, "memory": 256 << 20}
READ_BYTES = 1 << 30        # bytes read by a sample of the bound
ROUNDS = 5
MLP = (784, 512, 512, 10)

_READ_IR = """
define float @read(ptr noalias %p, i64 %vectors, i64 %repeats) {
entry:
  br label %pass
pass:
  %r = phi i64 [0, %entry], [%r1, %passed]
  %b0 = phi <8 x float> [zeroinitializer, %entry], [%s0, %passed]
  %b1 = phi <8 x float> [zeroinitializer, %entry], [%s1, %passed]
  %b2 = phi <8 x float> [zeroinitializer, %entry], [%s2, %passed]
  %b3 = phi <8 x float> [zeroinitializer, %entry], [%s3, %passed]
  br label %loop
loop:
  %i = phi i64 [0, %pass], [%next, %loop]
  %a0 = phi <8 x float> [%b0, %pass], [%s0, %loop]
  %a1 = phi <8 x float> [%b1, %pass], [%s1, %loop]
  %a2 = phi <8 x float> [%b2, %pass], [%s2, %loop]
  %a3 = phi <8 x float> [%b3, %pass], [%s3, %loop]
  %q0 = getelementptr <8 x float>, ptr %p, i64 %i
  %i1 = add i64 %i, 1
  %q1 = getelementptr <8 x float>, ptr %p, i64 %i1
  %i2 = add i64 %i, 2
  %q2 = getelementptr <8 x float>, ptr %p, i64 %i2
  %i3 = add i64 %i, 3
  %q3 = getelementptr <8 x float>, ptr %p, i64 %i3
  %v0 = load <8 x float>, ptr %q0, align 32
  %v1 = load <8 x float>, ptr %q1, align 32
  %v2 = load <8 x float>, ptr %q2, align 32
  %v3 = load <8 x float>, ptr %q3, align 32
  %s0 = fadd <8 x float> %a0, %v0
  %s1 = fadd <8 x float> %a1, %v1
  %s2 = fadd <8 x float> %a2, %v2
  %s3 = fadd <8 x float> %a3, %v3
  %next = add i64 %i, 4
  %more = icmp ult i64 %next, %vectors
  %r1 = add i64 %r, 1
  %again = icmp ult i64 %r1, %repeats
  br i1 %more, label %loop, label %passed
passed:
  br i1 %again, label %pass, label %done
done:
  %t0 = fadd <8 x float> %s0, %s1
  %t1 = fadd <8 x float> %s2, %s3
  %t = fadd <8 x float> %t0, %t1
  %e = extractelement <8 x float> %t, i32 0
  ret float %e
}
"""


def _read_function():
    """The compiled ``read(pointer, vectors, repeats)`` (vectors a multiple of 4, read
    ``repeats`` times) and its engine."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    machine = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                           features=llvm.get_host_cpu_features().flatten(),
                                           opt=3)
    module = llvm.parse_assembly(_READ_IR)
    module.verify()
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    address = engine.get_function_address("read")
    function = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    return function(address), engine


def read_bandwidth(read, nbytes, threads):
    """GB/s reading ``nbytes`` (split into one part per thread) over and over, the best of
    a few samples."""
    parts = [np.ones(nbytes // 4 // threads // 32 * 32, np.float32) for _ in range(threads)]
    repeats = max(1, READ_BYTES // nbytes)
    samples = []
    for _ in range(5):
        barrier = threading.Barrier(threads + 1)

        def work(part):
            barrier.wait()
            read(part.ctypes.data, part.size // 8, repeats)

        workers = [threading.Thread(target=work, args=(part,)) for part in parts]
        for worker in workers:
            worker.start()
        start = time.perf_counter()
        barrier.wait()
        for worker in workers:
            worker.join()
        samples.append(time.perf_counter() - start)
    read_bytes = sum(part.nbytes for part in parts) * repeats
    return read_bytes / min(samples) / 1e9


def matvec(nbytes, threads):
    """(compute() of myelin's x[1, K] W[K, N] with W of ``nbytes``, its weight bytes, K, N)."""
    k = 1024 if nbytes >= 4 << 20 else 256
    n = nbytes // 4 // k
    rng = np.random.default_rng(0)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [1, k])
    f.matmul(x, f.const(rng.standard_normal((k, n)).astype(np.float32)), name="y")
    data = myelin.Compiler(threads=threads, cache=False).compile(flow).cell("f").instance()
    data[x] = rng.standard_normal((1, k)).astype(np.float32)
    return data.compute, k * n * 4, k, n


def mlp():
    """(compute() of the MLP at batch 1, its runner's call, its weight bytes)."""
    rng = np.random.default_rng(0)
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    h = x = f.var("x", myelin.DT_FLOAT, [1, MLP[0]])
    x.ref = True                # read in place, as a model's run reads its inputs
    weight_bytes = 0
    for i, (k, n) in enumerate(zip(MLP, MLP[1:])):
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        h = f.add(f.matmul(h, f.const(w)), f.const(b))
        h = f.relu(h) if i < len(MLP) - 2 else f.softmax(h, name="y")
        weight_bytes += w.nbytes + b.nbytes
    data = myelin.Compiler(cache=False).compile(flow).cell("f").instance()
    value = rng.standard_normal((1, MLP[0])).astype(np.float32)
    data[x] = value
    runner = data.runner(1, {0: x})
    return data.compute, lambda: runner(value), weight_bytes


def shares(read, runs, nbytes, threads):
    """For each of ``runs`` (name -> function), the median over ``ROUNDS`` rounds of the
    bound's time for ``nbytes`` on ``threads`` threads over the function's (each round
    measuring the bound, then each function); and the median bound (GB/s)."""
    bounds, samples = [], {name: [] for name in runs}
    for _ in range(ROUNDS):
        bound = read_bandwidth(read, nbytes, threads)
        bounds.append(bound)
        for name, function in runs.items():
            samples[name].append(nbytes / bound / 1e9 / time_call(function, min_seconds=0.2))
    return {name: statistics.median(s) for name, s in samples.items()}, statistics.median(bounds)


def main():
    read, _engine = _read_function()
    cores = pool.default_threads()
    print(f"\nRead bandwidth (GB/s) and x[1,K] W[K,N] of the same bytes ({cores} cores; "
          f"medians of {ROUNDS} rounds)")
    print(f"  {'working set':<30}{'threads':>8}{'bound':>10}{'myelin':>10}{'share':>8}")
    for level, nbytes in SIZES.items():
        for threads in sorted({1, cores}):
            compute, weight_bytes, k, n = matvec(nbytes, threads)
            share, bound = shares(read, {"compute": compute}, weight_bytes, threads)
            name = f"{level} {nbytes >> 10} KB ({k}x{n})"
            print(f"  {name:<30}{threads:>8}{bound:>10.1f}{bound * share['compute']:>10.1f}"
                  f"{share['compute']:>8.0%}")
    compute, run, weight_bytes = mlp()
    share, bound = shares(read, {"compute()": compute, "run": run}, weight_bytes, cores)
    print(f"\nMLP {'-'.join(map(str, MLP))}, batch 1: weights {weight_bytes / 1e6:.2f} MB, "
          f"bound {bound:.1f} GB/s on {cores} threads = {weight_bytes / bound / 1e3:.2f} us")
    for name, value in share.items():
        print(f"  {name:<12}{weight_bytes / bound / 1e3 / value:>8.2f} us  {value:>5.0%} of "
              f"the bound")


if __name__ == "__main__":
    main()
