"""Reading and writing ``.flow`` files, SLING's binary flow format, versions 3 to 6.

The format is little-endian without padding; a string is an int32 length followed by UTF-8 bytes::

    flow  = "flow" version:int32 [v>=5 flags:uint32]
            nvars var* nops op* nfuncs func* ncnx cnx* [v>=4 nblobs blob*]
    var   = [v>=5 flags] name naliases alias* dtype rank dim:int32* [v>=6 nattrs attr*]
            nbytes:uint64 data
    op    = [v>=5 flags] name type nin input* nout output* nattrs attr*
    func  = [v>=5 flags] name nops opname*
    cnx   = [v>=5 flags] name nlinks varname*
    blob  = [v>=5 flags] name type nattrs attr* nbytes:uint64 data
    attr  = name value

What each version holds, and so what writing an older version drops:

* v<6 has no variable attributes: they are not written.
* v<5 has no flag words: only a variable's REF flag survives, as a ``&`` prefix on its type.
  The reader accepts the prefix in every version; the writer uses it only below v5.
* v<4 has no blobs: writing a flow with blobs as v3 raises :class:`FlowError`.

The signature of a function that control-flow ops call (``Function.params`` and ``results``,
which SLING's format has no field for) is stored as a blob of type ``myelin.signature`` named
``myelin.signature:<function>``, whose data is JSON ``{"params": [names], "results": [names]}``;
the reader turns it back into the signature (it does not become a blob of the flow). So a flow
with signatures needs version 4 or later.

Reading follows SLING: every object is created through the :class:`~myelin.flow.graph.Flow`
API, names of inputs, outputs and connector links are looked up by variable name or alias, and
the first output of each op gets the op's name as an alias unless that name already names a
variable. Dynamic dimensions stay -1. Constant data is copied into writable NumPy arrays of the
variable's type and shape (bfloat16 in ml_dtypes' type); a type NumPy lacks (string, qint8, ...)
keeps its raw bits in an unsigned integer array of the same element size. An empty constant reads back as no
constant: the format cannot tell them apart.

Saving a loaded flow reproduces the file byte for byte when it was written in canonical form
(as SLING and this module write it): the writer leaves out the op-name aliases the reader added
(but keeps one the file listed itself), and writes a type alias (``float``, ``void``) as it was
spelled in the file. Every malformed input raises :class:`FlowFormatError` with the byte offset
of the fault, and nothing is allocated beyond what the file's size accounts for.
"""

import hashlib
import json
import math
import os
import secrets
import struct
import weakref

import numpy as np

from myelin.errors import FlowError, FlowFormatError, ShapeError
from myelin.flow import dtypes
from myelin.flow.graph import Flow, FuncFlags, OpFlags, VarFlags

MAGIC = 0x776F6C66
VERSIONS = range(3, 7)
DEFAULT_VERSION = 6
SIGNATURE = "myelin.signature"

_INT32 = struct.Struct("<i")
_UINT32 = struct.Struct("<I")
_UINT64 = struct.Struct("<Q")

# What the reader knew about a variable that the flow itself does not record: the type as the
# file spelled it when that is not the canonical name, and the op-name alias the reader added.
_DTYPE_SPELLING = weakref.WeakKeyDictionary()
_IMPLICIT_ALIAS = weakref.WeakKeyDictionary()


