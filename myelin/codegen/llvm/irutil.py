"""Helpers for emitting LLVM IR: types of myelin dtypes, loads and stores, constants, loops.

Values in registers use the *compute* type of a dtype (bool is ``i1``, float16 and bfloat16 are
computed as ``float``); in memory they use the *storage* type (bool is one byte, float16 is
``half``, bfloat16 its bits as ``i16``: the top half of a float's, so a shift converts it).
``load``/``store`` convert between the two, for scalars and vectors alike. On a target without
half-precision conversion instructions (x86-64 without F16C) LLVM would lower ``half`` <-> ``float``
to library calls the JIT cannot resolve, so there the conversions are integer bit manipulation
(:func:`half_to_float`, :func:`float_to_half`); :func:`set_target` records which on the module.
"""

import contextlib
import functools

import llvmlite.ir as ir

from myelin.errors import CompileError
from myelin.flow import dtypes

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()

_STORAGE = {
    "float32": F32, "float64": F64, "float16": ir.HalfType(),
    "int8": I8, "uint8": I8, "int16": ir.IntType(16), "uint16": ir.IntType(16),
    "int32": I32, "uint32": I32, "int64": I64, "uint64": I64, "bool": I8, "bfloat16": I16,
}
_COMPUTE = dict(_STORAGE, bool=I1, float16=F32, bfloat16=F32)

UNSIGNED = frozenset({"uint8", "uint16", "uint32", "uint64"})


def storage_type(dtype):
    """The LLVM type of one element of ``dtype`` in memory."""
    try:
        return _STORAGE[dtype]
    except KeyError:
        raise CompileError(f"data type {dtype} is not supported by the CPU back end") from None


def compute_type(dtype):
    """The LLVM type a ``dtype`` element has in registers."""
    storage_type(dtype)
    return _COMPUTE[dtype]


def vector_of(typ, width):
    """``typ`` itself for width 1, else a vector of ``width`` elements."""
    return typ if width == 1 else ir.VectorType(typ, width)


def is_float(typ):
    scalar = typ.element if isinstance(typ, ir.VectorType) else typ
    return isinstance(scalar, (ir.FloatType, ir.DoubleType, ir.HalfType))


def width_of(value):
    typ = value.type
    return typ.count if isinstance(typ, ir.VectorType) else 1


def const(typ, value):
    """A constant of scalar or vector type ``typ`` (splatted for vectors). Made once for
    each type and value: constants belong to no function or module, and kernels ask for the
    same few (zeros, ones, lane indices) thousands of times."""
    return _constant(typ, value, repr(value))    # (the repr tells -0.0 from 0.0)


@functools.lru_cache(maxsize=4096)
def _constant(typ, value, text):
    if isinstance(typ, ir.VectorType):
        return _Splat(typ, [ir.Constant(typ.element, value)] * typ.count)
    return ir.Constant(typ, value)


class _Splat(ir.Constant):
    """A vector constant of one value in every lane, written ``splat (<value>)``, and an
    undefined vector written ``undef``, rather than lane by lane: kernels use thousands, and
    the text of a module is hashed, kept and parsed again (a 16-lane one is 16 times as long
    written out)."""

    def _get_reference(self):
        if self.constant is ir.Undefined or self.constant[0].constant is ir.Undefined:
            return "undef"
        return f"splat ({self.constant[0]})"


def i64(value):
    return ir.Constant(I64, int(value))


def smin(builder, x, y):
    """The smaller of signed integers ``x`` and ``y``."""
    return builder.select(builder.icmp_signed("<", x, y), x, y)


def smax(builder, x, y):
    """The larger of signed integers ``x`` and ``y``."""
    return builder.select(builder.icmp_signed(">", x, y), x, y)


def splat(builder, scalar, width):
    """Broadcast a scalar value to a vector of ``width`` lanes (the scalar itself for width 1)."""
    if width == 1:
        return scalar
    undefined = _undefined(ir.VectorType(scalar.type, width))
    single = builder.insert_element(undefined, scalar, const(I32, 0))
    return builder.shuffle_vector(single, undefined, const(ir.VectorType(I32, width), 0))


