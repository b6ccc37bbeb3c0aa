"""Ahead-of-time export (``myelin.export``): a model compiled into a shared library with a C
API, which runs with no Python, LLVM or NumPy.

:func:`export` (and ``myelin export MODEL -o DIR``) compiles a model (an ONNX model, a
``.flow`` file or a Flow) for a target (this machine by default, or any LLVM triple such as
``aarch64-linux-gnu``) and writes, into a directory:

- ``lib<name>.so``: the cells' and kernels' code, the worker pool's code, the constants
  (embedded, read-only), the learnable parameters (writable, shared by all instances; as the
  flow has them, zeros without a value) and the C API (``<name>_create``,
  ``<name>_compute``, ...): only ``<name>_*`` is exported, so libraries of several models
  load into one process side by side;
- ``<name>.h``: the C API, and each cell's tensors (index, name, kind, type and shape) in
  comments, its inputs' and outputs' indices as enum constants.

The code is compiled as the JIT compiles it (:class:`myelin.Compiler`: the cells' module and
each kernel function's module apart, at their optimization levels), only as position
independent code, so the library's results equal the Python API's bit for bit on the same
CPU features. What the code refers to by symbol (:mod:`myelin.codegen.llvm.externals`) is
defined in the library: each global and packed array as data of its own (an assembly file
that includes their bytes from a file beside it), the worker pool's entry point as an alias of
the pool's ``myelin_parallel_for`` (:mod:`myelin.codegen.llvm.threads`, emitted for the
target), whose worker threads the C API starts on the first ``<name>_create`` and stops in
``<name>_shutdown`` (and when the library is unloaded).

Linking needs a C toolchain for the target: ``zig cc`` from the ``ziglang`` package where it
is installed (``pip install myelin[export]``; it links for any target it knows), else for
this machine the system's ``cc``, and for another ``<triple>-gcc`` where one is on the path.
"""

import dataclasses
import os
import re
import shutil
import subprocess
import sys

import numpy as np

from myelin.errors import CompileError, ExportError

_ZIG_TARGETS = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64",
                "riscv64": "riscv64"}
_MACHINES = {"x86_64": 62, "aarch64": 183, "riscv64": 243}      # ELF e_machine


@dataclasses.dataclass
class Export:
    """What :func:`export` wrote: the paths of the shared library and of the header; the
    target triple; the toolchain command that linked the library."""
    library: str
    header: str
    triple: str
    toolchain: list


def export(model, directory, name=None, target=None, cpu=None, features=None,
           input_shapes=None, threads=None, toolchain=None, **compiler_options):
    """Compile ``model`` (an ONNX file, bytes or ModelProto, a ``.flow`` file or a Flow) for
    ``target`` (an LLVM triple; default this machine, with ``features`` as
    :class:`myelin.Compiler` takes them) into a shared library with a C API in ``directory``
    (see the module); returns an :class:`Export`. ``name`` prefixes the library, the header
    and every function of the API (default: the model file's name, else "model");
    ``input_shapes`` fixes an ONNX model's dynamic dimensions; ``threads`` is how many
    threads a large kernel splits its work over (default: this machine's cores);
    ``toolchain`` is the C compiler command (a list) to link with (default: see the module).
    """
    from myelin.codegen.llvm import target as targets

    flow = _flow(model, input_shapes)
    name = _name(name or default_name(model))
    host = targets.host(features)
    if target is None or _arch(target) == _arch(host.triple) and cpu is None and \
            _system(target) == _system(host.triple):
        machine = host
    else:
        machine = targets.cross(target, cpu or "generic", _cross_features(features))
    compiler_options.setdefault("cache", False)
    compiler_options.setdefault("progress", False)
    from myelin.compiler import Compiler
    compiler = Compiler(threads=threads, **compiler_options)
    compiled = _compile(compiler, flow, machine)
    os.makedirs(directory, exist_ok=True)
    build = os.path.join(directory, f".{name}.build")
    os.makedirs(build, exist_ok=True)
    command = toolchain or _toolchain(machine.triple)
    try:
        paths = _write(compiled, machine, name, directory, build)
        _link(command, name, directory, build, paths)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return Export(os.path.join(directory, f"lib{name}.so"),
                  os.path.join(directory, f"{name}.h"), machine.triple, list(command))


