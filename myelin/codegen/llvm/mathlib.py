"""A vectorizable math library emitted as LLVM IR.

LLVM's ``llvm.exp.*``, ``llvm.log.*``, ``llvm.sin.*`` ... lower to one scalar libm call per
element, which defeats vectorized element-wise loops.  The functions here expand each
transcendental into basic IR instead: ``fadd``/``fmul``/``fdiv``, compares and selects, bitcasts
and integer operations, and only those intrinsics that lower to plain instructions (``fmuladd``,
``fabs``, ``sqrt``, ``floor``, ``minnum``/``maxnum``, ``copysign``).  ``llvm.fma`` is never used:
it becomes a libm call on CPUs without FMA, whereas ``llvm.fmuladd`` is fused only where the CPU
has FMA.  No fast-math flags are set, so LLVM keeps the evaluation order the error analysis
relies on, and NaN and infinities behave as documented per function.

Every emitter takes an :class:`llvmlite.ir.IRBuilder` and a value of type ``float``,
``double`` or a vector of either, and returns a value of the same type::

    y = mathlib.exp(builder, x)          # x: <8 x float>  ->  y: <8 x float>

The same code serves scalars (the remainder of a vector loop) and vectors of any width.  Branches
are computed for every lane and merged with ``select``, so there is no control flow.

Accuracy (measured against float64 / long double references in
``tests/codegen/llvm/test_mathlib.py``): about 1e-7 relative for float32 and 1e-15 for float64
over the useful ranges; the docstrings give the exceptions.  Float32 ``pow`` is evaluated in
double precision internally, because a float32 evaluation would amplify the rounding error of
y log x beyond float32 precision.  Float32 ``erfc`` and ``gelu_erf`` stay in float32: the square
in exp(-x^2) is kept exact as a sum of two floats, so its rounding error is not amplified in the
tails; ``gelu_tanh`` computes only its argument 2u in double (three operations) and the rest in
float32.

Coefficients come from the Cephes Math Library by Stephen L. Moshier (release 2.2 single
precision ``*f.c`` and release 2.8 double precision files), as noted at each table.  The
polynomial tables list the highest degree first (Cephes ``polevl`` order); a table used with
``_poly1`` has an implicit leading coefficient 1 (Cephes ``p1evl``).

``LIBRARY`` maps myelin op types (``"Exp"``, ``"Tanh"``, ...) to the unary emitters.
"""

import math

from llvmlite import ir

# ---------------------------------------------------------------------------------------------
# Type helpers
# ---------------------------------------------------------------------------------------------

_F32 = ir.FloatType()
_F64 = ir.DoubleType()


def element_type(typ):
    """The element type of a vector type, or ``typ`` itself for a scalar type."""
    return typ.element if isinstance(typ, ir.VectorType) else typ


def _with_element(typ, elem):
    """``typ`` with its element type replaced by ``elem`` (same vector shape)."""
    if isinstance(typ, ir.VectorType):
        return ir.VectorType(elem, typ.count)
    return elem


def _float_bits(typ):
    """The width in bits of the float element of ``typ``."""
    elem = element_type(typ)
    if isinstance(elem, ir.DoubleType):
        return 64
    if isinstance(elem, ir.FloatType):
        return 32
    raise TypeError(f"mathlib needs float or double (or vectors of them), not {typ}")


def int_type(typ):
    """The integer type with the width and vector shape of the float type ``typ``."""
    return _with_element(typ, ir.IntType(_float_bits(typ)))


def float_type(typ):
    """The float type with the width and vector shape of the integer type ``typ``."""
    width = element_type(typ).width
    return _with_element(typ, {32: _F32, 64: _F64}[width])


def constant(typ, value):
    """A constant of ``typ``; a splat of ``value`` for a vector type."""
    return ir.Constant(typ, value)


def as_int(builder, x):
    """Bitcast a float value to the integer type of the same width and shape."""
    return builder.bitcast(x, int_type(x.type))


def as_float(builder, i):
    """Bitcast an integer value (32 or 64 bits wide elements) to float or double."""
    return builder.bitcast(i, float_type(i.type))


def select(builder, cond, a, b):
    """``cond ? a : b``, lane by lane for vectors."""
    return builder.select(cond, a, b)


def _type_suffix(typ):
    """The suffix of an overloaded intrinsic name for ``typ``: f32, f64, v8f32, i32, ..."""
    if isinstance(typ, ir.VectorType):
        return f"v{typ.count}{_type_suffix(typ.element)}"
    if isinstance(typ, ir.IntType):
        return f"i{typ.width}"
    if isinstance(typ, ir.HalfType):
        return "f16"
    if isinstance(typ, ir.FloatType):
        return "f32"
    if isinstance(typ, ir.DoubleType):
        return "f64"
    raise TypeError(f"no intrinsic suffix for type {typ}")


def intrinsic(builder, name, args):
    """Call the LLVM intrinsic ``name`` overloaded on the type of its first argument.

    ``name`` is the base name, with or without the ``llvm.`` prefix (``"llvm.floor"`` or
    ``"floor"``); the mangled declaration (``llvm.floor.v8f32``) is added to the module on first
    use.  The result has the type of the first argument, which covers ``fabs``, ``sqrt``,
    ``floor``, ``ceil``, ``trunc``, ``rint``, ``minnum``, ``maxnum``, ``copysign`` and
    ``fmuladd``.
    """
    typ = args[0].type
    base = name if name.startswith("llvm.") else "llvm." + name
    mangled = f"{base}.{_type_suffix(typ)}"
    module = builder.module
    fn = module.globals.get(mangled)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(typ, [a.type for a in args]), name=mangled)
    return builder.call(fn, args)


def fmuladd(builder, a, b, c):
    """``a * b + c`` through ``llvm.fmuladd`` (fused only where the target has FMA)."""
    return intrinsic(builder, "llvm.fmuladd", [a, b, c])


# ---------------------------------------------------------------------------------------------
# Arithmetic on one float type, with Python numbers promoted to splat constants
# ---------------------------------------------------------------------------------------------