@functools.lru_cache(maxsize=256)
def _undefined(typ):
    """The undefined value of ``typ`` (made once, as :func:`const` makes constants)."""
    return _Splat(typ, ir.Undefined) if isinstance(typ, ir.VectorType) else \
        ir.Constant(typ, ir.Undefined)


def every_nth(builder, vector, stride, width):
    """Lanes 0, ``stride``, 2 * ``stride``, ... of ``vector``: ``width`` of them."""
    return builder.shuffle_vector(vector, ir.Constant(vector.type, ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, width),
                                              [i * stride for i in range(width)]))


def transpose_block(builder, rows):
    """The transpose of a square block held as ``rows`` (vectors of len(rows) lanes, a power
    of two): at each level d (half the block, then a quarter, ...), vectors p and p + d swap
    their off-diagonal halves of d lanes."""
    size = len(rows)
    mask = ir.VectorType(I32, size)
    d = size // 2
    while d:
        swapped = list(rows)
        for p in range(size):
            if p & d:
                continue
            low = [size + lane - d if lane & d else lane for lane in range(size)]
            high = [size + lane if lane & d else lane + d for lane in range(size)]
            swapped[p] = builder.shuffle_vector(rows[p], rows[p + d], ir.Constant(mask, low))
            swapped[p + d] = builder.shuffle_vector(rows[p], rows[p + d],
                                                    ir.Constant(mask, high))
        rows = swapped
        d //= 2
    return rows


def element_ptr(builder, base, dtype, index):
    """Pointer to element ``index`` (an i64 value or int) of an array of ``dtype`` at ``base``."""
    if isinstance(index, int):
        if index == 0:
            return base
        index = i64(index)
    return builder.gep(base, [index], source_etype=storage_type(dtype))


def gather(builder, base, dtype, offsets, mask=None, fill=None):
    """The elements of ``dtype`` at ``base[offsets]`` (a vector of i32 or i64 offsets) as a
    vector of the compute type, like :func:`load`. Lanes where ``mask`` (a vector of i1;
    default all) is false are not read and give ``fill`` (default undefined); the others must
    lie inside the array. Offsets are kept at their width, so 32-bit offsets make a
    32-bit-index gather instruction where the target has one (LLVM picks scalar loads
    elsewhere)."""
    width = offsets.type.count
    memory = vector_of(_memory_type(dtype), width)
    pointer_type = ir.VectorType(PTR, width)
    addresses = builder.gep(base, [offsets], source_etype=storage_type(dtype))
    addresses.type = pointer_type      # (llvmlite types a GEP of a vector of indices as one)
    if mask is None:
        mask = ir.Constant(ir.VectorType(I1, width), [1] * width)
    passthru = ir.Constant(memory, ir.Undefined)
    if fill is not None and fill.type == memory:
        passthru, fill = fill, None
    name = f"llvm.masked.gather.v{width}{_intrinsic_suffix(memory.element)}.v{width}p0"
    module = builder.module
    function = module.globals.get(name) or ir.Function(
        module, ir.FunctionType(memory, [pointer_type, I32, ir.VectorType(I1, width), memory]),
        name)
    value = builder.call(function, [addresses, ir.Constant(I32, dtypes.itemsize(dtype)), mask,
                                    passthru])
    value = _from_memory(builder, value, dtype)
    return value if fill is None else builder.select(mask, value, fill)


def masked_load(builder, ptr, dtype, mask, fill=None):
    """``mask.type.count`` elements of ``dtype`` at ``ptr`` as a vector of the compute type;
    lanes where ``mask`` (a vector of i1) is false are not read and give ``fill`` (a vector
    of the memory type; zeros by default), so they may lie outside the array."""
    width = mask.type.count
    memory = vector_of(_memory_type(dtype), width)
    if fill is None:
        fill = const(memory, 0)
    function = _masked_load(builder, memory, [PTR, I32, mask.type, memory])
    value = builder.call(function, [ptr, ir.Constant(I32, dtypes.itemsize(dtype)), mask, fill])
    return _from_memory(builder, value, dtype)