@dataclasses.dataclass
class _Compiled:
    """A flow compiled for export: its planned cells with their function symbols, its
    globals, the kept arrays, the symbol of every external key, the object files, the pool's
    object file, the pool's size and the instances' alignment."""
    cells: list
    symbols: dict
    globals_: dict
    arrays: list
    externals: dict
    objects: list
    pool: bytes
    threads: int
    alignment: int


def _compile(compiler, flow, target):
    """Plan, emit and compile ``flow`` for ``target`` as position-independent object files
    (each module apart, at the levels the JIT uses)."""
    from myelin import compiler as compilers
    from myelin.codegen.llvm import engine, threads

    flow, planned, globals_ = compiler.prepare(flow, target)
    compiler._place_globals(globals_, planned)
    symbols, counters = compiler._symbols(planned)
    module, externals, kernels = compiler._emit_module(planned, symbols, counters, target)
    kernels = getattr(kernels, "texts", kernels)      # (KernelFunctions, or its texts)
    texts = [str(module)] + list(kernels.values())
    levels = [compilers.CELL_OPT_LEVEL] + [compilers.KERNEL_OPT_LEVEL] * len(kernels)
    table = externals.table(globals_, counters, compiler.threads)
    keys = {symbol: tuple(key) for symbol, key, _ in table}
    pool = threads.module_text(target)
    for symbol, (kind, what) in keys.items():      # (the code calls the pool by its key)
        if kind == "pool":
            if what != compiler.threads:
                raise CompileError(f"the code calls a pool of {what} threads, not "
                                   f"{compiler.threads}")
            pool += (f'\n@"{symbol}" = alias {threads.PARALLEL_FOR_TYPE}, '
                     f'ptr @{threads.PARALLEL_FOR}\n')
    jobs = list(zip(texts + [pool], levels + [3]))

    def one(job):
        return engine.emit_assembly([job[0]], target, job[1], object_file=True)

    if compiler.threads > 1:
        objects = list(engine._compile_pool(compiler.threads).map(one, jobs))
    else:
        objects = [one(job) for job in jobs]
    return _Compiled(planned, symbols, globals_, externals.arrays, keys, objects[:-1],
                     objects[-1], compiler.threads, compiler.alignment)


# The model.
def _flow(model, input_shapes):
    """The flow of ``model``: itself, read from a .flow file or imported from ONNX."""
    from myelin.flow import Flow
    if isinstance(model, Flow):
        return model
    path = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    if path is not None and path.endswith(".flow"):
        return Flow.load(path)
    from myelin.importers.onnx import import_graph, proto
    return import_graph(proto.load(model), input_shapes).flow


def default_name(model):
    """The name of a library exported from ``model``: its file's, else "model"."""
    if isinstance(model, (str, os.PathLike)):
        return os.path.splitext(os.path.basename(os.fspath(model)))[0]
    return "model"


def _name(text):
    """``text`` as a C identifier prefix."""
    name = re.sub(r"\W", "_", text, flags=re.ASCII).strip("_") or "model"
    return "m_" + name if name[0].isdigit() else name


def _ident(text):
    return re.sub(r"\W", "_", text, flags=re.ASCII)


# Targets and toolchains.
def _arch(triple):
    arch = triple.split("-")[0]
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)


def _system(triple):
    parts = triple.split("-")
    return "linux" if any(part.startswith("linux") for part in parts[1:]) else parts[-1]


