"""Compiled models that travel: networks, ONNX models and control-flow programs saved to bytes
or files and loaded in another process without compiling.

A compiled :class:`~myelin.runtime.Network` keeps what the compiler made of it, its
:class:`Image`: the object files of its cells and kernel functions (machine code, made for
the compile's CPU features) and the table of the external symbols they use
(:mod:`myelin.codegen.llvm.externals`: globals, packed weights, profile counters, the
worker pool). Saving writes the image with the network's globals (their current values:
learnable parameters as trained), the arrays its kernels packed at compile time, the layout
of every cell (tensors, offsets, steps) and the worker pool's code compiled for the same
target (:func:`myelin.codegen.llvm.threads.object_code`). Loading places the globals and
arrays in this process, binds the symbols to them and to this process's worker pool
(:func:`~myelin.codegen.llvm.externals.rebind`, as the compile cache does; a process
without a pool makes it from the saved code) and links the object files
(:func:`~myelin.codegen.llvm.engine.load_objects`): no flow is optimized, no kernel
emitted, nothing compiled. The optimized flow comes along (without the constants' data,
which are the network's globals) when it can be written as a ``.flow`` file.

``pickle`` uses the same bytes (``Network``, ``Cell``, ``OnnxModel`` and
:class:`myelin.control.Program` reduce to them), so a process pool or a cluster worker gets
a network ready to compute. :func:`save` and :func:`load` keep one on disk.

The format (:data:`FORMAT`), little-endian::

    magic "MYELINM\\0"  format:u32  header size:u32  payload offset:u64  payload size:u64
    CRC-32:u32  0:u32  header (JSON)  padding  payload

The payload begins within 64 bytes after the header: in a file at a multiple of 64, in a
pickle at 16 past one (SHIFT).

The CRC-32 covers the header and the payload, so a truncated, extended or damaged file is
refused before anything in it is read (a check against damage, not a signature: see Trust).
The header says what the file holds (``kind``: "network", or "pickle" for an ONNX model or
a program, whose networks are nested network bytes), the myelin version that wrote it, and
where each blob lies in the payload (at multiples of 64 bytes). A network's header also holds
its target (triple, CPU, features), its worker pool's size, its tensors and cells, and its
symbol table; loading checks every field's type and range, every blob's place and size,
that every symbol the code leaves undefined is bound or found in this process, and that
this CPU has every feature the code was compiled for (:func:`check_target`: else
:class:`~myelin.errors.SerializationError` names the missing ones). Files of another format
version or myelin version are refused.

The arrays are used where they lie when the payload is aligned in memory (a file is mapped
so that it is; a pickle's bytes object usually is, see SHIFT), else the payload is copied
once.

Trust: a saved model is machine code. Loading one runs none of it until a cell computes,
and a pickled model is unpickled with only myelin's and NumPy's classes allowed, but no
check can vouch for code: load files you would run as programs.
"""

import ctypes
import dataclasses
import io
import json
import math
import mmap
import os
import pickle
import struct
import tempfile
import zlib

import llvmlite.binding as llvm
import numpy as np

from myelin import version as myelin_version
from myelin.codegen.llvm import elf, engine, externals, threads
from myelin.codegen.llvm import target as targets
from myelin.errors import CompileError, FlowError, FlowFormatError, SerializationError
from myelin.flow import dtypes, fileformat
from myelin.flow.attributes import Attributes
from myelin.memory import aligned_zeros
from myelin.plan.cell import Step, TensorSpec
from myelin.runtime.network import Cell, Network

FORMAT = 1
MAGIC = b"MYELINM\0"
ALIGN = 64
# A pickle's payload begins SHIFT bytes past a multiple of ALIGN, so that it is aligned where
# a large bytes object holds it: glibc's malloc places a large block 16 bytes into the pages
# it maps, and the bytes' data begins 32 bytes into the object, so a network's pickle
# unpickles with its arrays aligned, used where they lie (elsewhere they are copied). A
# file's begins at a multiple of ALIGN: it is mapped into memory at a page.
SHIFT = 16
# magic, format, header size, where the payload begins, its size, CRC-32, 0
_FRAME = struct.Struct("<8sIIQQII")
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)    # (the pages mapped at once, not one by one)
_STRIPPED = "myelin.saved.global"    # attribute of a flow constant whose data is a global
_KINDS = ("network", "pickle")
_DTYPES = {np.dtype(name).str for name in ("bool", "int8", "uint8", "int16", "uint16",
                                            "int32", "uint32", "int64", "uint64", "float16",
                                            "float32", "float64", "complex64", "complex128")}