def load_lanes(builder, ptr, dtype, width, count):
    """A vector of ``width`` lanes of ``dtype`` (the compute type) whose first ``count`` are
    read at ``ptr`` (as :func:`load`); the others are zero and not read, so they may lie past
    the array (the counterpart of :func:`store_lanes`)."""
    return masked_load(builder, ptr, dtype, first_lanes(width, count),
                       const(vector_of(_memory_type(dtype), width), 0))


def first_lanes(width, count):
    """A mask (a constant vector of ``width`` i1) of the first ``count`` lanes."""
    return ir.Constant(ir.VectorType(I1, width), [lane < count for lane in range(width)])


def store_lanes(builder, value, ptr, dtype, count):
    """Store the first ``count`` lanes of the vector ``value`` at ``ptr`` (as :func:`store`),
    in pieces of halving widths (7 lanes: 4, 2 and 1), without writing past them."""
    done = 0
    while done < count:
        piece = 1 << (count - done).bit_length() - 1
        part = (builder.extract_element(value, ir.Constant(I32, done)) if piece == 1
                else builder.shuffle_vector(value, ir.Constant(value.type, ir.Undefined),
                                            ir.Constant(ir.VectorType(I32, piece),
                                                        list(range(done, done + piece)))))
        store(builder, part, element_ptr(builder, ptr, dtype, done), dtype)
        done += piece


def prefetch(builder, ptr, locality=3):
    """Ask the cache for the line at ``ptr`` (to read it soon; ``locality`` 3 into every
    level, 2 the second-level cache and beyond); never faults, so ``ptr`` may lie past an
    array."""
    name = "llvm.prefetch.p0"
    module = builder.module
    function = module.globals.get(name) or ir.Function(
        module, ir.FunctionType(ir.VoidType(), [PTR, I32, I32, I32]), name)
    builder.call(function, [ptr, ir.Constant(I32, 0), ir.Constant(I32, locality),
                            ir.Constant(I32, 1)])


def _masked_load(builder, result, arguments):
    """The declaration of ``llvm.masked.load`` for these types."""
    name = f"llvm.masked.load.v{result.count}{_intrinsic_suffix(result.element)}.p0"
    module = builder.module
    return module.globals.get(name) or ir.Function(module, ir.FunctionType(result, arguments),
                                                   name)


def _intrinsic_suffix(typ):
    if isinstance(typ, ir.FloatType):
        return "f32"
    if isinstance(typ, ir.DoubleType):
        return "f64"
    return f"i{typ.width}"


def helper_function(module, name, pointers, integers, noalias=True):
    """(function, builder at its entry) of a new internal ``void`` function of ``module``
    that LLVM does not inline (a kernel's tile, whose registers it allocates alone), named
    after ``name``, taking ``pointers`` ptr arguments (``noalias`` if set) then
    ``integers`` i64 ones."""
    arguments = [PTR] * pointers + [I64] * integers
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), arguments),
                           module.get_unique_name(name))
    function.linkage = "internal"
    function.attributes.add("nounwind")
    function.attributes.add("noinline")
    if noalias:
        for argument in function.args[:pointers]:
            argument.add_attribute("noalias")
    return function, ir.IRBuilder(function.append_basic_block("entry"))


def stack_array(builder, element_type, count, align=64):
    """A ptr to ``count`` elements of ``element_type`` in the current function's stack frame
    (allocated in its entry block, so loops do not grow the stack)."""
    with builder.goto_entry_block():
        array = builder.alloca(ir.ArrayType(element_type, count))
        array.align = align
    array.type = PTR    # as an opaque pointer, like every other pointer here
    return array


def byte_ptr(builder, base, offset):
    """Pointer ``offset`` bytes past ``base``."""
    if isinstance(offset, int) and offset == 0:
        return base
    if isinstance(offset, int):
        offset = i64(offset)
    return builder.gep(base, [offset], source_etype=I8)


def call_pointer(builder, pointer, ftype, args):
    """Call the function at ``pointer`` (a ptr value) of type ``ftype``."""
    return builder.call(_Callee(pointer, ftype), args)