class _Ops:
    """Emits arithmetic on values of one float type ``typ`` (scalar or vector).

    Operands may be IR values or Python numbers; numbers become constants of ``typ`` (or of
    its integer type in the integer methods).  ``double`` tells which precision is emitted.
    """

    def __init__(self, builder, typ):
        self.b = builder
        self.t = typ
        self.bits = _float_bits(typ)
        self.double = self.bits == 64
        self.it = int_type(typ)
        self.mant = 52 if self.double else 23           # explicit mantissa bits
        self.bias = 1023 if self.double else 127        # exponent bias
        # Adding SHIFT rounds a number of magnitude < 2**(mant-1) to an integer that lands in
        # the low mantissa bits (1.5 * 2**mant, so negative integers keep a clean pattern).
        self.shift = 1.5 * 2.0 ** self.mant

    # constants and conversions
    def c(self, v):
        return v if isinstance(v, ir.Value) else constant(self.t, v)

    def ic(self, v):
        return v if isinstance(v, ir.Value) else constant(self.it, v)

    def to_int(self, x):
        return self.b.bitcast(x, self.it)

    def to_float(self, i):
        return self.b.bitcast(i, self.t)

    # float arithmetic
    def add(self, x, y):
        return self.b.fadd(self.c(x), self.c(y))

    def sub(self, x, y):
        return self.b.fsub(self.c(x), self.c(y))

    def mul(self, x, y):
        return self.b.fmul(self.c(x), self.c(y))

    def div(self, x, y):
        return self.b.fdiv(self.c(x), self.c(y))

    def neg(self, x):
        return self.b.fneg(x)

    def fma(self, x, y, z):
        return fmuladd(self.b, self.c(x), self.c(y), self.c(z))

    def call(self, name, *args):
        return intrinsic(self.b, name, [self.c(a) for a in args])

    def abs(self, x):
        return self.call("llvm.fabs", x)

    def sqrt(self, x):
        return self.call("llvm.sqrt", x)

    def floor(self, x):
        return self.call("llvm.floor", x)

    def copysign(self, x, sign):
        return self.call("llvm.copysign", x, sign)

    def poly(self, x, coeffs):
        """Horner's scheme for ``coeffs`` (highest degree first) at ``x``."""
        acc = self.c(coeffs[0])
        for coeff in coeffs[1:]:
            acc = self.fma(acc, x, coeff)
        return acc

    def poly1(self, x, coeffs):
        """Like :meth:`poly` with an implicit leading coefficient 1 (Cephes ``p1evl``)."""
        acc = self.add(x, coeffs[0])
        for coeff in coeffs[1:]:
            acc = self.fma(acc, x, coeff)
        return acc

    # comparisons and selection; ordered compares are false when an operand is NaN
    def cmp(self, op, x, y):
        return self.b.fcmp_ordered(op, self.c(x), self.c(y))

    def ucmp(self, op, x, y):
        """Unordered compare: also true when an operand is NaN."""
        return self.b.fcmp_unordered(op, self.c(x), self.c(y))

    def sel(self, cond, x, y):
        return self.b.select(cond, self.c(x), self.c(y))

    def and_(self, p, q):
        return self.b.and_(p, q)

    def or_(self, p, q):
        return self.b.or_(p, q)

    def not_(self, p):
        return self.b.not_(p)

    def signbit(self, x):
        """True where the sign bit of ``x`` is set (negative numbers, -0.0, -NaN)."""
        return self.b.icmp_signed("<", self.to_int(x), self.ic(0))

    # integer arithmetic on the same-width integer type
    def iadd(self, i, j):
        return self.b.add(self.ic(i), self.ic(j))

    def isub(self, i, j):
        return self.b.sub(self.ic(i), self.ic(j))

    def iand(self, i, j):
        return self.b.and_(self.ic(i), self.ic(j))

    def ior(self, i, j):
        return self.b.or_(self.ic(i), self.ic(j))

    def ixor(self, i, j):
        return self.b.xor(self.ic(i), self.ic(j))

    def ishl(self, i, n):
        return self.b.shl(self.ic(i), self.ic(n))

    def iashr(self, i, n):
        return self.b.ashr(self.ic(i), self.ic(n))

    def ilshr(self, i, n):
        return self.b.lshr(self.ic(i), self.ic(n))

    def int_to_float(self, i):
        """Convert small integers (|i| < 2**(mant-1)) exactly, without ``sitofp``.

        ``sitofp`` of 64-bit lanes has no instruction before AVX-512; adding the integer to the
        bit pattern of SHIFT and subtracting SHIFT is exact and cheap everywhere.
        """
        shift_bits = self.to_int(self.c(self.shift))
        return self.sub(self.to_float(self.iadd(i, shift_bits)), self.shift)

    def pow2(self, n):
        """``2.0**n`` for an integer ``n`` within the normal exponent range."""
        return self.to_float(self.ishl(self.iadd(n, self.bias), self.mant))

    def ldexp_down(self, y, n, k):
        """``y * 2**n`` for ``n`` in ``[1 - bias - k, bias - k]``: one integer step, then a
        multiplication by 2**-k that rounds once where the result is denormal."""
        return self.mul(self.mul(y, self.pow2(self.iadd(n, k))), 2.0 ** -k)

    def ldexp(self, y, n):
        """``y * 2**n`` for ``|n|`` up to about twice the exponent range, in two exact steps."""
        half = self.iashr(n, 1)
        return self.mul(self.mul(y, self.pow2(half)), self.pow2(self.isub(n, half)))

    def nan(self):
        return self.c(math.nan)


# ---------------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------------

_LOG2E = 1.4426950408889634074
_LN2 = 0.69314718055994530942
_SQRT1_2 = 0.70710678118654752440
_PI = math.pi
_PIO2 = math.pi / 2
_PIO4 = math.pi / 4
# pi/2 - round(pi/2) and pi - round(pi) for float and double rounding ((float, double) pairs,
# like all such tables below).
_PIO2_LO = (-4.3711390001862426e-08, 6.123233995736766e-17)
_PI_LO = (-8.742278000372485e-08, 1.2246467991473532e-16)

# exp: x = n ln2 + r with ln2 = C1 + C2, C1 short enough that n*C1 is exact (Cephes exp.c /
# expf.c).  The clamp keeps n within the range ldexp handles; results beyond it are 0 or inf.
_EXP_C1 = (0.693359375, 6.93145751953125e-1)
_EXP_C2 = (-2.12194440e-4, 1.42860682030941723212e-6)
_EXP_LIMITS = ((-104.0, 89.0), (-746.0, 710.0))
# Cephes expf.c: exp(r) = 1 + r + r^2 P(r), |r| <= ln2/2.
_EXPF_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
           1.6666665459e-1, 5.0000001201e-1)
# Cephes exp.c: exp(r) = 1 + 2 r P(r^2) / (Q(r^2) - r P(r^2)).
_EXP_P = (1.26177193074810590878e-4, 3.02994407707441961300e-2, 9.99999999999999999910e-1)
_EXP_Q = (3.00198505138664455042e-6, 2.52448340349684104192e-3, 2.27265548208155028766e-1,
          2.00000000000000000009e0)