_SPEC_KINDS = ("input", "output", "local", "constant", "learnable")


@dataclasses.dataclass
class Image:
    """What a network's machine code is made of: the object files (the cells' module first,
    then the kernel functions'), the symbol table ``[(symbol, key, size)]`` of
    :meth:`~myelin.codegen.llvm.externals.Externals.table`, the function symbol of each cell
    by name, and the size of the worker pool the code calls."""
    objects: list
    symbols: list
    cells: dict
    threads: int


# The frame.
def pack(kind, header, blobs, shift=SHIFT):
    """The bytes of a file holding ``header`` (a JSON dict, given ``kind`` and the blobs'
    places here) and the bytes-like ``blobs``, the payload at ``shift`` bytes past a multiple
    of ALIGN."""
    places, end = [], 0
    blobs = [memoryview(blob).cast("B") for blob in blobs]
    for blob in blobs:
        places.append([end, blob.nbytes])
        end = _aligned(end + blob.nbytes)
    text = json.dumps({**header, "kind": kind, "myelin": myelin_version.__version__,
                       "blobs": places}, separators=(",", ":")).encode()
    start = _FRAME.size + len(text)
    start += (shift - start) % ALIGN
    pieces = [text, bytes(start - _FRAME.size - len(text))]
    for blob, (offset, size) in zip(blobs, places):
        pieces += [blob, bytes(_aligned(offset + size) - offset - size)]
    checksum = 0
    for piece in pieces:
        checksum = zlib.crc32(piece, checksum)
    frame = _FRAME.pack(MAGIC, FORMAT, len(text), start, end, checksum, 0)
    return b"".join([frame] + pieces)


def unpack(data, kinds=_KINDS, placed=False):
    """(header, blobs) of the bytes ``data`` made by :func:`pack`, its frame, checksum and
    blob places checked and its kind one of ``kinds``; SerializationError if anything is
    wrong. The blobs are memoryviews of ``data``; with ``placed``, a network's are uint8
    arrays aligned to :data:`ALIGN` bytes: views of ``data`` where its payload lies aligned
    (read-only if ``data`` is), else of one copy of the payload."""
    data = memoryview(data).cast("B")
    if data.nbytes < _FRAME.size or bytes(data[:len(MAGIC)]) != MAGIC:
        raise SerializationError("not a saved myelin model (no myelin header)")
    _, version, header_size, start, payload_size, checksum, _ = _FRAME.unpack_from(data)
    if version != FORMAT:
        raise SerializationError(f"a saved myelin model of format {version}; this myelin "
                                 f"reads format {FORMAT}")
    if not 0 <= start - _FRAME.size - header_size < ALIGN:
        raise SerializationError("the saved myelin model's frame is damaged (its payload does "
                                 "not follow its header)")
    if data.nbytes != start + payload_size:
        raise SerializationError(f"a saved myelin model of {start + payload_size} bytes is "
                                 f"{data.nbytes} bytes long (truncated or extended)")
    if zlib.crc32(data[_FRAME.size:]) != checksum:
        raise SerializationError("the saved myelin model is damaged (its checksum does not "
                                 "match its contents)")
    try:
        header = json.loads(bytes(data[_FRAME.size:_FRAME.size + header_size]))
    except (ValueError, RecursionError):
        raise SerializationError("the saved myelin model's header is not JSON") from None
    _expect(isinstance(header, dict) and header.get("kind") in kinds, "kind")
    if header.get("myelin") != myelin_version.__version__:
        raise SerializationError(f"the model was saved by myelin {header.get('myelin')!r}; "
                                 f"this is myelin {myelin_version.__version__}: compile it again")
    places = header.get("blobs")
    _expect(isinstance(places, list), "blob list")
    payload, blobs = data[start:], []
    if placed and header["kind"] == "network":
        array = np.frombuffer(payload, np.uint8)
        if array.ctypes.data % ALIGN:
            array = _aligned_empty(payload.nbytes)
            array[...] = np.frombuffer(payload, np.uint8)
        payload = array
    for place in places:
        _expect(isinstance(place, list) and len(place) == 2 and all(map(_count, place))
                and place[0] % ALIGN == 0 and sum(place) <= payload_size, "blob place")
        blobs.append(payload[place[0]:place[0] + place[1]])
    return header, blobs


