"""Tests of myelin.codegen.llvm.mathlib: accuracy, special values, and no libm calls.

Each function is compiled into a loop ``void f(T* in, [T* in2,] T* out, i64 n)`` that processes
vectors of width W with unaligned loads and stores and finishes with a scalar tail, then run
through ctypes on dense sample grids.  References are NumPy float64 (for float32 results) and
long double (for float64 results).  The error of one value is

    |got - exact| / max(|exact|, floor)

where ``floor`` is the smallest normal number unless a function crosses zero inside its domain
(its spec then names a larger absolute floor).  The harness here is local to these tests.
"""

import ctypes
import functools
import math
import re

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from myelin.codegen.llvm import mathlib

llvm.initialize_native_target()
llvm.initialize_native_asmprinter()

F32_WIDTHS = (1, 4, 8, 16)
F64_WIDTHS = (1, 2, 4, 8)
SSE42_FEATURES = ",-avx,-avx2,-fma,-avx512f"

_LD = np.longdouble
_EXACT_LONG_DOUBLE = np.finfo(_LD).nmant >= 63      # x87 80-bit long double (x86-64 Linux)


# ---------------------------------------------------------------------------------------------
# Test-local JIT harness
# ---------------------------------------------------------------------------------------------

def _loop_function(module, name, emit, elem, width, arity):
    """Define ``void name(T* in0, ..., T* out, i64 n)`` computing out[i] = emit(in[i], ...)."""
    i64 = ir.IntType(64)
    ptr = ir.PointerType()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * (arity + 1) + [i64]), name)
    *inputs, out, n = fn.args
    align = elem.get_abi_size(_TARGET_DATA)
    entry = fn.append_basic_block("entry")
    tail_head = fn.append_basic_block("tail_head")
    tail_body = fn.append_basic_block("tail_body")
    done = fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    start = ir.Constant(i64, 0)

    def body(builder, index, typ):
        args = [builder.load(builder.gep(p, [index], source_etype=elem), typ=typ, align=align)
                for p in inputs]
        result = emit(builder, *args)
        builder.store(result, builder.gep(out, [index], source_etype=elem), align=align)

    if width > 1:
        vec = ir.VectorType(elem, width)
        vec_head = fn.append_basic_block("vec_head")
        vec_body = fn.append_basic_block("vec_body")
        b.branch(vec_head)
        b.position_at_end(vec_head)
        i = b.phi(i64)
        i.add_incoming(start, entry)
        b.cbranch(b.icmp_signed("<=", b.add(i, ir.Constant(i64, width)), n), vec_body, tail_head)
        b.position_at_end(vec_body)
        body(b, i, vec)
        i.add_incoming(b.add(i, ir.Constant(i64, width)), vec_body)
        b.branch(vec_head)
        tail_from, tail_start = vec_head, i
    else:
        b.branch(tail_head)
        tail_from, tail_start = entry, start
    b.position_at_end(tail_head)
    j = b.phi(i64)
    j.add_incoming(tail_start, tail_from)
    b.cbranch(b.icmp_signed("<", j, n), tail_body, done)
    b.position_at_end(tail_body)
    body(b, j, elem)
    j.add_incoming(b.add(j, ir.Constant(i64, 1)), tail_body)
    b.branch(tail_head)
    b.position_at_end(done)
    b.ret_void()


def _target_machine(features):
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=features, opt=3)


_TARGET_DATA = _target_machine(llvm.get_host_cpu_features().flatten()).target_data