# log: log(x) = e ln2 + log(1 + f), 1/sqrt(2) <= 1 + f < sqrt(2); ln2 = 0.693359375 - 2.12e-4.
_LOG_C1 = 0.693359375
_LOG_C2 = -2.121944400546905827679e-4
# Cephes logf.c: log(1 + f) = f - f^2/2 + f^3 P(f).
_LOGF_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
           1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
           3.3333331174e-1)
# Cephes log.c: log(1 + f) = f - f^2/2 + f^3 P(f) / Q(f), Q with leading 1.
_LOG_P = (1.01875663804580931796e-4, 4.97494994976747001425e-1, 4.70579119878881725854e0,
          1.44989225341610930846e1, 1.79368678507819816313e1, 7.70838733755885391666e0)
_LOG_Q = (1.12873587189167450590e1, 4.52279145837532221105e1, 8.29875266912776603211e1,
          7.11544750618563894466e1, 2.31251620126765340583e1)

# Trigonometric range reduction, in double for both precisions: x = n pi/2 + r with
# pi/2 = P1 + P2 + P3 (Cody-Waite; Cephes sin.c's pi/4 split times two).  n*P1 and n*P2 are exact
# for |n| < 2**30, so r is accurate for |x| up to about 1.6e9 (further with FMA).  Beyond
# _TRIG_LIMIT the shift trick that rounds n fails and the result is NaN.
_TRIG_PIO2 = (1.57079625129699707031e0, 7.54978941586159635335e-8, 5.39030285815811905290e-15)
_TRIG_LIMIT = 2.0 ** 50
# Cephes sinf.c: sin(r) = r + r^3 S(r^2), cos(r) = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4.
_SINF_S = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
_COSF_C = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)
# Cephes sin.c (double).
_SIN_S = (1.58962301576546568060e-10, -2.50507477628578072866e-8, 2.75573136213857245213e-6,
          -1.98412698295895385996e-4, 8.33333333332211858878e-3, -1.66666666666666307295e-1)
_COS_C = (-1.13585365213876817300e-11, 2.08757008419747316778e-9, -2.75573141792967388112e-7,
          2.48015872888517045348e-5, -1.38888888888730564116e-3, 4.16666666666665929218e-2)

# atan: reduce |x| to [0, tan(pi/8)] (float) or [-0.42, 0.66] (double) with
# atan(x) = pi/4 + atan((x-1)/(x+1)) and atan(x) = pi/2 - atan(1/x).
_TAN3PI8 = 2.41421356237309504880
_ATAN_MID = (0.4142135623730950, 0.66)
# Cephes atanf.c: atan(t) = t + t^3 P(t^2).
_ATANF_P = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)
# Cephes atan.c: atan(t) = t + t^3 P(t^2) / Q(t^2), Q with leading 1.
_ATAN_P = (-8.750608600031904122785e-1, -1.615753718733365076637e1, -7.500855792314704667340e1,
           -1.228866684490136173410e2, -6.485021904942025371773e1)
_ATAN_Q = (2.485846490142306297962e1, 1.650270098316988542046e2, 4.328810604912902668951e2,
           4.853903996359136964868e2, 1.945506571482613964425e2)

# Cephes asinf.c: asin(t) = t + t^3 P(t^2), 0 <= t <= 0.5.
_ASINF_P = (4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2, 7.4953002686e-2,
            1.6666752422e-1)
# Cephes asin.c: asin(t) = t + t^3 P(t^2) / Q(t^2), 0 <= t <= 0.625, Q with leading 1.
_ASIN_P = (4.253011369004428248960e-3, -6.019598008014123785661e-1, 5.444622390564711410273e0,
           -1.626247967210700244449e1, 1.956261983317594739197e1, -8.198089802484824371615e0)
_ASIN_Q = (-1.474091372988853791896e1, 7.049610280856842141659e1, -1.471791292232726029859e2,
           1.395105614657485689735e2, -4.918853881490881290097e1)

# Cephes ndtrf.c: erf(x) = x T(x^2) for |x| < 1; erfc(x) = exp(-x^2)/x P(1/x^2) for 1 <= x < 2
# and exp(-x^2)/x R(1/x^2) for x >= 2.
_ERFF_T = (7.853861353153693e-5, -8.010193625184903e-4, 5.188327685732524e-3,
           -2.685381193529856e-2, 1.128358514861418e-1, -3.761262582423300e-1,
           1.128379165726710e0)
_ERFCF_P = (2.326819970068386e-2, -1.387039388740657e-1, 3.687424674597105e-1,
            -5.824733027278666e-1, 6.210004621745983e-1, -4.944515323274145e-1,
            3.404879937665872e-1, -2.741127028184656e-1, 5.638259427386472e-1)
_ERFCF_R = (-1.047766399936249e1, 1.297719955372516e1, -7.495518717768503e0,
            2.921019019210786e0, -1.015265279202700e0, 4.218463358204948e-1,
            -2.820767439740514e-1, 5.641895067754075e-1)
# Cephes ndtr.c: erf(x) = x T(x^2) / U(x^2) for |x| < 1; erfc(x) = exp(-x^2) P(x) / Q(x) for
# 1 <= x < 8 and exp(-x^2) R(x) / S(x) for x >= 8 (U, Q, S with leading 1).
_ERF_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
          7.00332514112805075473e3, 5.55923013010394962768e4)
_ERF_U = (3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
          2.26290000613890934246e4, 4.92673942608635921086e4)
_ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
           4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
           9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)
_ERFC_Q = (1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
           9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
           1.65666309194161350182e3, 5.57535340817727675546e2)
_ERFC_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
           6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0)
_ERFC_S = (2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
           1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)
# Beyond these arguments erfc underflows to 0 (and erf rounds to 1).
_ERFC_LIMIT = (10.5, 27.5)
# Float32 erfc(a) = t exp(P(t) - a^2) with t = 2 / (2 + a), a >= 0: the form of Numerical
# Recipes' erfcc, with a degree 9 polynomial fitted for this module (minimax over 0 <= a <= 10.5
# with float32 coefficients, |error of P| < 9e-8).
_ERFCF_T = (0.14574576914310455, -0.6855257749557495, 1.1685067415237427, -0.7130454182624817,
            -0.06529974192380905, -0.007365851197391748, 0.03780272603034973,
            0.38590866327285767, 0.998725950717926, -1.2654529809951782)