def _cross_features(features):
    """The feature string for a cross target: "" (the CPU's own) for a preset."""
    if not features or not features.strip().startswith(("+", "-")):
        return ""
    return features


def _zig():
    """The command running ``zig`` from the ziglang package, or None."""
    try:
        import ziglang  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "ziglang"]


def _toolchain(triple):
    """The C compiler command linking for ``triple``: ``zig cc -target ...`` where ziglang is
    installed, else the system's cc for this machine, else ``<triple>-gcc``."""
    from myelin.codegen.llvm import target as targets

    zig = _zig()
    arch = _arch(triple)
    if zig is not None and arch in _ZIG_TARGETS and _system(triple) == "linux":
        return zig + ["cc", "-target", f"{_ZIG_TARGETS[arch]}-linux-gnu"]
    host = targets.host().triple
    if arch == _arch(host) and _system(triple) == _system(host):
        for candidate in ("cc", "gcc", "clang"):
            if shutil.which(candidate):
                return [candidate]
    for candidate in (f"{arch}-linux-gnu-gcc", f"{triple}-gcc"):
        if shutil.which(candidate):
            return [candidate]
    raise ExportError(f"no C toolchain links for {triple}: install the ziglang package "
                      f"(pip install ziglang, or myelin[export]) or a cross gcc")


def _link(command, name, directory, build, paths):
    """Compile the API and the data, link them and the objects into the library."""
    library = os.path.join(directory, f"lib{name}.so")
    api_object = os.path.join(build, "api.o")
    data_object = os.path.join(build, "data.o")
    _run(command + ["-c", "-O2", "-fPIC", "-I", os.path.abspath(directory), "-o",
                    api_object, paths["api"]], build)
    _run(command + ["-c", "-fPIC", "-o", data_object, paths["data"]], build)
    objects = [api_object, data_object] + paths["objects"]
    _run(command + ["-shared", "-s", "-o", library, *objects,
                    f"-Wl,--version-script={paths['exports']}", "-lpthread"], build)


def _run(command, where):
    try:
        done = subprocess.run(command, cwd=where, capture_output=True, text=True)
    except OSError as error:
        raise ExportError(f"cannot run {command[0]}: {error}") from None
    if done.returncode:
        raise ExportError(f"{' '.join(command)} failed:\n{done.stderr.strip()}")


# The files.
def _write(compiled, target, name, directory, build):
    """Write the weights, the header, the API's C source, the data's assembly, the objects
    and the version script; returns their paths."""
    paths = {"objects": []}
    for index, data in enumerate(compiled.objects + [compiled.pool]):
        path = os.path.join(build, f"code{index}.o")
        with open(path, "wb") as file:
            file.write(data)
        paths["objects"].append(path)
    weights = os.path.join(build, "weights.bin")
    paths["data"] = os.path.join(build, "data.S")
    with open(weights, "wb") as blob, open(paths["data"], "w") as asm:
        asm.write(_data(compiled, weights, blob))
    paths["api"] = os.path.join(build, "api.c")
    header = os.path.join(directory, f"{name}.h")
    with open(header, "w") as file:
        file.write(_header(compiled, target, name))
    with open(paths["api"], "w") as file:
        file.write(_source(compiled, target, name, header))
    paths["exports"] = os.path.join(build, "exports.map")
    with open(paths["exports"], "w") as file:
        file.write(f"{{ global: {name}_*; local: *; }};\n")
    return paths


