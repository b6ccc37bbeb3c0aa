"""Element-wise steps whose sizes their code reads as it runs.

A step whose inputs are each one run of its elements or one value read for all, and whose
outputs are runs, is one loop over a count of elements. Its kernel keeps that count in an
array that its code loads (:func:`run_count`), so its code does not depend on it: steps
alike but for their sizes share one kernel function (:class:`RunKernel`), compiled once.
"""

import math
import weakref

import numpy as np

from myelin.codegen.llvm import irutil, loops
from myelin.codegen.llvm.kernels.base import (ELEMENT_WORK, PARALLEL_WORK, TASKS_PER_THREAD,
                                              Kernel)
from myelin.codegen.llvm.loops import Operand, contiguous_strides


_RUN_COUNTS = weakref.WeakKeyDictionary()   # element-wise step of one run: its count, kept
# Fewer elements are computed by code of their own count: a vector or a few, no loop (a
# 64-lane vector of bytes at most, so a run is never narrower than the variant's vectors).
MIN_RUN = 64


def run_count(step, domain):
    """For an element-wise step over ``domain`` of at least ``MIN_RUN`` elements whose
    inputs are each one run of its elements or one value read for all, and whose outputs are
    runs: an int64 array holding its element count, which its code reads as it runs, so
    that steps of other sizes share the code (:func:`parallel_run`; the same array for each
    call on a step); else None."""
    if step not in _RUN_COUNTS:
        full = contiguous_strides(domain)

        def run_or_value(tensor):       # (the strides of axes of one index do not matter)
            strides = loops.broadcast_strides(tensor.shape, domain)
            return tensor.elements == 1 or all(
                mine == whole for mine, whole, size in zip(strides, full, domain) if size > 1)
        runs = math.prod(domain) >= MIN_RUN and all(run_or_value(t) for t in step.inputs)
        _RUN_COUNTS[step] = np.array([math.prod(domain)], np.int64) if runs else None
    return _RUN_COUNTS[step]


def _large(count, flops):
    """True if a run of ``count`` elements (``flops`` per element besides moving it) is work
    enough to split over threads (as :meth:`~.base.EmitContext.chunks` judges)."""
    return int(count[0]) * (ELEMENT_WORK + flops) >= PARALLEL_WORK


def _whole(step):
    """For each input and output of a step of one run, True if it is the run."""
    return [t.elements > 1 for t in step.inputs] + [True] * len(step.outputs)


def parallel_run(ctx, step, count, width, body, flops):
    """The element-wise ``body(builder, values, lanes)`` over a step of one run
    (:func:`run_count`), its element count read as the code runs, in vectors of ``width``;
    where the run is large (``flops``: the work per element besides moving it), in tasks of
    whole vectors that the threads share."""
    tasks = ctx.threads * TASKS_PER_THREAD if ctx.threads > 1 and _large(count, flops) else 1

    def task(sub, index):
        b = sub.builder
        total = b.load(sub.keep(count), typ=irutil.I64)
        start, run = irutil.i64(0), total
        if tasks > 1:
            chunk = irutil.i64(max(width, 16))
            share = b.udiv(b.add(total, irutil.i64(tasks - 1)), irutil.i64(tasks))
            size = b.mul(b.udiv(b.add(share, b.sub(chunk, irutil.i64(1))), chunk), chunk)
            start = b.mul(index, size)
            start = b.select(b.icmp_unsigned("<", start, total), start, total)
            end = b.add(start, size)
            run = b.sub(b.select(b.icmp_unsigned("<", end, total), end, total), start)
        operands = []
        for tensor, whole in zip(step.inputs + step.outputs, _whole(step)):
            pointer = sub.pointer(tensor)
            if whole:
                pointer = irutil.element_ptr(b, pointer, tensor.dtype, start)
            operands.append(Operand(pointer, tensor.dtype, (int(whole),), tensor.itemsize))
        loops.elementwise_count(b, run, width, operands[:len(step.inputs)],
                                operands[len(step.inputs):], body)
    ctx.parallel(f"{step.type}.{step.name}", step.inputs + step.outputs, tasks, task)


class RunKernel(Kernel):
    """A kernel of element-wise steps whose steps of one run (:func:`run_count`) read their
    element count as they run (:func:`parallel_run`), so that steps of other sizes share
    their code. Subclasses give the element-wise domain of a step (``run_domain``) and its
    work per element (``run_flops``)."""

    def run_domain(self, step):
        """The domain of ``step``'s element-wise loop, or None where it is not one."""
        raise NotImplementedError

    def count(self, step):
        """The element count its code reads as it runs, for a step of one run; else None."""
        domain = self.run_domain(step)
        return None if domain is None else run_count(step, domain)

    def code_shapes(self, step):
        """Of a step of one run: whether each input is the run or a value read for all, and
        whether the outputs' run is large enough to split over threads (the loop's vector
        width follows from their dtypes)."""
        count = self.count(step)
        if count is None:
            return super().code_shapes(step)
        split = _large(count, self.run_flops(step))
        return [("run",) if whole else () for whole in _whole(step)[:len(step.inputs)]] + \
            [("run", split)] * len(step.outputs)

    def kept(self, ctx, step):
        count = self.count(step)
        return [] if count is None else [count]

    def run_flops(self, step):
        """The work per element of ``step``'s loop besides moving it."""
        raise NotImplementedError

    def emit_run(self, ctx, step, body):
        """``body(builder, values, lanes)`` over a step of one run, in vectors of its
        operands' widest elements, the last partial."""
        width = min(loops.lanes(ctx.target, t.dtype) for t in step.inputs + step.outputs)
        parallel_run(ctx, step, self.count(step), width, body, self.run_flops(step))