# Saving and loading.
def dumps(value, shift=SHIFT):
    """The bytes of a Network, an OnnxModel or a control-flow Program (as saved; a network's
    payload at ``shift``, see SHIFT)."""
    if isinstance(value, Network):
        return network_bytes(value, shift)
    kind = _pickled_class(value)
    return pack("pickle", {"class": kind}, [pickle.dumps(value, protocol=5)])


def loads(data, expected=None):
    """The Network, OnnxModel or Program saved in the bytes ``data``; ``expected``, a class,
    refuses anything else (SerializationError)."""
    header, blobs = unpack(data, placed=True)
    if header["kind"] == "network":
        value = _network(header, blobs)
    else:
        _expect(header.get("class") in _PICKLED and len(blobs) == 1, "pickled class")
        try:
            value = _Unpickler(io.BytesIO(blobs[0])).load()
        except SerializationError:
            raise
        except Exception as error:      # (whatever a bad pickle raises)
            raise SerializationError(f"the saved {header['class']} does not load: "
                                     f"{error}") from None
        if type(value).__name__ != header["class"]:
            raise SerializationError(f"the saved model holds a {type(value).__name__}, not "
                                     f"the {header['class']} its header says")
    if expected is not None and not isinstance(value, expected):
        raise SerializationError(f"the saved model is a {type(value).__name__}, not a "
                                 f"{expected.__name__}")
    return value


def save(value, path):
    """Write ``value`` (a Network, OnnxModel or Program) to the file ``path``, atomically
    (a file of the same name is replaced only once the new one is complete, so that a
    process that mapped the old one keeps it)."""
    data = dumps(value, 0)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(".tmp", f".{os.path.basename(path)}.", directory)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        os.remove(temporary)
        raise


def load(path, expected=None):
    """The Network, OnnxModel or Program saved in the file ``path`` (see :func:`loads`).

    The file is mapped into memory read-only: a network's constants are used where they lie,
    and processes that load one file share their memory (the system's cache of the file);
    learnable parameters are copied. (So a saved file must not be changed in place while a
    network loaded from it lives; :func:`save` replaces files whole.) Where it cannot be
    mapped, it is read."""
    with open(os.fspath(path), "rb") as file:
        size = os.fstat(file.fileno()).st_size
        try:
            data = mmap.mmap(file.fileno(), size, mmap.MAP_PRIVATE | _POPULATE,
                             mmap.PROT_READ)
        except (AttributeError, OSError, ValueError):      # (empty, or not on this system)
            data = _aligned_empty(size)
            if file.readinto(memoryview(data)) != size or file.read(1):
                raise SerializationError(f"{os.fspath(path)} changed while it was read") \
                    from None
    try:
        return loads(data, expected)
    except SerializationError as error:
        raise SerializationError(f"{os.fspath(path)}: {error}") from None


_PICKLED = {"OnnxModel": "myelin.importers.onnx.model", "Program": "myelin.control.program"}


def _pickled_class(value):
    for name, module in _PICKLED.items():
        cls = type(value)
        if cls.__name__ == name and cls.__module__ == module:
            return name
    raise SerializationError(f"cannot save a {type(value).__name__}: myelin saves Networks, "
                             f"OnnxModels and control-flow Programs")


class _Unpickler(pickle.Unpickler):
    """An unpickler that makes only myelin's classes and functions, NumPy's arrays and
    plain built-in values."""

    _BUILTINS = frozenset({"set", "frozenset", "slice", "complex", "range", "bytearray"})

    def find_class(self, module, name):
        if (module == "myelin" or module.startswith("myelin.")) or \
                (module in ("builtins", "__builtin__") and name in self._BUILTINS) or \
                (module in ("collections",) and name == "OrderedDict") or \
                (module.split(".")[0] == "numpy" and name in ("_reconstruct", "ndarray",
                                                              "dtype", "scalar",
                                                              "_frombuffer")):
            return super().find_class(module, name)
        raise SerializationError(f"the saved model refers to {module}.{name}, which a saved "
                                 f"myelin model never holds")