class _Callee:
    """A ptr value seen as a function of a given type (llvmlite's call reads
    ``function_type`` off its callee, which opaque pointers do not have)."""

    def __init__(self, pointer, ftype):
        self._pointer = pointer
        self.function_type = ftype

    def __getattr__(self, name):
        return getattr(self._pointer, name)


def set_target(module, target):
    """Make ``module`` one for ``target``: its triple and data layout, and whether ``target``
    converts half <-> float in hardware."""
    module.triple = target.triple
    module.data_layout = target.data_layout
    module.myelin_soft_half = not target.native_half


def _soft_half(builder):
    return getattr(builder.module, "myelin_soft_half", False)


def _memory_type(dtype):
    """The type :func:`load` and :func:`gather` read ``dtype`` elements as: the storage type,
    but a half's bits as i16 (converted by :func:`_from_memory`)."""
    return I16 if dtype == "float16" else storage_type(dtype)


def _from_memory(builder, value, dtype):
    """``value`` read as :func:`_memory_type` converted to the compute type of ``dtype``."""
    if dtype == "bool":
        return builder.icmp_unsigned("!=", value, const(value.type, 0))
    if dtype == "bfloat16":
        width = width_of(value)
        return builder.bitcast(builder.shl(builder.zext(value, vector_of(I32, width)),
                                           const(vector_of(I32, width), 16)),
                               vector_of(F32, width))
    if dtype == "float16":
        if _soft_half(builder):
            return half_to_float(builder, value)
        width = width_of(value)
        return builder.fpext(builder.bitcast(value, vector_of(ir.HalfType(), width)),
                             vector_of(F32, width))
    return value


def load(builder, ptr, dtype, width=1, align=None):
    """Load ``width`` elements of ``dtype`` at ``ptr`` and convert them to the compute type."""
    value = builder.load(ptr, typ=vector_of(_memory_type(dtype), width),
                         align=align or dtypes.itemsize(dtype))
    return _from_memory(builder, value, dtype)


def store(builder, value, ptr, dtype, align=None):
    """Convert ``value`` from the compute type of ``dtype`` and store it at ``ptr``."""
    builder.store(_to_memory(builder, value, dtype), ptr, align=align or dtypes.itemsize(dtype))


def masked_store(builder, value, ptr, dtype, mask):
    """Store the lanes of the vector ``value`` (the compute type of ``dtype``) where ``mask``
    (a vector of i1) holds at ``ptr``, as :func:`store` would; the others are not written,
    so they may lie outside the array (the counterpart of :func:`masked_load`)."""
    value = _to_memory(builder, value, dtype)
    if isinstance(value.type.element, ir.HalfType):
        value = builder.bitcast(value, vector_of(I16, mask.type.count))
    name = f"llvm.masked.store.v{mask.type.count}{_intrinsic_suffix(value.type.element)}.p0"
    module = builder.module
    function = module.globals.get(name) or ir.Function(
        module, ir.FunctionType(ir.VoidType(), [value.type, PTR, I32, mask.type]), name)
    builder.call(function, [value, ptr, ir.Constant(I32, dtypes.itemsize(dtype)), mask])


def _to_memory(builder, value, dtype):
    """``value`` of the compute type of ``dtype`` as :func:`store` writes it."""
    width = width_of(value)
    if dtype == "bool":
        return builder.zext(value, vector_of(I8, width))
    if dtype == "float16":
        return (float_to_half(builder, value) if _soft_half(builder)
                else builder.fptrunc(value, vector_of(ir.HalfType(), width)))
    if dtype == "bfloat16":
        return float_to_bfloat16(builder, value)
    return value