class Compiled:
    """All test functions for one element type and width, compiled with MCJIT."""

    def __init__(self, dtype, width, features):
        elem = ir.FloatType() if dtype == np.float32 else ir.DoubleType()
        module = ir.Module(name=f"mathlib_{np.dtype(dtype).name}_{width}")
        module.triple = llvm.get_process_triple()
        for name, spec in SPECS.items():
            _loop_function(module, name, spec.emit, elem, width, spec.arity)
        self.machine = _target_machine(features)
        parsed = llvm.parse_assembly(str(module))
        parsed.verify()
        pipeline = llvm.create_pipeline_tuning_options(speed_level=3)
        builder = llvm.create_pass_builder(self.machine, pipeline)
        builder.getModulePassManager().run(parsed, builder)
        self.module = parsed
        self.engine = llvm.create_mcjit_compiler(parsed, self.machine)
        self.engine.finalize_object()
        self.dtype = dtype
        self.width = width

    def assembly(self):
        return self.machine.emit_assembly(self.module)

    def run(self, name, *inputs):
        """Apply function ``name`` to the arrays ``inputs`` through misaligned copies."""
        arity = len(inputs)
        n = len(inputs[0])
        buffers = []
        for x in inputs:
            buf = np.empty(n + 1, self.dtype)[1:]      # one element off any vector alignment
            buf[:] = x
            buffers.append(buf)
        out = np.full(n + 1, np.nan, self.dtype)[1:]
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (arity + 1)), ctypes.c_int64)
        fn = proto(self.engine.get_function_address(name))
        fn(*[buf.ctypes.data for buf in buffers], out.ctypes.data, n)
        return out


# ---------------------------------------------------------------------------------------------
# Function specs: emitter, sample inputs, reference, tolerance
# ---------------------------------------------------------------------------------------------

class Spec:
    """How to test one function.

    ``samples(dtype)`` returns a tuple of input arrays; ``ref(*inputs)`` computes the exact
    values from float64 (float32 tests) or long double (float64 tests) inputs.  ``tol`` and
    ``floor`` are (float32, float64) pairs.
    """

    def __init__(self, emit, samples, ref, tol=(1e-6, 1e-14), floor=(None, None)):
        self.emit = emit
        self.samples = samples
        self.ref = ref
        self.tol = tol
        self.floor = floor
        self.arity = len(samples(np.float32))


_N = 100_003                   # not a multiple of any vector width: the tail runs too
_RNG_SEED = 1234


def _grid(dtype, lo, hi, n=_N):
    return np.linspace(lo, hi, n).astype(dtype)