# Networks.
def network_bytes(network, shift=SHIFT):
    """The bytes of ``network`` (compiled for the CPU: it has an :class:`Image`), its payload
    at ``shift`` (see SHIFT)."""
    image = getattr(network, "image", None)
    if image is None:
        raise SerializationError(f"cannot save or pickle this {type(network).__name__}: it "
                                 f"keeps no machine code (only networks compiled for the "
                                 f"CPU by myelin.Compiler do)")
    blobs = list(image.objects)
    specs, index = [], {}

    def spec_index(spec):
        if id(spec) not in index:
            index[id(spec)] = len(specs)
            specs.append(spec)
        return index[id(spec)]

    globals_ = []
    for spec, array in network._globals.values():
        globals_.append([spec_index(spec), len(blobs)])
        blobs.append(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    arrays = []
    for array in network._packed:
        array = np.ascontiguousarray(array)
        arrays.append([array.dtype.str, list(array.shape), len(blobs)])
        blobs.append(array.reshape(-1).view(np.uint8))
    cells = []
    for cell in network.cells:
        tensors = [spec_index(spec) for spec in cell.tensors]
        steps = [_step_record(step, spec_index) for step in cell.steps]
        counters = cell._counters
        cells.append({"name": cell.name, "symbol": image.cells[cell.name], "tensors": tensors,
                      "steps": steps, "instance_size": cell.instance_size,
                      "unshared_size": cell.unshared_size,
                      "alignment": cell.instance_alignment,
                      "counters": None if counters is None else list(counters.shape)})
    records = []
    while len(records) < len(specs):     # (a record may name more: shares, views, slices)
        records.append(_spec_record(specs[len(records)], spec_index))
    flow = None
    if network.flow is not None:
        try:
            stripped = _stripped_flow(network)
            flow = len(blobs)
            blobs.append(fileformat.to_bytes(stripped))
        except FlowError:
            flow = None
    target = network.target
    pool = len(blobs)
    blobs.append(threads.object_code(target))
    header = {"target": {"triple": target.triple, "cpu": target.cpu,
                         "features": target.features},
              "threads": image.threads, "pool": pool, "objects": list(range(len(image.objects))),
              "symbols": [[symbol, list(key), size] for symbol, key, size in image.symbols],
              "specs": records,
              "globals": globals_, "arrays": arrays, "cells": cells, "flow": flow}
    return pack("network", header, blobs, shift)


def network_from_bytes(data):
    """The Network saved in the bytes ``data`` (what pickling a Network unpickles with)."""
    header, blobs = unpack(data, ("network",), placed=True)
    return _network(header, blobs)


def _spec_record(spec, spec_index):
    return {"name": spec.name, "dtype": spec.dtype, "shape": list(spec.shape),
            "kind": spec.kind, "aliases": list(spec.aliases), "is_output": spec.is_output,
            "alignment": spec.alignment, "offset": spec.offset, "first": spec.first,
            "last": spec.last, "ref": spec.ref,
            "shares": None if spec.shares is None else spec_index(spec.shares),
            "view_of": None if spec.view_of is None else spec_index(spec.view_of),
            "slice_of": None if spec.slice_of is None else spec_index(spec.slice_of),
            "slice_offset": spec.slice_offset}


def _step_record(step, spec_index):
    kernel = step.kernel
    return {"name": step.name, "type": step.type,
            "inputs": [spec_index(spec) for spec in step.inputs],
            "outputs": [spec_index(spec) for spec in step.outputs],
            "attrs": {str(k): str(v) for k, v in step.attrs.items()},
            "variant": step.variant or "", "kernel": kernel.kernel_name(step),
            "flops": int(kernel.flops(step)) if hasattr(kernel, "flops") else 0,
            "view": bool(kernel.view(step)), "inplace": [int(i) for i in kernel.inplace(step)]}


def _stripped_flow(network):
    """A copy of the network's flow without the data of the constants that are globals of
    the network (saved once, as globals), each marked to get it back, and without the
    constants no op reads (the optimizer's leftovers, such as weights folded into others)."""
    flow = network.flow.copy()
    for var in list(flow.vars.values()):
        spec = network._globals.get(var.name, (None,))[0]
        if var.data is None:
            continue
        if spec is not None and spec.kind == "constant":
            var.data = None
            var.attrs[_STRIPPED] = "1"
        elif spec is None and var.producer is None and not var.consumers:
            flow.delete_var(var)
    return flow


def _restored_flow(data, globals_):
    """The flow saved by :func:`_stripped_flow`, its constants' data the globals' arrays."""
    try:
        flow = fileformat.from_bytes(bytes(data))
    except (FlowFormatError, FlowError) as error:
        raise SerializationError(f"the saved network's flow does not load: {error}") from None
    for var in flow.vars.values():
        if var.attrs.pop(_STRIPPED, None) is not None:
            spec, array = globals_.get(var.name, (None, None))
            if spec is None or spec.kind != "constant" or tuple(var.shape) != array.shape:
                raise SerializationError(f"the saved network's flow names constant "
                                         f"{var.name}, which is not a global of its shape")
            var.data = array
    return flow


class SavedKernel:
    """The kernel of a step of a loaded network: what the runtime asks of a kernel (its
    name in dumps and profiles, its operation count, whether it makes a view), as saved."""

    def __init__(self, name, flops, view, inplace):
        self.name, self._flops, self._view, self._inplace = name, flops, view, inplace

    def kernel_name(self, step):
        return self.name

    def flops(self, step):
        return self._flops

    def view(self, step):
        return self._view

    def inplace(self, step):
        return list(self._inplace)

    def __repr__(self):
        return f"<saved kernel {self.name}>"


def _network(header, blobs):
    """The network of a checked frame's ``header`` and ``blobs``."""
    _expect(header["kind"] == "network", "kind")
    _expect(header.keys() == {"kind", "myelin", "blobs", "target", "threads", "pool",
                              "objects", "symbols", "specs", "globals", "arrays", "cells",
                              "flow"}, "set of fields")

    def blob(index):
        _expect(_count(index) and index < len(blobs), "blob index")
        return blobs[index]

    saved = header["target"]
    _expect(isinstance(saved, dict) and saved.keys() == {"triple", "cpu", "features"}
            and all(isinstance(v, str) for v in saved.values()), "target")
    target = targets.Target(saved["triple"], saved["cpu"], saved["features"])
    check_target(target)
    workers = header["threads"]
    _expect(_count(workers) and workers >= 1, "thread count")
    # The worker pool: made from the saved object file in a process that has none yet.
    pool = bytes(blob(header["pool"]))
    _check_symbols([pool], set())
    threads.pool(workers, pool)

    # Tensors.
    records = header["specs"]
    _expect(isinstance(records, list), "tensor list")
    specs = [_spec(record) for record in records]
    for spec, record in zip(specs, records):
        for field in ("shares", "view_of", "slice_of"):
            other = record[field]
            _expect(other is None or (_count(other) and other < len(specs)), f"tensor {field}")
            setattr(spec, field, None if other is None else specs[other])

    def spec_at(position):
        _expect(_count(position) and position < len(specs), "tensor index")
        return specs[position]

    # Globals, with their values; the arrays the kernels packed.
    globals_ = {}
    _expect(isinstance(header["globals"], list), "global list")
    for item in header["globals"]:
        _expect(isinstance(item, list) and len(item) == 2, "global")
        spec, data = spec_at(item[0]), blob(item[1])
        _expect(spec.is_global and spec.name not in globals_ and data.nbytes == spec.size,
                f"global {spec.name}")
        if not spec.size or data.ctypes.data % spec.alignment or \
                (spec.kind != "constant" and not data.flags.writeable):
            data = _copy(data, max(spec.alignment, ALIGN))
        array = data.view(dtypes.to_numpy(spec.dtype)).reshape(spec.shape)
        if spec.kind == "constant":
            array.flags.writeable = False       # (the code may hold its values)
        spec.address = data.ctypes.data
        globals_[spec.name] = (spec, array)
    arrays = []
    _expect(isinstance(header["arrays"], list), "array list")
    for item in header["arrays"]:
        _expect(isinstance(item, list) and len(item) == 3 and item[0] in _DTYPES
                and isinstance(item[1], list) and len(item[1]) <= 32
                and all(map(_count, item[1])), "packed array")
        dtype, shape, data = np.dtype(item[0]), tuple(item[1]), blob(item[2])
        size = math.prod(shape) * dtype.itemsize
        _expect(data.nbytes == size, "packed array size")
        if not size:
            data = _copy(data, ALIGN)
        array = data.view(dtype).reshape(shape)
        array.flags.writeable = False
        arrays.append(array)

    # Cells: their tensors, steps and profile counters.
    cells_ = header["cells"]
    _expect(isinstance(cells_, list) and cells_, "cell list")
    counters, made = {}, []
    for record in cells_:
        _expect(isinstance(record, dict) and record.keys() == {
            "name", "symbol", "tensors", "steps", "instance_size", "unshared_size",
            "alignment", "counters"}, "cell")
        _expect(isinstance(record["name"], str) and isinstance(record["symbol"], str)
                and all(_count(record[k]) for k in ("instance_size", "unshared_size",
                                                    "alignment"))
                and isinstance(record["tensors"], list) and isinstance(record["steps"], list),
                f"cell {record.get('name')!r}")
        tensors = [spec_at(position) for position in record["tensors"]]
        for spec in tensors:
            root = spec.root()
            _expect(root.is_global or root.offset is None
                    or root.offset + root.instance_bytes <= max(record["instance_size"], 1),
                    f"place of tensor {spec.name}")
        steps = [_step(step, spec_at) for step in record["steps"]]
        shape = record["counters"]
        if shape is not None:
            _expect(shape == [1 + len(steps), 2], "profile counters")
            counters[record["symbol"]] = np.zeros(shape, np.int64)
        else:
            counters[record["symbol"]] = None
        made.append((record, tensors, steps))

    # The code, its symbols bound here.
    objects = [bytes(blob(index)) for index in header["objects"]]
    _expect(objects, "object list")
    table = header["symbols"]
    _expect(isinstance(table, list) and all(
        isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)
        and isinstance(row[1], list) and len(row[1]) == 2 and _count(row[2])
        and row[0] == externals.symbol(row[1]) for row in table), "symbol table")
    try:
        addresses = externals.rebind(table, {n: s for n, (s, _) in globals_.items()}, arrays,
                                     counters, workers)
    except (KeyError, TypeError) as error:
        raise SerializationError(f"the saved network's code does not bind: {error}") from None
    _check_symbols(objects, set(addresses))
    try:
        code = engine.load_objects(objects, targets.host("host"), addresses)
        cells = [Cell(record["name"], tensors, steps, code.address(record["symbol"]),
                      record["instance_size"], record["unshared_size"], record["alignment"],
                      counters[record["symbol"]])
                 for record, tensors, steps in made]
    except CompileError as error:
        raise SerializationError(f"the saved network's code does not load: {error}") from None
    flow = None if header["flow"] is None else _restored_flow(blob(header["flow"]), globals_)
    network = Network(cells, globals_, code, target, flow, arrays)
    network.dumps = {}
    network.image = Image(objects, [(row[0], row[1], row[2]) for row in table],
                          {record["name"]: record["symbol"] for record in cells_}, workers)
    return network