def _data(compiled, weights, blob):
    """The assembly defining each external symbol but the pool's: globals and kept arrays
    as bytes of the weights file (``blob``, written here)."""
    from myelin.codegen.llvm import externals

    lines = []
    offset = 0
    symbols = dict(compiled.externals)
    for name in compiled.globals_:     # (the code's, and those only views of tensors reach)
        symbols.setdefault(externals.symbol(("global", name)), ("global", name))
    for symbol, key in sorted(symbols.items()):
        kind, what = key
        if kind == "pool":
            continue              # (an alias in the pool's module)
        if kind == "global":
            spec = compiled.globals_[what]
            data = _bytes_of(spec)
            writable = spec.kind != "constant"
            alignment = max(spec.alignment, 64)
        elif kind == "array":
            array = np.ascontiguousarray(compiled.arrays[what])
            data, writable, alignment = array.reshape(-1).view(np.uint8), False, 64
        else:
            raise CompileError(f"an exported library cannot bind the symbol key {key}")
        size = max(data.nbytes, 1)
        padding = -offset % 64
        blob.write(bytes(padding))
        offset += padding
        blob.write(data.tobytes() if data.nbytes else b"\0")
        section = ".data" if writable else ".section .rodata"
        lines += [section, f".balign {alignment}", f".globl {symbol}",
                  f".type {symbol}, %object", f".size {symbol}, {size}", f"{symbol}:",
                  f'.incbin "{os.path.abspath(weights)}", {offset}, {size}']
        offset += size
    lines.append('.section .note.GNU-stack,"",%progbits')
    return "\n".join(lines) + "\n"


def _bytes_of(spec):
    """The bytes of global ``spec`` (placed by the compiler: its array is the var's data, or
    zeros for a learnable parameter without a value)."""
    data = getattr(spec.var, "data", None)
    if data is None:
        return np.zeros(spec.size, np.uint8)
    from myelin.flow import dtypes
    array = np.ascontiguousarray(data, dtypes.to_numpy(spec.dtype)).reshape(-1)
    return array.view(np.uint8)


_C_TYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "uint8": "uint8_t",
            "int16": "int16_t", "uint16": "uint16_t", "int32": "int32_t",
            "uint32": "uint32_t", "int64": "int64_t", "uint64": "uint64_t", "bool": "bool",
            "float16": "uint16_t (IEEE half)"}


def _cell_tensors(cell):
    """The instance tensors of a planned cell, as the Python API numbers them."""
    return [spec for spec in cell.tensors if not spec.is_global]