def load(source, flow=None):
    """Read a flow from ``source``: a path, a bytes-like object or a binary file object.

    The objects go into ``flow`` (which must be empty) or a new :class:`Flow`; the flow is
    returned. A malformed file raises FlowFormatError and leaves ``flow`` empty.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return from_bytes(source, flow)
    if hasattr(source, "read"):
        return from_bytes(source.read(), flow)
    with open(source, "rb") as file:
        return from_bytes(file.read(), flow)


def from_bytes(data, flow=None):
    """Read a flow from the bytes of a flow file (see :func:`load`)."""
    if flow is None:
        flow = Flow()
    elif flow.vars or flow.ops or flow.funcs or flow.cnxs or flow.blobs:
        raise FlowError("a flow file can only be loaded into an empty flow")
    try:
        _Reader(bytes(data), flow).read()
    except BaseException:
        _clear(flow)
        raise
    return flow


def save(flow, target, version=DEFAULT_VERSION):
    """Write ``flow`` as a flow file of ``version`` (3 to 6) to a path or a binary file object.

    A path is written atomically: to a temporary file in the same directory, then renamed.
    Nothing is written when the flow cannot be stored (FlowError).
    """
    pieces = _Writer(flow, version).pieces()
    if hasattr(target, "write"):
        for piece in pieces:
            target.write(piece)
        return
    directory, name = os.path.split(os.path.abspath(os.fspath(target)))
    temp = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.flow.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            for piece in pieces:
                file.write(piece)
        os.replace(temp, target)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def to_bytes(flow, version=DEFAULT_VERSION):
    """The bytes of ``flow`` as a flow file of ``version`` (3 to 6)."""
    return b"".join(_Writer(flow, version).pieces())


def digest(flow):
    """The SHA-256 (hex) of ``flow``'s version-6 file, computed without building the file:
    two flows have the same digest when they hold the same content. FlowError if the flow
    cannot be stored."""
    hasher = hashlib.sha256()
    for piece in _Writer(flow, DEFAULT_VERSION).pieces():
        hasher.update(piece)
    return hasher.hexdigest()


def stored_aliases(var):
    """The aliases of ``var`` that saving writes: all but an op-name alias the reader added."""
    implicit = _IMPLICIT_ALIAS.get(var)
    producer = var.producer
    if (implicit is None or producer is None or producer.name != implicit
            or not producer.outputs or producer.outputs[0] is not var):
        return list(var.aliases)
    return [alias for alias in var.aliases if alias != implicit]


def min_sizes(version):
    """The fewest bytes a variable, op, function, connector and blob take in ``version``.

    Every count read is checked against these before anything is allocated.
    """
    flags = 4 if version >= 5 else 0
    return {
        "var": flags + 4 * 4 + 8 + (4 if version >= 6 else 0),  # name aliases type rank nbytes
        "op": flags + 5 * 4,  # name type inputs outputs attrs
        "func": flags + 2 * 4,  # name ops
        "cnx": flags + 2 * 4,  # name links
        "blob": flags + 3 * 4 + 8,  # name type attrs nbytes
    }


def _clear(flow):
    """Empty a flow that a failed load had partly filled (connectors first: deleting a variable
    searches every connector)."""
    flow.cnxs.clear()
    for op in list(flow.ops.values()):
        flow.delete_op(op)
    for var in list(flow.vars.values()):
        flow.delete_var(var)
    flow.funcs.clear()
    flow.blobs.clear()
    flow.flags = 0


def _dtype_named(spelling):
    """The canonical type of a type name in a file ("" for none), or None if it is unknown."""
    if spelling in ("", "void"):
        return ""
    return dtypes.canonical(spelling) if dtypes.known(spelling) else None


def _storage_dtype(dtype):
    """The NumPy dtype holding constant data of a type: raw unsigned bits when NumPy lacks it."""
    try:
        return dtypes.to_numpy(dtype)
    except ShapeError:
        return np.dtype(f"u{dtypes.itemsize(dtype)}")


class _Reader:
    """Parses one flow file into an empty flow; every failure is a FlowFormatError."""

    def __init__(self, data, flow):
        self.data = data
        self.pos = 0
        self.flow = flow
        self.version = None

    # Primitive fields.
    def _need(self, size, what):
        left = len(self.data) - self.pos
        if size > left:
            raise FlowFormatError(f"unexpected end of file in {what}: {size} bytes needed, "
                                  f"{left} left", self.pos)

    def _unpack(self, codec, what):
        self._need(codec.size, what)
        (value,) = codec.unpack_from(self.data, self.pos)
        self.pos += codec.size
        return value

    def int32(self, what):
        return self._unpack(_INT32, what)

    def flags(self, what):
        """A flag word (v>=5; 0 before), read unsigned so that every bit is kept."""
        return self._unpack(_UINT32, what) if self.version >= 5 else 0

    def count(self, what, item_size):
        """A non-negative int32 count of items of at least ``item_size`` bytes that fit."""
        start = self.pos
        n = self.int32(what)
        if n < 0:
            raise FlowFormatError(f"negative {what} {n}", start)
        left = len(self.data) - self.pos
        if n * item_size > left:
            raise FlowFormatError(f"{what} {n} needs at least {n * item_size} bytes, "
                                  f"only {left} left in the file", start)
        return n

    def string(self, what):
        n = self.count(f"length of {what}", 1)
        start = self.pos
        self.pos += n
        try:
            return self.data[start:self.pos].decode("utf-8")
        except UnicodeDecodeError as e:
            raise FlowFormatError(f"{what} is not valid UTF-8", start + e.start) from None

    def blob_bytes(self, what):
        """A uint64 byte count and that many bytes: (offset of the bytes, count)."""
        start = self.pos
        n = self._unpack(_UINT64, f"size of {what}")
        left = len(self.data) - self.pos
        if n > left:
            raise FlowFormatError(f"{what} has {n} bytes, only {left} left in the file", start)
        offset = self.pos
        self.pos += n
        return offset, n

    def attrs(self, target, owner):
        for _ in range(self.count(f"attribute count of {owner}", 8)):
            start = self.pos
            name = self.string(f"attribute name of {owner}")
            value = self.string(f"attribute {name!r} of {owner}")
            if name in target:
                raise FlowFormatError(f"{owner} has attribute {name!r} twice", start)
            target[name] = value

    def lookup_var(self, role, owner):
        """A variable referenced by name or alias: (variable, offset of the name)."""
        start = self.pos
        name = self.string(f"{role} of {owner}")
        var = self.flow.var_named(name)
        if var is None:
            raise FlowFormatError(f"{owner} has unknown {role} {name!r}", start)
        return var, start

    # Sections.
    def read(self):
        if self.int32("magic number") != MAGIC:
            raise FlowFormatError("not a flow file (bad magic number)", 0)
        self.version = self.int32("version")
        if self.version not in VERSIONS:
            raise FlowFormatError(f"unsupported flow file version {self.version} "
                                  f"(supported: 3 to 6)", 4)
        sizes = min_sizes(self.version)
        self.flow.flags = self.flags("flow flags")
        aliases = [self.variable() for _ in range(self.count("variable count", sizes["var"]))]
        # Aliases are registered once every variable exists: like Flow.add_alias, a file may
        # give a variable an alias that is another variable's name.
        for var, names in aliases:
            for alias in names:
                self.flow.add_alias(var, alias)
        for _ in range(self.count("operation count", sizes["op"])):
            self.operation()
        for _ in range(self.count("function count", sizes["func"])):
            self.function()
        for _ in range(self.count("connector count", sizes["cnx"])):
            self.connector()
        if self.version >= 4:
            for _ in range(self.count("blob count", sizes["blob"])):
                self.blob()
        if self.pos != len(self.data):
            raise FlowFormatError(f"{len(self.data) - self.pos} bytes of trailing garbage after "
                                  f"the last section", self.pos)

    def variable(self):
        """Read a variable: (the variable, its aliases), for the aliases are added later."""
        start = self.pos
        flags = self.flags("variable flags")
        name = self.string("variable name")
        owner = f"variable {name!r}"
        aliases = {}  # an ordered set
        for _ in range(self.count(f"alias count of {owner}", 4)):
            alias_start = self.pos
            alias = self.string(f"alias of {owner}")
            if alias == name:
                raise FlowFormatError(f"{owner} lists its own name as an alias", alias_start)
            if alias in aliases:
                raise FlowFormatError(f"{owner} lists alias {alias!r} twice", alias_start)
            aliases[alias] = None
        type_start = self.pos
        spelling = self.string(f"type of {owner}")
        if spelling.startswith("&"):
            flags |= VarFlags.REF
            spelling = spelling[1:]
        dtype = _dtype_named(spelling)
        if dtype is None:
            raise FlowFormatError(f"{owner} has unknown data type {spelling!r}", type_start)
        shape = []
        for _ in range(self.count(f"rank of {owner}", 4)):
            dim_start = self.pos
            dim = self.int32(f"shape of {owner}")
            if dim < -1:
                raise FlowFormatError(f"{owner} has invalid dimension {dim}", dim_start)
            shape.append(dim)
        try:
            var = self.flow.var(name, dtype, shape)
        except FlowError as e:
            raise FlowFormatError(f"duplicate name: {e}", start) from None
        var.flags = VarFlags(flags)
        if spelling != dtype:
            _DTYPE_SPELLING[var] = spelling
        if self.version >= 6:
            self.attrs(var.attrs, owner)
        data_start = self.pos
        offset, nbytes = self.blob_bytes(f"data of {owner}")
        if nbytes:
            var.data = self.constant(var, offset, nbytes, data_start)
        return var, aliases

    def constant(self, var, offset, nbytes, start):
        """The array of a variable's constant data of ``nbytes`` bytes at ``offset``."""
        owner = f"constant {var.name!r}"
        if not var.dtype:
            raise FlowFormatError(f"{owner} has data but no type", start)
        if not var.shape_defined:
            raise FlowFormatError(f"{owner} has dynamic dimensions {list(var.shape)}", start)
        storage = _storage_dtype(var.dtype)
        needed = storage.itemsize
        for dim in var.shape:
            needed *= dim
            if needed > nbytes:  # already wrong: stop before the product grows huge
                break
        if needed != nbytes:
            raise FlowFormatError(f"{owner} has {nbytes} bytes of data, which do not fit "
                                  f"{var.dtype} shape {list(var.shape)} ({storage.itemsize} "
                                  f"bytes per element)", start)
        array = np.frombuffer(self.data, storage.newbyteorder("<"), nbytes // storage.itemsize,
                              offset)
        return array.astype(storage).reshape(var.shape)

    def operation(self):
        start = self.pos
        flags = self.flags("operation flags")
        name = self.string("operation name")
        owner = f"operation {name!r}"
        op_type = self.string(f"type of {owner}")
        try:
            op = self.flow.op(name, op_type)
        except FlowError as e:
            raise FlowFormatError(f"duplicate name: {e}", start) from None
        op.flags = OpFlags(flags)
        for _ in range(self.count(f"input count of {owner}", 4)):
            var, _ = self.lookup_var("input", owner)
            op.add_input(var)
        for _ in range(self.count(f"output count of {owner}", 4)):
            var, var_start = self.lookup_var("output", owner)
            try:
                op.add_output(var)
            except FlowError as e:
                raise FlowFormatError(str(e), var_start) from None
        if op.outputs and self.flow.var_named(name) is None:
            self.flow.add_alias(op.outputs[0], name)
            _IMPLICIT_ALIAS[op.outputs[0]] = name
        self.attrs(op.attrs, owner)

    def function(self):
        start = self.pos
        flags = self.flags("function flags")
        name = self.string("function name")
        owner = f"function {name!r}"
        if name in self.flow.funcs:
            raise FlowFormatError(f"duplicate name: function {name} already exists", start)
        func = self.flow.func(name)
        func.flags = FuncFlags(flags)
        for _ in range(self.count(f"operation count of {owner}", 4)):
            op_start = self.pos
            op_name = self.string(f"operation of {owner}")
            op = self.flow.ops.get(op_name)
            if op is None:
                raise FlowFormatError(f"{owner} has unknown operation {op_name!r}", op_start)
            if op.func is not None:
                raise FlowFormatError(f"operation {op_name!r} of {owner} already belongs to "
                                      f"function {op.func.name!r}", op_start)
            func.add(op)

    def connector(self):
        start = self.pos
        flags = self.flags("connector flags")
        name = self.string("connector name")
        owner = f"connector {name!r}"
        try:
            cnx = self.flow.cnx(name)
        except FlowError as e:
            raise FlowFormatError(f"duplicate name: {e}", start) from None
        cnx.flags = flags
        linked = set()
        for _ in range(self.count(f"link count of {owner}", 4)):
            var, var_start = self.lookup_var("link", owner)
            if id(var) in linked:
                raise FlowFormatError(f"{owner} links variable {var.name!r} twice", var_start)
            linked.add(id(var))
            cnx.add(var)

    def blob(self):
        start = self.pos
        flags = self.flags("blob flags")
        name = self.string("blob name")
        owner = f"blob {name!r}"
        blob_type = self.string(f"type of {owner}")
        if blob_type == SIGNATURE:
            self.signature(name, owner, start)
            return
        try:
            blob = self.flow.blob(name, blob_type)
        except FlowError as e:
            raise FlowFormatError(f"duplicate name: {e}", start) from None
        blob.flags = flags
        self.attrs(blob.attrs, owner)
        offset, nbytes = self.blob_bytes(f"data of {owner}")
        blob.data = self.data[offset:offset + nbytes]


    def signature(self, name, owner, start):
        """Read a signature blob into its function's params and results."""
        self.attrs({}, owner)
        offset, nbytes = self.blob_bytes(f"data of {owner}")
        func = self.flow.funcs.get(name.removeprefix(SIGNATURE + ":"))
        try:
            listed = json.loads(bytes(self.data[offset:offset + nbytes]))
            params = [self.flow.vars[n] for n in listed["params"]]
            results = [self.flow.vars[n] for n in listed["results"]]
        except (ValueError, KeyError, TypeError) as e:
            raise FlowFormatError(f"{owner} is not a signature of variables of this flow: "
                                  f"{e}", start) from None
        if func is None or func.results is not None:
            raise FlowFormatError(f"{owner} is not the only signature of a function of the "
                                  f"flow", start)
        func.params, func.results = params, results