def _spec(record):
    fields = {"name", "dtype", "shape", "kind", "aliases", "is_output", "alignment", "offset",
              "first", "last", "ref", "shares", "view_of", "slice_of", "slice_offset"}
    _expect(isinstance(record, dict) and record.keys() == fields, "tensor")
    name = record["name"]
    _expect(isinstance(name, str) and record["kind"] in _SPEC_KINDS
            and isinstance(record["dtype"], str) and isinstance(record["shape"], list)
            and len(record["shape"]) <= 32 and all(map(_count, record["shape"]))
            and isinstance(record["aliases"], list)
            and all(isinstance(a, str) for a in record["aliases"])
            and isinstance(record["is_output"], bool) and isinstance(record["ref"], bool)
            and _count(record["alignment"]) and record["alignment"] >= 1
            and (record["offset"] is None or _count(record["offset"]))
            and all(type(record[k]) is int for k in ("first", "last"))
            and _count(record["slice_offset"]), f"tensor {name!r}")
    try:
        dtypes.to_numpy(record["dtype"])
    except Exception:
        raise SerializationError(f"the saved network's tensor {name} has an unknown type "
                                 f"{record['dtype']!r}") from None
    return TensorSpec(name, record["dtype"], tuple(record["shape"]), record["kind"],
                      aliases=list(record["aliases"]), is_output=record["is_output"],
                      alignment=record["alignment"], offset=record["offset"],
                      first=record["first"], last=record["last"], ref=record["ref"],
                      slice_offset=record["slice_offset"])