def _header(compiled, target, name):
    from myelin.version import __version__

    upper = name.upper()
    lines = [f"/* {name}.h: the C API of lib{name}, generated by myelin {__version__}.",
             f" * Target: {target.triple}, CPU {target.cpu}"
             f"{', features ' + _short(target.features) if target.features else ''}.",
             f" * Worker pool: {compiled.threads} threads. */",
             f"#ifndef {upper}_H", f"#define {upper}_H", "",
             "#include <stddef.h>", "#include <stdint.h>", "",
             "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
             "/* An instance: one block of memory holding every tensor of a cell; compute on",
             " * it from one thread at a time (instances compute on threads of their own). */",
             f"typedef struct {name}_instance {name}_instance;", ""]
    for index, cell in enumerate(compiled.cells):
        prefix = f"{upper}_{_ident(cell.name).upper()}"
        lines.append(f"/* Cell {index}: {cell.name}, instance {cell.sizes[0]} bytes. Tensors: */")
        lines.append(f"enum {{ {prefix} = {index} }};")
        for position, spec in enumerate(_cell_tensors(cell)):
            kind = "input" if spec.kind == "input" else \
                "output" if spec.kind == "output" or spec.is_output else "local"
            if spec.ref:
                kind += ", reference: bind an array"
            shape = "x".join(map(str, spec.shape)) or "scalar"
            lines.append(f"/*   {position:3}  {spec.name}: {spec.dtype}[{shape}] "
                         f"({_C_TYPES.get(spec.dtype, spec.dtype)}, {kind}) */")
            if kind.startswith(("input", "output")):
                local = spec.name[len(cell.name) + 1:] \
                    if spec.name.startswith(cell.name + "/") else spec.name
                lines.append(f"enum {{ {prefix}_{_ident(local).upper()} = {position} }};")
        lines.append("")
    lines += [
        "/* \"myelin <version>\" of the compiler that made the library. */",
        f"const char *{name}_version(void);",
        "/* The target: \"<triple> <cpu> <features>\". */",
        f"const char *{name}_target(void);",
        "/* The number of cells; a cell's name; the index of the cell of a name (-1: none). */",
        f"int {name}_cells(void);",
        f"const char *{name}_cell_name(int cell);",
        f"int {name}_cell(const char *name);",
        "/* A cell's tensors: how many; the index of a name or alias (-1: none); name, type",
        " * (\"float32\", ...), kind (\"input\", \"output\", \"local\"), rank, dimensions, bytes. */",
        f"int {name}_tensors(int cell);",
        f"int {name}_tensor(int cell, const char *name);",
        f"const char *{name}_tensor_name(int cell, int tensor);",
        f"const char *{name}_tensor_type(int cell, int tensor);",
        f"const char *{name}_tensor_kind(int cell, int tensor);",
        f"int {name}_tensor_rank(int cell, int tensor);",
        f"const int64_t *{name}_tensor_shape(int cell, int tensor);",
        f"size_t {name}_tensor_bytes(int cell, int tensor);",
        "/* A new instance of a cell (its tensors zeroed; NULL if out of memory or no such",
        f" * cell); the first starts the worker threads. Free it with {name}_free. */",
        f"{name}_instance *{name}_create(int cell);",
        f"void {name}_free({name}_instance *instance);",
        "/* The elements of a tensor of an instance (C order), or NULL for an index out of",
        " * range or a reference input not bound. */",
        f"void *{name}_data({name}_instance *instance, int tensor);",
        "/* Make reference input `tensor` read `array` in place (its type and shape; it must",
        " * stay alive); 0, or -1 if the tensor is no reference input. */",
        f"int {name}_bind({name}_instance *instance, int tensor, void *array);",
        "/* Run the cell: 0; -1 if a reference input is not bound; else 1 + the index of",
        " * the step that found an index out of range (its outputs and later ones unset). */",
        f"int {name}_compute({name}_instance *instance);",
        f"/* Stop the worker threads (they start again with the next {name}_create); also",
        " * done when the library is unloaded. */",
        f"void {name}_shutdown(void);",
        "", "#ifdef __cplusplus", "}", "#endif", f"#endif  /* {upper}_H */", ""]
    return "\n".join(lines)


def _short(features):
    on = [item[1:] for item in features.split(",") if item.startswith("+")]
    return ",".join(on) if len(on) <= 12 else ",".join(on[:12]) + f",... ({len(on)})"