def half_to_float(builder, bits):
    """The float values of IEEE half-precision ``bits`` (i16 or a vector of i16), exactly, with
    integer operations: the exponent is rebiased; infinities and NaNs (quieted) keep the float
    maximum exponent; subnormals are renormalized by one exact float subtraction."""
    b, width = builder, width_of(bits)
    i32, f32 = vector_of(I32, width), vector_of(F32, width)
    h = b.zext(bits, i32)
    magnitude = b.shl(b.and_(h, const(i32, 0x7FFF)), const(i32, 13))
    exponent = b.and_(magnitude, const(i32, 0x7C00 << 13))
    normal = b.add(magnitude, const(i32, (127 - 15) << 23))
    special = b.or_(b.add(normal, const(i32, (128 - 16) << 23)),
                    b.select(b.icmp_unsigned("!=", magnitude, const(i32, 0x7C00 << 13)),
                             const(i32, 0x400000), const(i32, 0)))
    # A subnormal m * 2^-24 is (1 + m / 1024) * 2^-14 - 2^-14.
    renormalized = b.bitcast(b.fsub(b.bitcast(b.add(normal, const(i32, 1 << 23)), f32),
                                    const(f32, 2.0 ** -14)), i32)
    result = b.select(b.icmp_unsigned("==", exponent, const(i32, 0x7C00 << 13)), special,
                      b.select(b.icmp_unsigned("==", exponent, const(i32, 0)), renormalized,
                               normal))
    sign = b.shl(b.and_(h, const(i32, 0x8000)), const(i32, 16))
    return b.bitcast(b.or_(result, sign), f32)


def float_to_half(builder, value):
    """The IEEE half-precision bits (i16, or a vector) nearest ``value`` (float), ties to even,
    with integer operations: overflow gives infinity, NaN a quiet NaN keeping the payload's top
    bits, and results below the half normal range are rounded by one float addition that
    aligns them at the half subnormal spacing (2^-24)."""
    b, width = builder, width_of(value)
    i32, f32 = vector_of(I32, width), vector_of(F32, width)
    bits = b.bitcast(value, i32)
    magnitude = b.and_(bits, const(i32, 0x7FFFFFFF))
    # Special: |x| >= 2^16, infinity or NaN (65520 <= |x| < 2^16 overflows to infinity below).
    nan = b.or_(const(i32, 0x7E00), b.and_(b.lshr(magnitude, const(i32, 13)), const(i32, 0x3FF)))
    special = b.select(b.icmp_unsigned(">", magnitude, const(i32, 0x7F800000)), nan,
                       const(i32, 0x7C00))
    # Below 2^-14 (subnormal or zero half): 0.5 has ulp 2^-24, the half subnormal spacing, so
    # |x| + 0.5 rounds |x| to a multiple m of it, and m is in the low bits of the sum.
    magic = (127 - 15 + 23 - 10 + 1) << 23
    tiny = b.sub(b.bitcast(b.fadd(b.bitcast(magnitude, f32), const(f32, 0.5)), i32),
                 const(i32, magic))
    # Normal: rebias the exponent and round the 13 dropped bits to nearest, ties to even.
    odd = b.and_(b.lshr(magnitude, const(i32, 13)), const(i32, 1))
    rounded = b.add(b.add(magnitude, const(i32, ((15 - 127) << 23) + 0xFFF)), odd)
    normal = b.lshr(rounded, const(i32, 13))
    result = b.select(b.icmp_unsigned(">=", magnitude, const(i32, (127 + 16) << 23)), special,
                      b.select(b.icmp_unsigned("<", magnitude, const(i32, 113 << 23)), tiny,
                               normal))
    sign = b.lshr(b.and_(bits, const(i32, 0x80000000)), const(i32, 16))
    return b.trunc(b.or_(result, sign), vector_of(I16, width))


def float_to_bfloat16(builder, value):
    """The bfloat16 bits (i16, or a vector) nearest ``value`` (float), ties to even: the float's
    top 16 bits after adding half of the dropped part's unit (less one where the kept part is
    even), which carries into the exponent as rounding up should (to infinity past bfloat16's
    largest); NaN keeps its sign and top payload bits, made quiet."""
    b, width = builder, width_of(value)
    i32 = vector_of(I32, width)
    bits = b.bitcast(value, i32)
    odd = b.and_(b.lshr(bits, const(i32, 16)), const(i32, 1))
    rounded = b.lshr(b.add(b.add(bits, const(i32, 0x7FFF)), odd), const(i32, 16))
    quiet = b.or_(b.lshr(bits, const(i32, 16)), const(i32, 0x40))
    nan = b.icmp_unsigned(">", b.and_(bits, const(i32, 0x7FFFFFFF)), const(i32, 0x7F800000))
    return b.trunc(b.select(nan, quiet, rounded), vector_of(I16, width))