# Float32 tanh(x) = x P(x^2) / Q(x^2) for |x| <= 9 (tanh rounds to +-1 beyond): a rational
# fit made for this module (relative error 2e-8 before rounding; all coefficients positive, so
# no cancellation).
_TANHF_LIMIT = 9.0
_TANHF_P = (1.335637911381582e-08, 2.0610361389117315e-05, 0.0034956675954163074,
            0.13381093740463257, 1.0)
_TANHF_Q = (7.77727279910323e-07, 0.00032857636688277125, 0.02587728761136532,
            0.46714410185813904, 1.0)

# Above these magnitudes sinh and cosh are computed as exp(|x|/2)^2 / 2, avoiding the
# overflow of exp(|x|) while sinh and cosh are still finite (e^-|x| is negligible there).
_HYP_HALF = (32.0, 256.0)
# Above these magnitudes asinh(x) = log(2|x|) and acosh(x) = log(2x) to working precision.
_AHYP_LARGE = (2.0 ** 12, 2.0 ** 28)


def _pick(o, pair):
    """The (float, double) ``pair`` entry for the precision of ``o``."""
    return pair[1] if o.double else pair[0]


# ---------------------------------------------------------------------------------------------
# Exponentials and logarithms
# ---------------------------------------------------------------------------------------------

def _exp_kernel(o, r):
    """``exp(r) - 1`` for ``|r| <= ln2/2`` (slightly more is fine)."""
    if o.double:
        r2 = o.mul(r, r)
        rp = o.mul(r, o.poly(r2, _EXP_P))
        q = o.poly(r2, _EXP_Q)
        return o.mul(2.0, o.div(rp, o.sub(q, rp)))
    return o.fma(o.poly(r, _EXPF_P), o.mul(r, r), r)


def _exp_reduce(o, x):
    """Split ``x`` (clamped to the exp range) into ``(exp(r) - 1, n)`` with exp(x) = 2^n e^r.

    ``n`` is an integer value of the integer type.  NaN passes through into ``exp(r) - 1``.
    """
    lo, hi = _pick(o, _EXP_LIMITS)
    x = o.sel(o.cmp("<", x, lo), lo, x)
    x = o.sel(o.cmp(">", x, hi), hi, x)
    kd = o.fma(x, _LOG2E, o.shift)
    n_int = o.isub(o.to_int(kd), o.to_int(o.c(o.shift)))
    n = o.sub(kd, o.shift)
    r = o.fma(n, -_pick(o, _EXP_C1), x)
    r = o.fma(n, -_pick(o, _EXP_C2), r)
    return _exp_kernel(o, r), n_int


def _exp_reduce_sum(o, big, small):
    """Like :func:`_exp_reduce` for ``big + small`` (float32, within twice the exp range).

    ``big - n C1`` is exact, so the rounding error of ``big + small`` does not enter: ``big``
    may carry the exact part of a large argument and ``small`` (|small| < 2) the rest.
    """
    kd = o.fma(o.add(big, small), _LOG2E, o.shift)
    n_int = o.isub(o.to_int(kd), o.to_int(o.c(o.shift)))
    n = o.sub(kd, o.shift)
    r = o.add(o.fma(n, -_EXP_C1[0], big), small)
    r = o.fma(n, -_EXP_C2[0], r)
    return _exp_kernel(o, r), n_int


def _exp(o, x):
    em, n = _exp_reduce(o, x)
    return o.ldexp(o.add(em, 1.0), n)


def _expm1(o, x):
    em, n = _exp_reduce(o, x)
    # 2^n (em + 1) - 1 = 2^n2 (2^n1 em + (2^n1 - 2^-n2)) with n = n1 + n2: exact for n = 0,
    # no cancellation for small n, no intermediate overflow for large n.
    n1 = o.iashr(n, 1)
    n2 = o.isub(n, n1)
    s1 = o.pow2(n1)
    inner = o.fma(s1, em, o.sub(s1, o.pow2(o.isub(0, n2))))
    return o.mul(inner, o.pow2(n2))


def _in_double(builder, emit, *args):
    """``emit(ops, *args)`` evaluated in double precision, converted back to the argument type."""
    typ = args[0].type
    if _float_bits(typ) == 64:
        return emit(_Ops(builder, typ), *args)
    dtyp = _with_element(typ, _F64)
    result = emit(_Ops(builder, dtyp), *[builder.fpext(a, dtyp) for a in args])
    return builder.fptrunc(result, typ)


def exp(builder, x):
    """e**x.  Overflows to +inf, underflows through denormals to 0; exp(-inf) = 0; NaN stays."""
    return _exp(_Ops(builder, x.type), x)


def exp2(builder, x):
    """2**x, exact for integer x in the normal range; same special values as :func:`exp`."""
    o = _Ops(builder, x.type)
    lo, hi = _pick(o, _EXP_LIMITS)
    x = o.sel(o.cmp("<", x, lo * _LOG2E), lo * _LOG2E, x)
    x = o.sel(o.cmp(">", x, hi * _LOG2E), hi * _LOG2E, x)
    kd = o.add(x, o.shift)
    n_int = o.isub(o.to_int(kd), o.to_int(o.c(o.shift)))
    r = o.mul(o.sub(x, o.sub(kd, o.shift)), _LN2)
    return o.ldexp(o.add(_exp_kernel(o, r), 1.0), n_int)


def expm1(builder, x):
    """e**x - 1, accurate near 0; -1 for large negative x, +inf on overflow; NaN stays."""
    return _expm1(_Ops(builder, x.type), x)


def _log(o, x):
    tiny = _pick(o, (2.0 ** -126, 2.0 ** -1022))         # smallest normal number
    scale_bits = _pick(o, (25, 54))
    is_tiny = o.cmp("<", x, tiny)
    xs = o.sel(is_tiny, o.mul(x, 2.0 ** scale_bits), x)      # denormals become normal
    bits = o.to_int(xs)
    # xs = m 2^e with m in [0.5, 1)
    e = o.isub(o.ilshr(bits, o.mant), o.bias - 1)
    e = o.isub(e, o.b.select(is_tiny, o.ic(scale_bits), o.ic(0)))
    mant_mask = (1 << o.mant) - 1
    half_bits = (o.bias - 1) << o.mant
    m = o.to_float(o.ior(o.iand(bits, mant_mask), half_bits))
    small = o.cmp("<", m, _SQRT1_2)
    e = o.isub(e, o.b.select(small, o.ic(1), o.ic(0)))
    f = o.sel(small, o.sub(o.add(m, m), 1.0), o.sub(m, 1.0))
    fe = o.int_to_float(e)
    z = o.mul(f, f)
    if o.double:
        y = o.mul(f, o.div(o.mul(z, o.poly(f, _LOG_P)), o.poly1(f, _LOG_Q)))
    else:
        y = o.mul(o.mul(f, z), o.poly(f, _LOGF_P))
    y = o.fma(fe, _LOG_C2, y)
    y = o.fma(z, -0.5, y)
    r = o.fma(fe, _LOG_C1, o.add(f, y))
    r = o.sel(o.cmp("==", x, math.inf), math.inf, r)
    r = o.sel(o.cmp("==", x, 0.0), -math.inf, r)
    return o.sel(o.ucmp("<", x, 0.0), o.nan(), r)