def _step(record, spec_at):
    fields = {"name", "type", "inputs", "outputs", "attrs", "variant", "kernel", "flops",
              "view", "inplace"}
    _expect(isinstance(record, dict) and record.keys() == fields
            and all(isinstance(record[k], str) for k in ("name", "type", "variant", "kernel"))
            and isinstance(record["attrs"], dict)
            and all(isinstance(v, str) for v in record["attrs"].values())
            and isinstance(record["inputs"], list) and isinstance(record["outputs"], list)
            and _count(record["flops"]) and isinstance(record["view"], bool)
            and isinstance(record["inplace"], list) and all(map(_count, record["inplace"])),
            "step")

    attrs = Attributes()
    attrs.update(record["attrs"])
    step = Step(record["name"], record["type"], [spec_at(i) for i in record["inputs"]],
                [spec_at(i) for i in record["outputs"]], attrs, variant=record["variant"])
    step.kernel = SavedKernel(record["kernel"], record["flops"], record["view"],
                              record["inplace"])
    return step


def check_target(target):
    """SerializationError unless this machine runs code compiled for ``target``: the same
    architecture and operating system, and every CPU feature the code may use."""
    targets.host("host")          # (LLVM's native target initialized)
    here = llvm.get_process_triple()
    if _system(target.triple) != _system(here):
        raise SerializationError(f"the model was compiled for {target.triple}; this machine "
                                 f"is {here}")
    have = {name for name, on in llvm.get_host_cpu_features().items() if on}
    missing = sorted(target.feature_set - have)
    if missing:
        raise SerializationError(
            f"the model's code was compiled for a CPU ({target.cpu}) with features this "
            f"CPU ({llvm.get_host_cpu_name()}) lacks: {', '.join(missing)}; compile it here, "
            f"or compile it for the CPUs it must run on with Compiler(features=...) (such as "
            f"features=\"avx2\")")