def convert(builder, value, from_dtype, to_dtype):
    """Convert a compute-type value of ``from_dtype`` to the compute type of ``to_dtype``."""
    width = width_of(value)
    source, target = compute_type(from_dtype), compute_type(to_dtype)
    target_v = vector_of(target, width)
    if source == target:
        return value
    if to_dtype == "bool":
        zero = const(vector_of(source, width), 0)
        return (builder.fcmp_unordered("!=", value, zero) if is_float(source)
                else builder.icmp_unsigned("!=", value, zero))
    if is_float(source) and is_float(target):
        widen = isinstance(target, ir.DoubleType)
        return builder.fpext(value, target_v) if widen else builder.fptrunc(value, target_v)
    if is_float(source):
        return (builder.fptoui(value, target_v) if to_dtype in UNSIGNED
                else builder.fptosi(value, target_v))
    unsigned = from_dtype in UNSIGNED or from_dtype == "bool"
    if is_float(target):
        return builder.uitofp(value, target_v) if unsigned else builder.sitofp(value, target_v)
    if source.width < target.width:
        return builder.zext(value, target_v) if unsigned else builder.sext(value, target_v)
    return builder.trunc(value, target_v)


def _open_loop(builder, start, stop, initial, name):
    """Emit a loop header with an i64 index from ``start`` and phis for ``initial`` values;
    leaves the builder in the body. Returns (index, carried phis, entry block, exit block)."""
    start = i64(start) if isinstance(start, int) else start
    stop = i64(stop) if isinstance(stop, int) else stop
    before = builder.block
    header = builder.append_basic_block(f"{name}.head")
    body = builder.append_basic_block(f"{name}.body")
    after = builder.append_basic_block(f"{name}.end")
    builder.branch(header)
    builder.position_at_end(header)
    index = builder.phi(I64, name=name)
    index.add_incoming(start, before)
    carried = []
    for value in initial:
        phi = builder.phi(value.type)
        phi.add_incoming(value, before)
        carried.append(phi)
    builder.cbranch(builder.icmp_signed("<", index, stop), body, after)
    builder.position_at_end(body)
    return index, carried, after


def _close_loop(builder, index, step, carried, next_values, after, name):
    """Step the index, feed ``next_values`` back into the phis and continue after the loop."""
    latch = builder.block
    index.add_incoming(builder.add(index, i64(step), name=f"{name}.next"), latch)
    for phi, value in zip(carried, next_values):
        phi.add_incoming(value, latch)
    builder.branch(index.parent)
    builder.position_at_end(after)


@contextlib.contextmanager
def for_range(builder, start, stop, step=1, name="i"):
    """Emit ``for (i = start; i < stop; i += step)`` and yield ``i`` (an i64) inside the body.

    ``start`` and ``stop`` are ints or i64 values; the loop is skipped when start >= stop.
    """
    index, _, after = _open_loop(builder, start, stop, [], name)
    yield index
    _close_loop(builder, index, step, [], [], after, name)


@contextlib.contextmanager
def accumulating_loop(builder, start, stop, initial, step=1, name="k"):
    """A counted loop carrying values: yields a handle with ``index`` and the current
    ``values``; the body must call ``set_next(values)`` once, and after the block the final
    values are ``handle.results``.
    """
    index, carried, after = _open_loop(builder, start, stop, initial, name)
    handle = _LoopHandle(index, carried)
    yield handle
    if handle.next is None:
        raise CompileError("accumulating loop body did not set its next values")
    _close_loop(builder, index, step, carried, handle.next, after, name)
    handle.results = carried


class _LoopHandle:
    def __init__(self, index, values):
        self.index = index
        self.values = values
        self.next = None
        self.results = None

    def set_next(self, values):
        self.next = list(values)