def _logs(dtype, lo_exp, hi_exp, n=_N // 4):
    return (10.0 ** np.linspace(lo_exp, hi_exp, n)).astype(dtype)


def _random(dtype, lo, hi, n=_N // 4):
    """Fresh uniform samples in [lo, hi] (a new draw every session; failures print the input)."""
    return np.random.default_rng().uniform(lo, hi, n).astype(dtype)


def _both_signs(x):
    return np.concatenate([x, -x])


def _by_dtype(dtype, f32, f64):
    return f32 if dtype == np.float32 else f64


def _cat(*parts):
    return np.concatenate([np.asarray(p) for p in parts])


def _erf_ref(x):
    return np.vectorize(math.erf, otypes=[float])(np.asarray(x, dtype=float))


def _erfc_ref(x):
    """erfc at long double (or float64) arguments to about 1e-16 relative.

    math.erfc works in double; the rounding of the argument to double is corrected to first
    order with erfc'(z) = -2/sqrt(pi) exp(-z^2).
    """
    z = np.asarray(x)
    zd = z.astype(float)
    dz = (z - zd).astype(float)
    base = np.vectorize(math.erfc, otypes=[float])(zd)
    return base - dz * (2.0 / math.sqrt(math.pi)) * np.exp(-zd * zd)


def _sigmoid_ref(x):
    e = np.exp(-np.abs(x))
    return np.where(x < 0, e / (1 + e), 1 / (1 + e))


def _gelu_tanh_ref(x):
    v = x * (2 * np.sqrt(x.dtype.type(2) / np.pi)) * (1 + x.dtype.type(0.044715) * x * x)
    return x * _sigmoid_ref(v)


def _pow_samples(dtype):
    rng = np.random.default_rng(_RNG_SEED)
    n = _N // 2
    log_max = _by_dtype(dtype, 88.0, 709.0)
    x = np.exp(rng.uniform(-20, 20, n))
    y = rng.uniform(-1, 1, n) * log_max / np.abs(np.log(x))       # results stay in range
    xi = -np.exp(rng.uniform(-5, 5, n // 4))                         # negative x, integer y
    yi = np.trunc(rng.uniform(-1, 1, n // 4) * log_max / np.maximum(np.abs(np.log(-xi)), 1))
    return (_cat(x, xi, rng.uniform(0, 4, 1000)).astype(dtype),
            _cat(y, yi, rng.uniform(-8, 8, 1000)).astype(dtype))


def _atan2_samples(dtype):
    rng = np.random.default_rng(_RNG_SEED)
    n = _N // 2
    mag = np.exp(rng.uniform(-30, 30, (2, n)))
    signs = rng.choice([-1.0, 1.0], (2, n))
    y, x = mag * signs
    return (_cat(y, rng.uniform(-1, 1, 1000)).astype(dtype),
            _cat(x, rng.uniform(-1, 1, 1000)).astype(dtype))


SPECS = {
    "exp": Spec(mathlib.exp,
                lambda d: (_grid(d, *_by_dtype(d, (-87.3, 88.7), (-708, 709.7))),),
                np.exp),
    "exp2": Spec(mathlib.exp2,
                 lambda d: (_grid(d, *_by_dtype(d, (-126, 127.9), (-1022, 1023.9))),),
                 np.exp2),
    "expm1": Spec(mathlib.expm1,
                  lambda d: (_cat(_grid(d, -20, _by_dtype(d, 88.7, 709.7)),
                                  _both_signs(_logs(d, -30, 0))),),
                  np.expm1),
    "log": Spec(mathlib.log,
                lambda d: (_cat(_logs(d, *_by_dtype(d, (-45, 38.5), (-323, 308)), _N),
                                _grid(d, 0.5, 2.0)),),
                np.log),
    "log2": Spec(mathlib.log2,
                 lambda d: (_logs(d, *_by_dtype(d, (-45, 38.5), (-323, 308)), _N),),
                 np.log2),
    "log1p": Spec(mathlib.log1p,
                  lambda d: (_cat(_logs(d, -30, 30), -_logs(d, -30, -1e-7),
                                  _grid(d, -0.999, 3)),),
                  np.log1p),
    "tanh": Spec(mathlib.tanh,
                 lambda d: (_cat(_grid(d, -20, 20), _both_signs(_logs(d, -30, 0)),
                                 _random(d, -12, 12), _both_signs(_random(d, 8, 10))),),
                 np.tanh),
    "sigmoid": Spec(mathlib.sigmoid,
                    lambda d: (_cat(_grid(d, -20, 20), _grid(d, -100, 100, 10_000),
                                    _random(d, -110, 30)),),
                    _sigmoid_ref),
    "erf": Spec(mathlib.erf,
                lambda d: (_cat(_grid(d, -20, 20), _grid(d, -4, 4),
                                _both_signs(_logs(d, -30, 0))),),
                _erf_ref),
    "erfc": Spec(mathlib.erfc,
                 lambda d: (_cat(_grid(d, *_by_dtype(d, (-5, 10), (-6, 27))),
                                 _random(d, -3, 3), _random(d, *_by_dtype(d, (3, 10), (3, 27))),
                                 _both_signs(_logs(d, -30, 0))),),
                 _erfc_ref),
    "sin": Spec(mathlib.sin,
                lambda d: (_cat(_grid(d, -100, 100), _grid(d, -1e5, 1e5, _N // 4),
                                _both_signs(_logs(d, -30, 0))),),
                np.sin, floor=(1e-7, None)),
    "cos": Spec(mathlib.cos, lambda d: (_cat(_grid(d, -100, 100), _grid(d, -1e5, 1e5, _N // 4)),),
                np.cos, floor=(1e-7, None)),
    "tan": Spec(mathlib.tan, lambda d: (_cat(_grid(d, -100, 100), _both_signs(_logs(d, -30, 0))),),
                np.tan, floor=(1e-7, None)),
    "atan": Spec(mathlib.atan,
                 lambda d: (_cat(_grid(d, -10, 10), _both_signs(_logs(d, -30, 30))),),
                 np.arctan),
    "asin": Spec(mathlib.asin,
                 lambda d: (_cat(_grid(d, -1, 1), _both_signs(1 - _logs(d, -7, 0))),),
                 np.arcsin),
    "acos": Spec(mathlib.acos,
                 lambda d: (_cat(_grid(d, -1, 1), _both_signs(1 - _logs(d, -7, 0))),),
                 np.arccos),
    "sinh": Spec(mathlib.sinh,
                 lambda d: (_cat(_grid(d, *_by_dtype(d, (-89.4, 89.4), (-710, 710))),
                                 _both_signs(_logs(d, -30, 0))),),
                 np.sinh),
    "cosh": Spec(mathlib.cosh,
                 lambda d: (_grid(d, *_by_dtype(d, (-89.4, 89.4), (-710, 710))),),
                 np.cosh),
    "asinh": Spec(mathlib.asinh,
                  lambda d: (_cat(_both_signs(_logs(d, -30, _by_dtype(d, 38, 307))),
                                  _grid(d, -3, 3)),),
                  np.arcsinh),
    "acosh": Spec(mathlib.acosh,
                  lambda d: (_cat(1 + _logs(d, -7, _by_dtype(d, 38, 307)), _grid(d, 1, 5)),),
                  np.arccosh),
    "atanh": Spec(mathlib.atanh,
                  lambda d: (_cat(_grid(d, -0.9999, 0.9999), _both_signs(_logs(d, -30, 0)),
                                  _both_signs(1 - _logs(d, -7, 0))),),
                  np.arctanh),
    "softplus": Spec(mathlib.softplus,
                     lambda d: (_cat(_grid(d, -100, 100), _both_signs(_logs(d, -30, 1))),),
                     lambda x: np.logaddexp(0, x)),
    "log_sigmoid": Spec(mathlib.log_sigmoid,
                        lambda d: (_cat(_grid(d, -100, 100), _both_signs(_logs(d, -30, 1))),),
                        lambda x: -np.logaddexp(0, -x)),
    "gelu_erf": Spec(mathlib.gelu_erf,
                     lambda d: (_cat(_grid(d, -_by_dtype(d, 14, 38), 10),
                                     _both_signs(_logs(d, -30, 0)), _random(d, -10, -3),
                                     _random(d, -_by_dtype(d, 14, 38), 20)),),
                     lambda x: 0.5 * x * _erfc_ref(-x / np.sqrt(x.dtype.type(2)))),
    "gelu_tanh": Spec(mathlib.gelu_tanh,
                      lambda d: (_cat(_grid(d, -10, 10), _both_signs(_logs(d, -30, 0)),
                                      _random(d, -10, -3), _random(d, -10, 20)),),
                      _gelu_tanh_ref, tol=(1e-6, 5e-14)),
    "pow": Spec(mathlib.pow, _pow_samples, np.power, tol=(1e-6, 1e-12)),
    "atan2": Spec(mathlib.atan2, _atan2_samples, np.arctan2),
}


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------

_HOST_FEATURES = llvm.get_host_cpu_features().flatten()
CONFIGS = [(np.float32, w) for w in F32_WIDTHS] + [(np.float64, w) for w in F64_WIDTHS]


def _config_id(config):
    dtype, width = config
    return f"{np.dtype(dtype).name}x{width}"


@pytest.fixture(scope="module", params=CONFIGS, ids=_config_id)
def compiled(request):
    dtype, width = request.param
    return Compiled(dtype, width, _HOST_FEATURES)


@pytest.fixture(scope="module", params=[(np.float32, 8), (np.float64, 4)], ids=_config_id)
def compiled_sse42(request):
    dtype, width = request.param
    return Compiled(dtype, width, _HOST_FEATURES + SSE42_FEATURES)


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

def relative_errors(got, exact, floor):
    """Per-element error |got - exact| / max(|exact|, floor), 0 where both are the same
    infinity or both NaN, and inf where only one of them is NaN or infinite."""
    got = got.astype(exact.dtype)
    with np.errstate(invalid="ignore"):
        err = np.abs(got - exact) / np.maximum(np.abs(exact), floor)
    same = (got == exact) | (np.isnan(got) & np.isnan(exact))
    err[same] = 0.0
    err[np.isnan(err)] = np.inf
    return err


@functools.lru_cache(maxsize=None)
def _reference(dtype, name):
    """(inputs, exact values) of function ``name`` for ``dtype``, shared by all widths."""
    spec = SPECS[name]
    inputs = spec.samples(dtype)
    wide = np.float64 if dtype == np.float32 else _LD
    with np.errstate(all="ignore"):
        exact = spec.ref(*[x.astype(wide) for x in inputs])
    return inputs, np.asarray(exact, wide)


def measure(comp, name):
    """(max error, worst inputs, tolerance) of function ``name`` on its sample grid."""
    spec = SPECS[name]
    inputs, exact = _reference(comp.dtype, name)
    got = comp.run(name, *inputs)
    index = 0 if comp.dtype == np.float32 else 1
    floor = spec.floor[index] or np.finfo(comp.dtype).tiny
    err = relative_errors(got, exact, floor)
    worst = int(np.argmax(err))
    return float(err[worst]), [float(x[worst]) for x in inputs], spec.tol[index]


@pytest.mark.parametrize("name", list(SPECS))
def test_accuracy(compiled, name):
    if compiled.dtype == np.float64 and not _EXACT_LONG_DOUBLE:
        pytest.skip("float64 references need an 80-bit long double")
    error, worst, tol = measure(compiled, name)
    assert error <= tol, f"{name}: max error {error:.3g} at {worst}"


@pytest.mark.parametrize("name", list(SPECS))
def test_accuracy_without_avx(compiled_sse42, name):
    """SSE4.2 code (no FMA: fmuladd is a multiply and an add) is as accurate."""
    if compiled_sse42.dtype == np.float64 and not _EXACT_LONG_DOUBLE:
        pytest.skip("float64 references need an 80-bit long double")
    error, worst, tol = measure(compiled_sse42, name)
    assert error <= tol, f"{name}: max error {error:.3g} at {worst}"


def _instructions(assembly):
    """(mnemonic, operands) of each instruction of an assembly listing."""
    result = []
    for line in assembly.splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith(".") and not line.endswith(":"):
            mnemonic, _, operands = line.partition("\t" if "\t" in line else " ")
            result.append((mnemonic, operands.strip()))
    return result


def _outside_calls(assembly):
    """Calls, and jumps to anything but local labels (tail calls), in ``assembly``."""
    return [(m, ops) for m, ops in _instructions(assembly)
            if m.startswith("call") or m.startswith("j") and not ops.startswith(".L")]


def test_no_libm_calls(compiled):
    assembly = compiled.assembly()
    assert _instructions(assembly)
    assert not _outside_calls(assembly)


def test_sse42_code_uses_no_avx(compiled_sse42):
    assembly = compiled_sse42.assembly()
    assert not _outside_calls(assembly)
    assert not re.search(r"%[yz]mm\d", assembly)
    assert not re.search(r"\bv(add|mul|fmadd)", assembly)


_INF = math.inf
_NAN = math.nan

SPECIAL = {
    "exp": [(_INF, _INF), (-_INF, 0.0), (_NAN, _NAN), (0.0, 1.0), (1000.0, _INF),
            (-1000.0, 0.0)],
    "exp2": [(_INF, _INF), (-_INF, 0.0), (_NAN, _NAN), (0.0, 1.0), (10.0, 1024.0),
             (-3.0, 0.125), (5000.0, _INF), (-5000.0, 0.0)],
    "expm1": [(_INF, _INF), (-_INF, -1.0), (_NAN, _NAN), (0.0, 0.0), (-1000.0, -1.0),
              (1000.0, _INF)],
    "log": [(0.0, -_INF), (-0.0, -_INF), (-1.0, _NAN), (-_INF, _NAN), (_INF, _INF),
            (_NAN, _NAN), (1.0, 0.0)],
    "log2": [(0.0, -_INF), (-1.0, _NAN), (_INF, _INF), (8.0, 3.0), (0.25, -2.0)],
    "log1p": [(-1.0, -_INF), (-2.0, _NAN), (_INF, _INF), (_NAN, _NAN), (0.0, 0.0)],
    "tanh": [(_INF, 1.0), (-_INF, -1.0), (1000.0, 1.0), (-1000.0, -1.0), (_NAN, _NAN),
             (0.0, 0.0), (-0.0, -0.0), (1e-40, 1e-40), (30.0, 1.0), (-30.0, -1.0)],
    "sigmoid": [(_INF, 1.0), (-_INF, 0.0), (1000.0, 1.0), (-1000.0, 0.0), (_NAN, _NAN),
                (0.0, 0.5), (-0.0, 0.5), (100.0, 1.0)],
    "erf": [(_INF, 1.0), (-_INF, -1.0), (100.0, 1.0), (_NAN, _NAN), (0.0, 0.0)],
    "erfc": [(_INF, 0.0), (-_INF, 2.0), (100.0, 0.0), (-100.0, 2.0), (_NAN, _NAN),
             (0.0, 1.0), (-0.0, 1.0), (1e-40, 1.0)],
    "sin": [(_INF, _NAN), (-_INF, _NAN), (_NAN, _NAN), (0.0, 0.0), (2.0 ** 60, _NAN)],
    "cos": [(_INF, _NAN), (_NAN, _NAN), (0.0, 1.0)],
    "tan": [(_INF, _NAN), (_NAN, _NAN), (0.0, 0.0)],
    "atan": [(_INF, math.pi / 2), (-_INF, -math.pi / 2), (_NAN, _NAN), (0.0, 0.0),
             (1.0, math.pi / 4)],
    "asin": [(1.0, math.pi / 2), (-1.0, -math.pi / 2), (1.5, _NAN), (-_INF, _NAN),
             (_NAN, _NAN)],
    "acos": [(1.0, 0.0), (-1.0, math.pi), (1.5, _NAN), (_INF, _NAN), (_NAN, _NAN),
             (0.0, math.pi / 2)],
    "sinh": [(_INF, _INF), (-_INF, -_INF), (1000.0, _INF), (_NAN, _NAN), (0.0, 0.0)],
    "cosh": [(_INF, _INF), (-_INF, _INF), (-1000.0, _INF), (_NAN, _NAN), (0.0, 1.0)],
    "asinh": [(_INF, _INF), (-_INF, -_INF), (_NAN, _NAN), (0.0, 0.0)],
    "acosh": [(_INF, _INF), (1.0, 0.0), (0.5, _NAN), (-2.0, _NAN), (-_INF, _NAN),
              (_NAN, _NAN)],
    "atanh": [(1.0, _INF), (-1.0, -_INF), (1.5, _NAN), (-_INF, _NAN), (_NAN, _NAN),
              (0.0, 0.0)],
    "softplus": [(_INF, _INF), (-_INF, 0.0), (_NAN, _NAN), (1000.0, 1000.0),
                 (-1000.0, 0.0)],
    "log_sigmoid": [(_INF, 0.0), (-_INF, -_INF), (_NAN, _NAN), (-1000.0, -1000.0),
                    (1000.0, 0.0)],
    "gelu_erf": [(_INF, _INF), (-_INF, _NAN), (_NAN, _NAN), (0.0, 0.0), (-0.0, -0.0),
                 (-100.0, 0.0), (100.0, 100.0), (1e-40, 5e-41), (-1e-40, -5e-41)],
    "gelu_tanh": [(_INF, _INF), (_NAN, _NAN), (0.0, 0.0), (-0.0, -0.0), (-100.0, 0.0),
                  (100.0, 100.0), (1e-40, 5e-41)],
    "pow": [((2.0, 10.0), 1024.0), ((-2.0, 3.0), -8.0), ((-2.0, 2.0), 4.0),
            ((-2.0, 0.5), _NAN), ((0.0, 2.0), 0.0), ((0.0, -1.0), _INF),
            ((-0.0, -1.0), -_INF), ((-0.0, 3.0), -0.0), ((-0.0, 0.5), 0.0), ((_NAN, 0.0), 1.0),
            ((1.0, _NAN), 1.0), ((_NAN, 1.0), _NAN), ((2.0, _NAN), _NAN), ((-1.0, _INF), 1.0),
            ((0.5, _INF), 0.0), ((2.0, _INF), _INF), ((2.0, -_INF), 0.0), ((_INF, 2.0), _INF),
            ((_INF, -2.0), 0.0), ((-_INF, 3.0), -_INF), ((-_INF, 0.5), _INF),
            ((10.0, 400.0), _INF), ((10.0, -400.0), 0.0)],
    "atan2": [((0.0, 0.0), 0.0), ((-0.0, 0.0), -0.0), ((0.0, -0.0), math.pi),
              ((-0.0, -0.0), -math.pi), ((1.0, 0.0), math.pi / 2), ((-1.0, 0.0), -math.pi / 2),
              ((0.0, -1.0), math.pi), ((-0.0, -1.0), -math.pi), ((_INF, _INF), math.pi / 4),
              ((_INF, -_INF), 3 * math.pi / 4), ((-_INF, -_INF), -3 * math.pi / 4),
              ((1.0, _INF), 0.0), ((1.0, -_INF), math.pi), ((_INF, 1.0), math.pi / 2),
              ((_NAN, 1.0), _NAN), ((1.0, _NAN), _NAN), ((1.0, 1.0), math.pi / 4)],
}


def test_special_value_table_covers_all_functions():
    assert set(SPECIAL) == set(SPECS)


@pytest.mark.parametrize("name", list(SPECIAL))
def test_special_values(compiled, name):
    cases = SPECIAL[name]
    arity = SPECS[name].arity
    args = [np.array([c[0] if arity == 1 else c[0][k] for c in cases]) for k in range(arity)]
    expected = np.array([c[1] for c in cases]).astype(compiled.dtype)
    # Repeat the cases so that they also go through full vectors, not only the scalar tail.
    reps = 2 * compiled.width + 1
    got = compiled.run(name, *[np.tile(a, reps) for a in args]).reshape(reps, -1)
    for row in got:
        for arg_values, g, e in zip(zip(*args), row, expected):
            if math.isnan(e):
                assert math.isnan(g), f"{name}{arg_values}: got {g}, expected NaN"
            else:
                ok = g == e and math.copysign(1, g) == math.copysign(1, e) or \
                    abs(g - e) <= 4 * np.finfo(compiled.dtype).eps * abs(e)
                assert ok, f"{name}{arg_values}: got {g!r}, expected {e!r}"


@pytest.mark.parametrize("name", ["tanh", "erf", "gelu_erf", "gelu_tanh", "sinh", "atan"])
def test_odd_functions_keep_the_sign_of_zero(compiled, name):
    got = compiled.run(name, np.full(2 * compiled.width + 1, -0.0))
    assert np.all(got == 0) and np.all(np.signbit(got)), got


def test_library_names():
    assert {"Exp", "Log", "Tanh", "Sigmoid", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan",
            "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Softplus", "LogSigmoid",
            "Gelu"} <= set(mathlib.LIBRARY)
    assert all(callable(f) for f in mathlib.LIBRARY.values())


def test_helpers_declare_mangled_intrinsics_once():
    module = ir.Module()
    vec = ir.VectorType(ir.FloatType(), 8)
    fn = ir.Function(module, ir.FunctionType(vec, [vec, ir.DoubleType()]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    x, d = fn.args
    y = mathlib.intrinsic(b, "llvm.floor", [x])
    y = mathlib.intrinsic(b, "floor", [y])
    mathlib.intrinsic(b, "llvm.sqrt", [d])
    y = mathlib.fmuladd(b, y, x, mathlib.constant(vec, 2.0))
    i = mathlib.as_int(b, y)
    assert i.type == ir.VectorType(ir.IntType(32), 8)
    assert mathlib.as_float(b, i).type == vec
    assert mathlib.element_type(vec) == ir.FloatType()
    b.ret(mathlib.select(b, b.fcmp_ordered("<", x, y), x, y))
    text = str(llvm.parse_assembly(str(module)))
    assert text.count("declare <8 x float> @llvm.floor.v8f32(<8 x float>") == 1
    assert "declare double @llvm.sqrt.f64(double" in text
    assert "@llvm.fmuladd.v8f32" in text