class _Writer:
    """Encodes a flow, checking everything first, into byte pieces that are written in order."""

    def __init__(self, flow, version):
        if not isinstance(version, int) or isinstance(version, bool) or version not in VERSIONS:
            raise FlowError(f"cannot write flow file version {version!r} (supported: 3 to 6)")
        self.flow = flow
        self.version = version
        self._pieces = []
        self._buffer = bytearray()

    def pieces(self):
        """The file as a list of bytes-like pieces; FlowError if the flow cannot be stored."""
        flow = self.flow
        if self.version < 4 and flow.blobs:
            raise FlowError(f"flow file version {self.version} cannot hold blobs "
                            f"({', '.join(flow.blobs)}); use version 4 or later")
        self.uint32(MAGIC, "magic")
        self.int32(self.version, "version")
        self.flags(flow.flags, "flow")
        self.count(flow.vars, "variables")
        for var in flow.vars.values():
            self.variable(var)
        self.count(flow.ops, "operations")
        for op in flow.ops.values():
            self.operation(op)
        self.count(flow.funcs, "functions")
        for func in flow.funcs.values():
            self.function(func)
        self.count(flow.cnxs, "connectors")
        for cnx in flow.cnxs.values():
            self.connector(cnx)
        signed = [func for func in flow.funcs.values() if func.results is not None]
        if self.version < 4 and signed:
            raise FlowError(f"flow file version {self.version} cannot hold the signatures of "
                            f"{', '.join(f.name for f in signed)}; use version 4 or later")
        if self.version >= 4:
            self.count(list(flow.blobs) + signed, "blobs")
            for blob in flow.blobs.values():
                self.blob(blob)
            for func in signed:
                self.signature(func)
        self._pieces.append(self._buffer)
        return self._pieces

    # Primitive fields.
    def int32(self, value, what):
        if not isinstance(value, int) or not -2**31 <= value < 2**31:
            raise FlowError(f"{what} must be a 32-bit integer, not {value!r}")
        self._buffer += _INT32.pack(value)

    def uint32(self, value, what):
        if not isinstance(value, int) or not 0 <= value < 2**32:
            raise FlowError(f"{what} must be an unsigned 32-bit integer, not {value!r}")
        self._buffer += _UINT32.pack(value)

    def flags(self, value, owner):
        if self.version >= 5:
            self.uint32(value, f"flags of {owner}")

    def count(self, items, what):
        self.int32(len(items), f"number of {what}")

    def string(self, value, what):
        if not isinstance(value, str):
            raise FlowError(f"{what} must be a str, not {type(value).__name__}: {value!r}")
        try:
            encoded = value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise FlowError(f"{what} {value!r} cannot be encoded as UTF-8: {e}") from None
        self.int32(len(encoded), f"length of {what}")
        self._buffer += encoded

    def data(self, view):
        """A uint64 byte count followed by the bytes of a flat uint8 buffer."""
        self._buffer += _UINT64.pack(len(view))
        if len(view):
            self._pieces += [self._buffer, view]
            self._buffer = bytearray()

    def attrs(self, attrs, owner):
        self.count(attrs, f"attributes of {owner}")
        for name, value in attrs.items():
            self.string(name, f"attribute name of {owner}")
            self.string(value, f"attribute {name!r} of {owner}")

    def member(self, obj, table, what):
        """The name of an object that must belong to this flow (``table`` is its registry)."""
        name = getattr(obj, "name", None)
        self.string(name, f"{what} name")
        if table.get(name) is not obj:
            raise FlowError(f"{what} {name!r} is not registered under its name in this flow")

    # Objects.
    def variable(self, var):
        owner = f"variable {var.name!r}"
        self.flags(var.flags, owner)
        self.member(var, self.flow.vars, "variable")
        aliases = stored_aliases(var)
        if var.name in aliases or len(set(aliases)) != len(aliases):
            raise FlowError(f"{owner} has repeated aliases {aliases}")
        self.count(aliases, f"aliases of {owner}")
        for alias in aliases:
            self.string(alias, f"alias of {owner}")
        if var.dtype != "" and _dtype_named(var.dtype) != var.dtype:
            raise FlowError(f"{owner} has unknown or non-canonical data type {var.dtype!r}")
        spelling = _DTYPE_SPELLING.get(var)
        if spelling is None or _dtype_named(spelling) != var.dtype:
            spelling = var.dtype
        ref_prefix = "&" if self.version < 5 and var.ref else ""
        self.string(ref_prefix + spelling, f"type of {owner}")
        self.count(var.shape, f"dimensions of {owner}")
        for dim in var.shape:
            if not isinstance(dim, int) or dim < -1:
                raise FlowError(f"{owner} has invalid dimension {dim!r}")
            self.int32(dim, f"dimension of {owner}")
        if self.version >= 6:
            self.attrs(var.attrs, owner)
        self.data(self.constant(var))

    def constant(self, var):
        """The constant data of a variable as flat little-endian bytes (empty when none)."""
        if var.data is None:
            return b""
        owner = f"constant {var.name!r}"
        if not var.dtype:
            raise FlowError(f"{owner} has data but no type")
        if not var.shape_defined:
            raise FlowError(f"{owner} has dynamic dimensions {list(var.shape)}")
        data = var.data
        storage = _storage_dtype(var.dtype)
        if not isinstance(data, np.ndarray) or data.dtype != storage:
            described = data.dtype if isinstance(data, np.ndarray) else type(data).__name__
            raise FlowError(f"{owner} of type {var.dtype} holds {described} data, "
                            f"not {storage}")
        if data.size != math.prod(var.shape):
            raise FlowError(f"{owner} has {data.size} elements but shape {list(var.shape)} "
                            f"needs {math.prod(var.shape)}")
        flat = np.ascontiguousarray(data).reshape(-1).astype(storage.newbyteorder("<"), copy=False)
        return memoryview(flat.view(np.uint8))

    def operation(self, op):
        owner = f"operation {op.name!r}"
        self.flags(op.flags, owner)
        self.member(op, self.flow.ops, "operation")
        self.string(op.type, f"type of {owner}")
        self.count(op.inputs, f"inputs of {owner}")
        for var in op.inputs:
            self.member(var, self.flow.vars, f"input of {owner}")
        self.count(op.outputs, f"outputs of {owner}")
        for var in op.outputs:
            self.member(var, self.flow.vars, f"output of {owner}")
            if var.producer is not op:
                raise FlowError(f"{owner} lists output {var.name!r}, whose producer is "
                                f"{var.producer and var.producer.name!r}")
        self.attrs(op.attrs, owner)

    def function(self, func):
        owner = f"function {func.name!r}"
        self.flags(func.flags, owner)
        self.member(func, self.flow.funcs, "function")
        self.count(func.ops, f"operations of {owner}")
        for op in func.ops:
            if op.func is not func:
                raise FlowError(f"{owner} lists operation {op.name!r}, which belongs to "
                                f"{op.func and op.func.name!r}")
            self.member(op, self.flow.ops, f"operation of {owner}")
        if len(set(map(id, func.ops))) != len(func.ops):
            raise FlowError(f"{owner} lists an operation twice")

    def connector(self, cnx):
        owner = f"connector {cnx.name!r}"
        self.flags(cnx.flags, owner)
        self.member(cnx, self.flow.cnxs, "connector")
        self.count(cnx.links, f"links of {owner}")
        for var in cnx.links:
            self.member(var, self.flow.vars, f"link of {owner}")
        if len(set(map(id, cnx.links))) != len(cnx.links):
            raise FlowError(f"{owner} links a variable twice")

    def signature(self, func):
        owner = f"signature of function {func.name!r}"
        for var in func.params + func.results:
            if self.flow.vars.get(var.name) is not var:
                raise FlowError(f"the {owner} names {var.name!r}, not a variable of this flow")
        self.flags(0, owner)
        self.string(f"{SIGNATURE}:{func.name}", f"name of the {owner}")
        self.string(SIGNATURE, f"type of the {owner}")
        self.attrs({}, owner)
        listed = {"params": [v.name for v in func.params],
                  "results": [v.name for v in func.results]}
        self.data(memoryview(json.dumps(listed).encode()))

    def blob(self, blob):
        owner = f"blob {blob.name!r}"
        self.flags(blob.flags, owner)
        self.member(blob, self.flow.blobs, "blob")
        self.string(blob.type, f"type of {owner}")
        self.attrs(blob.attrs, owner)
        try:
            view = memoryview(blob.data)
        except TypeError:
            raise FlowError(f"data of {owner} must be bytes-like, "
                            f"not {type(blob.data).__name__}") from None
        self.data(view.cast("B") if view.c_contiguous else memoryview(view.tobytes()))