def log(builder, x):
    """Natural logarithm.  log(0) = -inf, log(x < 0) = NaN, log(inf) = inf; denormals work."""
    return _log(_Ops(builder, x.type), x)


def log2(builder, x):
    """Base-2 logarithm, ``log(x) * log2(e)`` (special values as :func:`log`)."""
    o = _Ops(builder, x.type)
    return o.mul(_log(o, x), _LOG2E)


def _log1p_from(o, y, u, log_u):
    """``log(1 + y)`` given ``u = 1 + y`` rounded and ``log_u = log(u)``.

    Goldberg's correction ``log(u) * y / (u - 1)`` removes the rounding error of ``1 + y``.
    """
    r = o.sel(o.cmp("==", u, 1.0), y, o.mul(log_u, o.div(y, o.sub(u, 1.0))))
    return o.sel(o.cmp("==", y, math.inf), math.inf, r)


def _log1p(o, y):
    u = o.add(y, 1.0)
    return _log1p_from(o, y, u, _log(o, u))


def log1p(builder, x):
    """log(1 + x), accurate near 0; -inf at -1, NaN below; NaN stays."""
    return _log1p(_Ops(builder, x.type), x)


def pow(builder, x, y):  # noqa: A001  (the op is called pow)
    """x**y as exp(y log|x|) with C99 special cases.

    x > 0: general; x = 0: 0 for y > 0, inf for y < 0; x < 0: the sign of (-1)**y for integer
    y and NaN for finite non-integer y; pow(x, 0) = pow(1, y) = 1 (also for NaN);
    pow(-1, +-inf) = 1; -0 with odd integer y keeps its sign.  Float32 is computed in double.
    Float64 relative error is about |y log x| * 2e-16 (up to ~1e-13 near overflow).
    """
    return _in_double(builder, _pow, x, y)


def _pow(o, x, y):
    ax = o.abs(x)
    r = _exp(o, o.mul(y, _log(o, ax)))
    y_int = o.cmp("==", o.floor(y), y)
    half_y = o.mul(y, 0.5)
    y_odd = o.and_(y_int, o.cmp("!=", o.floor(half_y), half_y))
    r = o.sel(o.and_(y_odd, o.signbit(x)), o.neg(r), r)
    finite_neg = o.and_(o.cmp("<", x, 0.0), o.cmp(">", x, -math.inf))
    r = o.sel(o.and_(finite_neg, o.not_(y_int)), o.nan(), r)
    one = o.or_(o.cmp("==", y, 0.0), o.cmp("==", x, 1.0))
    one = o.or_(one, o.and_(o.cmp("==", ax, 1.0), o.cmp("==", o.abs(y), math.inf)))
    return o.sel(one, 1.0, r)


# ---------------------------------------------------------------------------------------------
# Hyperbolic functions and activations
# ---------------------------------------------------------------------------------------------

def tanh(builder, x):
    """Hyperbolic tangent.

    Float32: a rational function of x clamped to +-9; float64: -expm1(-2|x|) / (2 +
    expm1(-2|x|)) with the sign of x (never overflows: expm1(-2|x|) lies in [-1, 0]).
    """
    o = _Ops(builder, x.type)
    if not o.double:
        xc = o.sel(o.cmp("<", x, -_TANHF_LIMIT), -_TANHF_LIMIT, x)
        xc = o.sel(o.cmp(">", xc, _TANHF_LIMIT), _TANHF_LIMIT, xc)
        z = o.mul(xc, xc)
        return o.div(o.mul(xc, o.poly(z, _TANHF_P)), o.poly(z, _TANHF_Q))
    u = _expm1(o, o.mul(o.abs(x), -2.0))
    return o.copysign(o.div(o.neg(u), o.add(u, 2.0)), x)


def sigmoid(builder, x):
    """Logistic function 1 / (1 + e**-x) = e**x / (1 + e**x), the form without overflow
    chosen by the sign of x: relative accuracy also where it underflows."""
    o = _Ops(builder, x.type)
    if o.double:
        e = _exp(o, o.neg(o.abs(x)))
    else:
        em, n = _exp_reduce(o, o.neg(o.abs(x)))               # n in [-150, 0]
        e = o.ldexp_down(o.add(em, 1.0), n, 24)
    return o.div(o.sel(o.cmp("<", x, 0.0), e, 1.0), o.add(e, 1.0))


def softplus(builder, x):
    """log(1 + e**x) = max(x, 0) + log1p(e**-|x|)."""
    o = _Ops(builder, x.type)
    return o.add(o.call("llvm.maxnum", x, 0.0), _log1p(o, _exp(o, o.neg(o.abs(x)))))


def log_sigmoid(builder, x):
    """log(sigmoid(x)) = min(x, 0) - log1p(e**-|x|)."""
    o = _Ops(builder, x.type)
    return o.sub(o.call("llvm.minnum", x, 0.0), _log1p(o, _exp(o, o.neg(o.abs(x)))))


def sinh(builder, x):
    """Hyperbolic sine via expm1 (accurate near 0), finite up to the float overflow point."""
    o = _Ops(builder, x.type)
    a = o.abs(x)
    big = o.cmp(">", a, _pick(o, _HYP_HALF))
    t = _expm1(o, o.sel(big, o.mul(a, 0.5), a))
    small_r = o.mul(0.5, o.add(t, o.div(t, o.add(t, 1.0))))    # (e^a - e^-a) / 2
    h = o.add(t, 1.0)
    big_r = o.mul(o.mul(h, 0.5), h)                              # e^(a/2)^2 / 2
    return o.copysign(o.sel(big, big_r, small_r), x)