def _c_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _source(compiled, target, name, header):
    """The C source of the API."""
    from myelin.version import __version__
    from myelin.codegen.llvm import externals, threads

    cells, shapes, names, globals_ = [], [], [], {}
    lines = [f'#include "{os.path.basename(header)}"', "#include <pthread.h>",
             "#include <stdlib.h>", "#include <string.h>", "",
             f"extern char myelin_pool[] __asm__(\"{threads.POOL_RECORD}\");",
             f"extern void *myelin_worker(void *) __asm__(\"{threads.WORKER}\");",
             f"extern void myelin_wake(void) __asm__(\"{threads.WAKE}\");"]
    for index, cell in enumerate(compiled.cells):
        lines.append(f"extern int32_t cell{index}(void *) __asm__(\"{compiled.symbols[cell.name]}\");")
    tensor_rows = []
    for index, cell in enumerate(compiled.cells):
        first = len(tensor_rows)
        for spec in _cell_tensors(cell):
            root = spec.root()
            where, offset = "0", root.offset or 0
            if root.is_global:
                symbol = externals.symbol(("global", root.name))
                if symbol not in globals_:
                    globals_[symbol] = f"global{len(globals_)}"
                    lines.append(f"extern char {globals_[symbol]}[] __asm__(\"{symbol}\");")
                where = globals_[symbol]
                access = 2
            elif root.ref:
                access = 1
            else:
                access = 0
            kind = "input" if spec.kind == "input" else \
                "output" if spec.kind == "output" or spec.is_output else "local"
            tensor_rows.append((spec, access, where, offset, kind, len(shapes)))
            shapes.extend(spec.shape)
            names.append((spec.name, len(tensor_rows) - 1, index))
            for alias in spec.aliases:
                names.append((alias, len(tensor_rows) - 1, index))
        cells.append((cell, first, len(tensor_rows) - first))
    lines += ["", "typedef struct { const char *name, *type, *kind; int rank, access; "
              "size_t bytes, offset; const int64_t *shape; char *global; } tensor_t;",
              "typedef struct { const char *name; int32_t (*function)(void *); "
              "size_t size, alignment; int first, count, references; } cell_t;",
              f"struct {name}_instance {{ const cell_t *cell; char *memory; }};", ""]
    lines.append("static const int64_t shapes[] = {"
                 + ", ".join(map(str, shapes or [0])) + "};")
    lines.append("static const tensor_t tensors[] = {")
    for spec, access, where, offset, kind, shape in tensor_rows:
        lines.append(f"  {{{_c_string(spec.name)}, {_c_string(spec.dtype)}, "
                     f"{_c_string(kind)}, {len(spec.shape)}, {access}, {spec.size}, "
                     f"{offset}, shapes + {shape}, {where}}},")
    if not tensor_rows:
        lines.append("  {0}")
    lines.append("};")
    lines.append("static const cell_t cells[] = {")
    for index, (cell, first, count) in enumerate(cells):
        references = sum(1 for spec in _cell_tensors(cell) if spec.ref)
        lines.append(f"  {{{_c_string(cell.name)}, cell{index}, {max(cell.sizes[0], 1)}, "
                     f"{max(compiled.alignment, 16)}, {first}, {count}, {references}}},")
    lines.append("};")
    lines.append("static const struct { const char *name; int tensor, cell; } names[] = {")
    for alias, tensor, cell in names:
        lines.append(f"  {{{_c_string(alias)}, {tensor}, {cell}}},")
    if not names:
        lines.append("  {0, 0, 0}")
    lines.append("};")
    stop, workers = threads.field_offset(threads.STOP), threads.field_offset(threads.WORKERS)
    features = " ".join(x for x in (target.triple, target.cpu, target.features) if x)
    lines += [f"""
#define CELLS {len(cells)}
#define NAMES {len(names)}
#define THREADS {compiled.threads}
#define WORKER_STACK {threads.WORKER_STACK}

const char *{name}_version(void) {{ return {_c_string("myelin " + __version__)}; }}
const char *{name}_target(void) {{ return {_c_string(features)}; }}
int {name}_cells(void) {{ return CELLS; }}

const char *{name}_cell_name(int cell) {{
  return cell >= 0 && cell < CELLS ? cells[cell].name : NULL;
}}

int {name}_cell(const char *name) {{
  for (int i = 0; i < CELLS; i++)
    if (strcmp(cells[i].name, name) == 0) return i;
  return -1;
}}

static const tensor_t *tensor(int cell, int index) {{
  if (cell < 0 || cell >= CELLS || index < 0 || index >= cells[cell].count) return NULL;
  return &tensors[cells[cell].first + index];
}}

int {name}_tensors(int cell) {{ return cell >= 0 && cell < CELLS ? cells[cell].count : -1; }}

int {name}_tensor(int cell, const char *name) {{
  for (int i = 0; i < NAMES; i++)
    if (names[i].cell == cell && strcmp(names[i].name, name) == 0)
      return names[i].tensor - cells[cell].first;
  return -1;
}}

const char *{name}_tensor_name(int cell, int index) {{
  const tensor_t *t = tensor(cell, index); return t ? t->name : NULL;
}}
const char *{name}_tensor_type(int cell, int index) {{
  const tensor_t *t = tensor(cell, index); return t ? t->type : NULL;
}}
const char *{name}_tensor_kind(int cell, int index) {{
  const tensor_t *t = tensor(cell, index); return t ? t->kind : NULL;
}}
int {name}_tensor_rank(int cell, int index) {{
  const tensor_t *t = tensor(cell, index); return t ? t->rank : -1;
}}
const int64_t *{name}_tensor_shape(int cell, int index) {{
  const tensor_t *t = tensor(cell, index); return t ? t->shape : NULL;
}}
size_t {name}_tensor_bytes(int cell, int index) {{
  const tensor_t *t = tensor(cell, index); return t ? t->bytes : 0;
}}

/* The worker pool: THREADS - 1 threads running the pool's worker loop. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_t workers[THREADS > 1 ? THREADS - 1 : 1];
static int started;

static void start_pool(void) {{
  pthread_attr_t attr;
  pthread_mutex_lock(&pool_lock);
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, WORKER_STACK);
  while (started < THREADS - 1) {{
    if (pthread_create(&workers[started], &attr, myelin_worker, myelin_pool) != 0) break;
    started++;
  }}
  pthread_attr_destroy(&attr);
  __atomic_store_n((int32_t *)(myelin_pool + {workers}), started, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&pool_lock);
}}

void {name}_shutdown(void) {{
  pthread_mutex_lock(&pool_lock);
  if (started) {{
    __atomic_store_n((int32_t *)(myelin_pool + {stop}), 1, __ATOMIC_SEQ_CST);
    myelin_wake();
    for (int i = 0; i < started; i++) pthread_join(workers[i], NULL);
    started = 0;
    __atomic_store_n((int32_t *)(myelin_pool + {workers}), 0, __ATOMIC_SEQ_CST);
    __atomic_store_n((int32_t *)(myelin_pool + {stop}), 0, __ATOMIC_SEQ_CST);
  }}
  pthread_mutex_unlock(&pool_lock);
}}

__attribute__((destructor)) static void unload(void) {{ {name}_shutdown(); }}

{name}_instance *{name}_create(int cell) {{
  if (cell < 0 || cell >= CELLS) return NULL;
  const cell_t *c = &cells[cell];
  {name}_instance *instance = calloc(1, sizeof *instance);
  size_t size = (c->size + c->alignment - 1) / c->alignment * c->alignment;
  if (!instance || !(instance->memory = aligned_alloc(c->alignment, size))) {{
    free(instance);
    return NULL;
  }}
  memset(instance->memory, 0, size);
  instance->cell = c;
  if (THREADS > 1 && __atomic_load_n(&started, __ATOMIC_ACQUIRE) < THREADS - 1) start_pool();
  return instance;
}}

void {name}_free({name}_instance *instance) {{
  if (instance) {{ free(instance->memory); free(instance); }}
}}

void *{name}_data({name}_instance *instance, int index) {{
  const tensor_t *t = instance ? tensor(instance->cell - cells, index) : NULL;
  if (!t) return NULL;
  if (t->access == 2) return t->global;
  if (t->access == 1) return *(void **)(instance->memory + t->offset);
  return instance->memory + t->offset;
}}

int {name}_bind({name}_instance *instance, int index, void *array) {{
  const tensor_t *t = instance ? tensor(instance->cell - cells, index) : NULL;
  if (!t || t->access != 1) return -1;
  *(void **)(instance->memory + t->offset) = array;
  return 0;
}}

int {name}_compute({name}_instance *instance) {{
  const cell_t *c = instance->cell;
  for (int i = 0; i < c->count; i++)
    if (tensors[c->first + i].access == 1 &&
        !*(void **)(instance->memory + tensors[c->first + i].offset)) return -1;
  return c->function(instance->memory);
}}
"""]
    return "\n".join(lines)