def _system(triple):
    """(architecture, operating system) of an LLVM triple."""
    parts = triple.split("-")
    arch = {"arm64": "aarch64", "amd64": "x86_64"}.get(parts[0], parts[0])
    return arch, parts[2] if len(parts) > 2 else ""


def _check_symbols(objects, bound):
    """SerializationError unless every symbol the object files leave undefined is bound,
    defined by one of them or found in this process (LLVM's loader would end the process at
    a symbol that nothing defines)."""
    try:
        defined = set().union(*(elf.defined_symbols(data) for data in objects))
        used = set().union(*(elf.undefined_symbols(data) for data in objects))
    except ValueError as error:
        raise SerializationError(f"the saved network's code is not an object file: "
                                 f"{error}") from None
    for name in sorted(used - bound - defined):
        if name.startswith(externals.PREFIX) or not _in_process(name):
            raise SerializationError(f"the saved network's code uses the symbol {name}, "
                                     f"which nothing defines")


def _in_process(name):
    try:
        getattr(ctypes.CDLL(None), name)
    except AttributeError:
        return bool(llvm.address_of_symbol(name))
    return True


def _aligned_empty(nbytes, shift=0):
    """A uint8 array of ``nbytes`` (not set) at an address ``shift`` bytes past a multiple
    of ALIGN."""
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = (shift - raw.ctypes.data) % ALIGN
    return raw[start:start + nbytes]


def _copy(data, alignment):
    """A copy of the uint8 array ``data`` at a multiple of ``alignment`` (at least one byte
    long: an empty tensor still has an address)."""
    block = aligned_zeros(max(data.nbytes, 1), alignment)
    block[:data.nbytes] = data
    return block[:data.nbytes] if data.nbytes else block[:0]


def _aligned(offset):
    return -(-offset // ALIGN) * ALIGN


def _count(value):
    return type(value) is int and value >= 0


def _expect(condition, what):
    if not condition:
        raise SerializationError(f"the saved model has a bad {what}")