def cosh(builder, x):
    """Hyperbolic cosine, (e**|x| + e**-|x|) / 2, finite up to the float overflow point."""
    o = _Ops(builder, x.type)
    a = o.abs(x)
    big = o.cmp(">", a, _pick(o, _HYP_HALF))
    e = _exp(o, o.sel(big, o.mul(a, 0.5), a))
    half_e = o.mul(e, 0.5)
    return o.sel(big, o.mul(half_e, e), o.add(half_e, o.div(0.5, e)))


def asinh(builder, x):
    """Inverse hyperbolic sine, log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) with the sign of x."""
    o = _Ops(builder, x.type)
    a = o.abs(x)
    big = o.cmp(">", a, _pick(o, _AHYP_LARGE))
    a2 = o.mul(a, a)
    y = o.add(a, o.div(a2, o.add(o.sqrt(o.add(a2, 1.0)), 1.0)))
    u = o.add(y, 1.0)
    log_u = _log(o, o.sel(big, a, u))
    r = o.sel(big, o.add(log_u, _LN2), _log1p_from(o, y, u, log_u))
    return o.copysign(r, x)


def acosh(builder, x):
    """Inverse hyperbolic cosine, log1p(t + sqrt(t (t + 2))) with t = x - 1; NaN for x < 1."""
    o = _Ops(builder, x.type)
    big = o.cmp(">", x, _pick(o, _AHYP_LARGE))
    t = o.sub(x, 1.0)
    y = o.add(t, o.sqrt(o.mul(t, o.add(t, 2.0))))
    u = o.add(y, 1.0)
    log_u = _log(o, o.sel(big, x, u))
    r = o.sel(big, o.add(log_u, _LN2), _log1p_from(o, y, u, log_u))
    return o.sel(o.cmp("<", x, 1.0), o.nan(), r)


def atanh(builder, x):
    """Inverse hyperbolic tangent, log1p(2|x| / (1 - |x|)) / 2 with the sign of x.

    atanh(+-1) = +-inf, NaN for |x| > 1.
    """
    o = _Ops(builder, x.type)
    a = o.abs(x)
    r = o.mul(_log1p(o, o.div(o.add(a, a), o.sub(1.0, a))), 0.5)
    return o.copysign(r, x)


# ---------------------------------------------------------------------------------------------
# Error function and GELU
# ---------------------------------------------------------------------------------------------

def _exp_neg_square(o, a):
    """exp(-a^2) in double without the error of rounding a^2: a = ah + al, ah of 26 bits."""
    ah = o.to_float(o.iand(o.to_int(a), -(1 << 27)))
    al = o.sub(a, ah)
    return o.mul(_exp(o, o.neg(o.mul(ah, ah))), _exp(o, o.neg(o.mul(al, o.add(a, ah)))))


def _erf_ratio(o, a):
    """erf(a) / a for |a| <= 1."""
    z = o.mul(a, a)
    if o.double:
        return o.div(o.poly(z, _ERF_T), o.poly1(z, _ERF_U))
    return o.poly(z, _ERFF_T)


def _erfc_large(o, a, precise):
    """erfc(a) for a >= 1 (garbage below 1; 0 for large a, NaN stays).

    ``precise`` computes exp(-a^2) without the rounding error of a^2 (needed for relative
    accuracy of erfc itself, not for erf = 1 - erfc).
    """
    limit = _pick(o, _ERFC_LIMIT)
    a = o.sel(o.cmp(">", a, limit), limit, a)
    g = _exp_neg_square(o, a) if precise else _exp(o, o.neg(o.mul(a, a)))
    if o.double:
        near = o.cmp("<", a, 8.0)
        num = o.sel(near, o.poly(a, _ERFC_P), o.poly(a, _ERFC_R))
        den = o.sel(near, o.poly1(a, _ERFC_Q), o.poly1(a, _ERFC_S))
        return o.div(o.mul(g, num), den)
    q = o.div(1.0, a)
    y = o.mul(q, q)
    p = o.sel(o.cmp("<", a, 2.0), o.poly(y, _ERFCF_P), o.poly(y, _ERFCF_R))
    return o.mul(o.mul(g, q), p)


def erf(builder, x):
    """Error function (odd; +-1 for large |x|, NaN stays)."""
    o = _Ops(builder, x.type)
    a = o.abs(x)
    small = o.mul(a, _erf_ratio(o, a))
    r = o.sel(o.cmp("<", a, 1.0), small, o.sub(1.0, _erfc_large(o, a, False)))
    return o.copysign(r, x)


def _erfc(o, x, x_lo=None):
    """erfc(x) in double; ``x_lo`` is an optional low part of the argument (x + x_lo exact).

    In the right tail erfc(x + x_lo) = erfc(x) (1 - 2 x x_lo) to first order; the correction
    matters where the relative error of x, amplified by 2 x^2, would exceed the precision.
    """
    a = o.abs(x)
    tail = _erfc_large(o, a, True)
    if x_lo is not None:
        # only the tail of positive x needs it; the clamp keeps inf * 0 out
        x_tail = o.call("llvm.maxnum", o.call("llvm.minnum", x, _pick(o, _ERFC_LIMIT)), 0.0)
        tail = o.mul(tail, o.fma(o.mul(x_tail, x_lo), -2.0, 1.0))
    tail = o.sel(o.cmp("<", x, 0.0), o.sub(2.0, tail), tail)
    return o.sel(o.cmp("<", a, 1.0), o.fma(o.neg(x), _erf_ratio(o, x), 1.0), tail)


def _square_f32(o, a):
    """a^2 as float32 ``(hi, lo)``: hi = ah^2 is exact for ah, the 12 high bits of a >= 0."""
    ah = o.to_float(o.iand(o.to_int(a), -(1 << 12)))
    return o.mul(ah, ah), o.mul(o.sub(a, ah), o.add(a, ah))


def _erfc_f32(o, a, square):
    """erfc(a) in float32 for 0 <= a <= 10.5 (NaN stays), given a^2 = hi + lo as ``square``."""
    hi, lo = square
    t = o.div(2.0, o.add(a, 2.0))
    em, n = _exp_reduce_sum(o, o.neg(hi), o.sub(o.poly(t, _ERFCF_T), lo))
    return o.ldexp_down(o.fma(em, t, t), n, 40)               # n in [-162, 0]


def _clamp_above(o, x, limit):
    """min(x, limit) for x >= 0; NaN stays."""
    return o.sel(o.cmp(">", x, limit), limit, x)


def erfc(builder, x):
    """Complementary error function 1 - erf(x), with relative accuracy in the right tail."""
    o = _Ops(builder, x.type)
    if o.double:
        return _erfc(o, x)
    a = _clamp_above(o, o.abs(x), _ERFC_LIMIT[0])
    e = _erfc_f32(o, a, _square_f32(o, a))
    return o.sel(o.cmp("<", x, 0.0), o.sub(2.0, e), e)


# -1/sqrt(2) rounded to double, and split into 26 high bits and the rest.
_NEG_SQRT1_2 = -0.7071067811865476
_NEG_SQRT1_2_HI = -0.7071067690849304          # -0x1.6a09e6p-1
_NEG_SQRT1_2_LO = -1.210161710447897e-08


def _gelu_erf(o, x):
    """x erfc(-x/sqrt 2) / 2 in double precision (``o`` is a double _Ops)."""
    z = o.mul(x, _NEG_SQRT1_2)
    # The rounding error of z, by Dekker's exact products: x = xh + xl with xh of 26 bits, so
    # xh * HI and xl * HI are exact and xh * HI - z is exact (Sterbenz).
    xh = o.to_float(o.iand(o.to_int(x), -(1 << 27)))
    xl = o.sub(x, xh)
    z_lo = o.add(o.add(o.sub(o.mul(xh, _NEG_SQRT1_2_HI), z), o.mul(xl, _NEG_SQRT1_2_HI)),
                 o.mul(x, _NEG_SQRT1_2_LO))
    z_lo = o.sel(o.cmp("<", o.abs(x), 1e300), z_lo, 0.0)       # inf - inf would be NaN
    return o.mul(o.mul(x, 0.5), _erfc(o, z, z_lo))


def _gelu_tanh(o, x):
    c = 2.0 * math.sqrt(2.0 / math.pi)
    v = o.mul(x, o.fma(o.mul(x, x), c * 0.044715, c))          # 2u
    e = _exp(o, o.neg(o.abs(v)))
    s = o.div(1.0, o.add(e, 1.0))
    s = o.sel(o.cmp("<", v, 0.0), o.mul(e, s), s)
    return o.mul(x, s)


def _gelu_erf_f32(o, x):
    """x Phi(x) with e = erfc(|x| / sqrt 2) = 2 Phi(-|x|): x e / 2 for x < 0, else x (1 - e/2).

    The square |x|^2 / 2 is split exactly, so |x| / sqrt 2 is rounded only where it matters
    little (in t); erfc underflows before |x| reaches the clamp.
    """
    ax = _clamp_above(o, o.abs(x), _ERFC_LIMIT[0] / _SQRT1_2)
    hi, lo = _square_f32(o, ax)
    e = _erfc_f32(o, o.mul(ax, _SQRT1_2), (o.mul(hi, 0.5), o.mul(lo, 0.5)))
    return o.sel(o.cmp("<", x, 0.0), o.mul(o.mul(x, 0.5), e), o.mul(x, o.fma(e, -0.5, 1.0)))


def gelu_erf(builder, x):
    """GELU, x Phi(x) = x erfc(-x / sqrt 2) / 2.

    Relative accuracy holds in the left tail too (the rounding error of x^2 / 2 is
    compensated); gelu_erf(-inf) is NaN.
    """
    o = _Ops(builder, x.type)
    return _gelu_erf(o, x) if o.double else _gelu_erf_f32(o, x)


def _gelu_tanh_f32(o, x):
    """x sigmoid(v) with v = 2u computed in double and split into float32 v_hi + v_lo."""
    b = o.b
    od = _Ops(b, _with_element(o.t, _F64))
    c = 2.0 * math.sqrt(2.0 / math.pi)
    xc = o.sel(o.cmp("<", x, -12.0), -12.0, _clamp_above(o, x, 12.0))   # sigmoid(v) is 0 or 1
    xd = b.fpext(xc, od.t)
    v = od.mul(xd, od.fma(od.mul(xd, xd), c * 0.044715, c))
    v_hi = b.fptrunc(v, o.t)
    v_lo = b.fptrunc(od.sub(v, b.fpext(v_hi, od.t)), o.t)
    neg = o.cmp("<", v_hi, 0.0)
    em, n = _exp_reduce_sum(o, o.neg(o.abs(v_hi)), o.sel(neg, v_lo, o.neg(v_lo)))
    e = o.ldexp(o.add(em, 1.0), n)                              # e**-|v|
    return o.mul(x, o.div(o.sel(neg, e, 1.0), o.add(e, 1.0)))


def gelu_tanh(builder, x):
    """GELU's tanh approximation x (1 + tanh(u)) / 2 = x sigmoid(2u).

    u = sqrt(2/pi) (x + 0.044715 x^3).  The sigmoid form avoids the cancellation of 1 + tanh.
    The function is ill-conditioned for negative x (relative error about |2u| times the
    rounding error of u): float64 is evaluated in double and has relative errors up to about
    3e-14 near x = -10; float32 computes 2u in double, the rest in float32.
    """
    o = _Ops(builder, x.type)
    return _gelu_tanh(o, x) if o.double else _gelu_tanh_f32(o, x)


# ---------------------------------------------------------------------------------------------
# Trigonometric functions
# ---------------------------------------------------------------------------------------------

def _trig_reduce(o, x):
    """x = n pi/2 + r with |r| <= pi/4 (about); returns (r, integer with the low bits of n).

    Float32 arguments are reduced in double, which keeps r accurate for |x| up to 1e9 at the
    cost of a few double operations.
    """
    b = o.b
    od = o if o.double else _Ops(b, _with_element(o.t, _F64))
    xd = x if o.double else b.fpext(x, od.t)
    kd = od.fma(xd, 2.0 / math.pi, od.shift)
    n = od.sub(kd, od.shift)
    p1, p2, p3 = _TRIG_PIO2
    r = od.fma(n, -p1, xd)
    r = od.fma(n, -p2, r)
    r = od.fma(n, -p3, r)
    r = od.sel(od.cmp("<", od.abs(xd), _TRIG_LIMIT), r, od.nan())
    q = od.to_int(kd)
    if o.double:
        return r, q
    return b.fptrunc(r, o.t), b.trunc(q, o.it)


def _sin_cos_kernels(o, r):
    """(sin r, cos r) for |r| <= pi/4."""
    z = o.mul(r, r)
    s_coef, c_coef = (_SIN_S, _COS_C) if o.double else (_SINF_S, _COSF_C)
    s = o.fma(o.mul(r, z), o.poly(z, s_coef), r)
    c = o.fma(o.mul(z, z), o.poly(z, c_coef), o.fma(z, -0.5, 1.0))
    return s, c


def _quadrant_sin(o, x, offset):
    """sin(x + offset pi/2)."""
    r, q = _trig_reduce(o, x)
    q = o.iadd(q, offset)
    s, c = _sin_cos_kernels(o, r)
    odd = o.b.icmp_signed("!=", o.iand(q, 1), o.ic(0))
    v = o.b.select(odd, c, s)
    sign = o.ishl(o.iand(q, 2), o.bits - 2)                      # quadrants 2, 3: negate
    return o.to_float(o.ixor(o.to_int(v), sign))


def sin(builder, x):
    """Sine.  Cody-Waite reduction modulo pi/2 in three parts, accurate for |x| up to about
    1e9 (1e12 where the CPU has FMA); NaN for |x| >= 2**50 and for +-inf."""
    return _quadrant_sin(_Ops(builder, x.type), x, 0)


def cos(builder, x):
    """Cosine, sin(x + pi/2) with the quadrant shifted exactly (same range as :func:`sin`)."""
    return _quadrant_sin(_Ops(builder, x.type), x, 1)


def tan(builder, x):
    """Tangent, sin(r)/cos(r) or -cos(r)/sin(r) by quadrant (same range as :func:`sin`)."""
    o = _Ops(builder, x.type)
    r, q = _trig_reduce(o, x)
    s, c = _sin_cos_kernels(o, r)
    odd = o.b.icmp_signed("!=", o.iand(q, 1), o.ic(0))
    return o.div(o.b.select(odd, o.neg(c), s), o.b.select(odd, s, c))


def _atan_kernel(o, t):
    """atan(t) for |t| up to the reduced range."""
    z = o.mul(t, t)
    if o.double:
        p = o.div(o.mul(z, o.poly(z, _ATAN_P)), o.poly1(z, _ATAN_Q))
    else:
        p = o.mul(z, o.poly(z, _ATANF_P))
    return o.fma(t, p, t)


def _atan_pos(o, a):
    """atan(a) for a >= 0 (inf gives pi/2, NaN stays)."""
    big = o.cmp(">", a, _TAN3PI8)
    mid = o.cmp(">", a, _pick(o, _ATAN_MID))
    num = o.sel(big, -1.0, o.sel(mid, o.sub(a, 1.0), a))
    den = o.sel(big, a, o.sel(mid, o.add(a, 1.0), 1.0))
    base = o.sel(big, _PIO2, o.sel(mid, _PIO4, 0.0))
    # the rounding errors of pi/2 and pi/4 in the working precision
    lo = _pick(o, _PIO2_LO)
    base_lo = o.sel(big, lo, o.sel(mid, 0.5 * lo, 0.0))
    return o.add(base, o.add(_atan_kernel(o, o.div(num, den)), base_lo))


def atan(builder, x):
    """Arc tangent over all reals; atan(+-inf) = +-pi/2."""
    o = _Ops(builder, x.type)
    return o.copysign(_atan_pos(o, o.abs(x)), x)


def atan2(builder, y, x):
    """The angle of (x, y) in [-pi, pi], with the C99 special cases for zeros and infinities."""
    o = _Ops(builder, x.type)
    ax = o.abs(x)
    ay = o.abs(y)
    swap = o.cmp(">", ay, ax)
    t = o.div(o.sel(swap, ax, ay), o.sel(swap, ay, ax))
    t = o.sel(o.and_(o.cmp("==", ax, 0.0), o.cmp("==", ay, 0.0)), 0.0, t)
    t = o.sel(o.and_(o.cmp("==", ax, math.inf), o.cmp("==", ay, math.inf)), 1.0, t)
    a = _atan_pos(o, t)
    lo = _pick(o, _PIO2_LO)
    a = o.sel(swap, o.add(o.sub(_PIO2, a), lo), a)
    a = o.sel(o.signbit(x), o.add(o.sub(_PI, a), 2.0 * lo), a)
    return o.copysign(a, y)


def _asin_pos(o, a):
    """(asin(t), big) where big = a > 0.5 and t = sqrt((1 - a)/2) if big else a (a = |x|)."""
    big = o.cmp(">", a, 0.5)
    zb = o.sub(0.5, o.mul(a, 0.5))
    z = o.sel(big, zb, o.mul(a, a))
    t = o.sel(big, o.sqrt(zb), a)
    if o.double:
        p = o.div(o.mul(z, o.poly(z, _ASIN_P)), o.poly1(z, _ASIN_Q))
    else:
        p = o.mul(z, o.poly(z, _ASINF_P))
    return o.fma(t, p, t), big


def asin(builder, x):
    """Arc sine on [-1, 1]; NaN outside."""
    o = _Ops(builder, x.type)
    p, big = _asin_pos(o, o.abs(x))
    # asin(a) = pi/2 - 2 asin(sqrt((1 - a)/2)) for a > 0.5
    r = o.sel(big, o.add(o.sub(_PIO2, o.add(p, p)), _pick(o, _PIO2_LO)), p)
    return o.copysign(r, x)


def acos(builder, x):
    """Arc cosine on [-1, 1]; NaN outside."""
    o = _Ops(builder, x.type)
    p, big = _asin_pos(o, o.abs(x))
    p2 = o.add(p, p)
    # x > 0.5: 2 asin(sqrt((1-x)/2)); x < -0.5: pi - 2 asin(sqrt((1+x)/2)); else pi/2 - asin x
    r_big = o.sel(o.cmp(">", x, 0.0), p2, o.add(o.sub(_PI, p2), _pick(o, _PI_LO)))
    r_small = o.add(o.sub(_PIO2, o.copysign(p, x)), _pick(o, _PIO2_LO))
    return o.sel(big, r_big, r_small)


# ---------------------------------------------------------------------------------------------
# Op table
# ---------------------------------------------------------------------------------------------

LIBRARY = {
    "Exp": exp,
    "Exp2": exp2,
    "Expm1": expm1,
    "Log": log,
    "Log2": log2,
    "Log1p": log1p,
    "Tanh": tanh,
    "Sigmoid": sigmoid,
    "Erf": erf,
    "Erfc": erfc,
    "Sin": sin,
    "Cos": cos,
    "Tan": tan,
    "Asin": asin,
    "Acos": acos,
    "Atan": atan,
    "Sinh": sinh,
    "Cosh": cosh,
    "Asinh": asinh,
    "Acosh": acosh,
    "Atanh": atanh,
    "Softplus": softplus,
    "LogSigmoid": log_sigmoid,
    "Gelu": gelu_erf,
}
"""Unary emitters by myelin op type; each is ``f(builder, x) -> value of x's type``."""
