"""Ahead-of-time export (myelin.aot): the guide's network and a ResNet-18-style CNN compiled
into shared libraries with a C API; a C program built with the system's compiler computes
with them in a process without Python, and this process computes with them through ctypes,
both bit for bit what the Python API computes; the header documents every tensor; the API's
lookups, reference inputs and errors; a library for aarch64 (linked with zig cc) inspected,
and run under qemu-aarch64 where it is installed."""

import ctypes
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import myelin
import resnet_onnx
from jitcheck import guide_flow
from myelin import aot
from myelin.cli import main as cli_main
from myelin.errors import ExportError

CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc) on this machine")


def _zig():
    try:
        import ziglang  # noqa: F401
    except ImportError:
        return False
    return True


needs_zig = pytest.mark.skipif(not _zig(), reason="the ziglang package is not installed")

# A C program that runs cell 0 of a library on inputs read from files and writes its outputs
# to files: argv[1] is the library's name; then input files by tensor name, "--", output files.
PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include "NAME.h"

static int transfer(NAME_instance *data, const char *tensor, const char *path, int in) {
  int index = NAME_tensor(0, tensor);
  void *elements = NAME_data(data, index);
  size_t bytes = NAME_tensor_bytes(0, index);
  FILE *file = fopen(path, in ? "rb" : "wb");
  if (index < 0 || !elements || !file) return 1;
  size_t done = in ? fread(elements, 1, bytes, file) : fwrite(elements, 1, bytes, file);
  fclose(file);
  return done != bytes;
}

int main(int argc, char **argv) {
  NAME_instance *data = NAME_create(0);
  int i = 1, status;
  if (!data) return 10;
  for (; i + 1 < argc && argv[i][0] != '-'; i += 2)
    if (transfer(data, argv[i], argv[i + 1], 1)) return 11;
  if ((status = NAME_compute(data)) != 0) return 20 + status;
  for (i++; i + 1 < argc; i += 2)
    if (transfer(data, argv[i], argv[i + 1], 0)) return 12;
  printf("%s on %s: %d cells, %d tensors\n", NAME_version(), NAME_target(), NAME_cells(),
         NAME_tensors(0));
  NAME_free(data);
  NAME_shutdown();
  return 0;
}
"""


def _program(folder, name, compiler):
    source = os.path.join(folder, "main.c")
    with open(source, "w") as file:
        file.write(PROGRAM.replace("NAME", name))
    program = os.path.join(folder, "main")
    subprocess.run(compiler + ["-O1", "-o", program, source, "-I", folder, "-L", folder,
                               f"-l{name}", f"-Wl,-rpath,{os.path.abspath(folder)}"],
                   check=True, capture_output=True)
    return program


def _python_outputs(network, inputs):
    cell = network.cells[0]
    data = cell.instance()
    for name, value in inputs.items():
        data[name] = value
    data.compute()
    return {name: np.array(data.array(name)) for name in cell.outputs}


def _run_program(command, folder, inputs, outputs, env=None):
    arguments = []
    for name, value in inputs.items():
        path = os.path.join(folder, f"in{len(arguments)}.bin")
        np.ascontiguousarray(value).tofile(path)
        arguments += [name, path]
    arguments.append("--")
    for name, like in outputs.items():
        arguments += [name, os.path.join(folder, f"out_{name.replace('/', '_')}.bin")]
    done = subprocess.run(command + arguments, capture_output=True, text=True, env=env)
    assert done.returncode == 0, (done.returncode, done.stderr)
    return done.stdout, {name: np.fromfile(os.path.join(folder,
                                                        f"out_{name.replace('/', '_')}.bin"),
                                           like.dtype).reshape(like.shape)
                         for name, like in outputs.items()}


class Library:
    """An exported library loaded with ctypes."""

    def __init__(self, path, name):
        self.lib = ctypes.CDLL(path)
        self.name = name
        for function, restype, argtypes in (
                ("create", ctypes.c_void_p, [ctypes.c_int]),
                ("free", None, [ctypes.c_void_p]),
                ("data", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]),
                ("bind", ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]),
                ("compute", ctypes.c_int, [ctypes.c_void_p]),
                ("tensor", ctypes.c_int, [ctypes.c_int, ctypes.c_char_p]),
                ("tensors", ctypes.c_int, [ctypes.c_int]),
                ("tensor_name", ctypes.c_char_p, [ctypes.c_int, ctypes.c_int]),
                ("tensor_type", ctypes.c_char_p, [ctypes.c_int, ctypes.c_int]),
                ("tensor_kind", ctypes.c_char_p, [ctypes.c_int, ctypes.c_int]),
                ("tensor_rank", ctypes.c_int, [ctypes.c_int, ctypes.c_int]),
                ("tensor_shape", ctypes.POINTER(ctypes.c_int64), [ctypes.c_int, ctypes.c_int]),
                ("tensor_bytes", ctypes.c_size_t, [ctypes.c_int, ctypes.c_int]),
                ("cells", ctypes.c_int, []), ("cell", ctypes.c_int, [ctypes.c_char_p]),
                ("cell_name", ctypes.c_char_p, [ctypes.c_int]),
                ("version", ctypes.c_char_p, []), ("target", ctypes.c_char_p, []),
                ("shutdown", None, [])):
            setattr(self, function, getattr(self.lib, f"{name}_{function}"))
            getattr(self, function).restype = restype
            getattr(self, function).argtypes = argtypes

    def array(self, instance, tensor, dtype):
        index = self.tensor(0, tensor.encode())
        shape = [self.tensor_shape(0, index)[d] for d in range(self.tensor_rank(0, index))]
        pointer = ctypes.cast(self.data(instance, index), ctypes.POINTER(ctypes.c_uint8))
        size = self.tensor_bytes(0, index)
        return np.ctypeslib.as_array(pointer, (size,)).view(dtype).reshape(shape)

    def outputs(self, inputs, outputs):
        instance = self.create(0)
        try:
            for name, value in inputs.items():
                self.array(instance, name, value.dtype)[...] = value
            assert self.compute(instance) == 0
            return {name: self.array(instance, name, like.dtype).copy()
                    for name, like in outputs.items()}
        finally:
            self.free(instance)


def _same(a, b):
    return a.keys() == b.keys() and all(a[k].shape == b[k].shape and
                                        a[k].tobytes() == b[k].tobytes() for k in a)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(folder, name, network, inputs, outputs) of the guide's network and of the small CNN
    exported for this machine (linked with the system's cc), and their Python outputs."""
    if CC is None:
        pytest.skip("no C compiler (cc) on this machine")
    rng = np.random.default_rng(3)
    found = {}
    flow, x, *_ = guide_flow(rng)
    cnn = myelin.onnx.load(resnet_onnx.small(), input_shapes={"x": (1, 3, 32, 32)},
                           cache=False, threads=2).network()
    for name, model, network, inputs in (
            ("guide", flow, myelin.Compiler(cache=False, threads=2).compile(flow),
             {x.name: rng.random((1, 64), np.float32)}),
            ("cnn", resnet_onnx.small(), cnn,
             {"main/x": rng.standard_normal((1, 3, 32, 32), np.float32)})):
        folder = str(tmp_path_factory.mktemp(name))
        options = {"input_shapes": {"x": (1, 3, 32, 32)}} if name == "cnn" else {}
        done = myelin.export(model, folder, name=name, toolchain=[CC], threads=2, **options)
        assert done.library == os.path.join(folder, f"lib{name}.so")
        found[name] = (folder, name, network, inputs, _python_outputs(network, inputs))
    return found


@needs_cc
@pytest.mark.parametrize("model", ["guide", "cnn"])
def test_a_c_program_computes_what_python_does(exported, model):
    folder, name, network, inputs, want = exported[model]
    program = _program(folder, name, [CC])
    stdout, got = _run_program([program], folder, inputs, want)
    assert _same(got, want)
    assert f"myelin {myelin.__version__} on {network.target.triple}" in stdout


@needs_cc
@pytest.mark.parametrize("model", ["guide", "cnn"])
def test_the_library_computes_through_ctypes(exported, model):
    folder, name, _, inputs, want = exported[model]
    library = Library(os.path.join(folder, f"lib{name}.so"), name)
    for _ in range(2):
        assert _same(library.outputs(inputs, want), want)


@needs_cc
def test_two_libraries_load_side_by_side(exported):
    """Each exports only its API: the code, weights and pool of one never bind the other's."""
    libraries = {model: Library(os.path.join(folder, f"lib{name}.so"), name)
                 for model, (folder, name, *_) in exported.items()}
    for model, (_, _, _, inputs, want) in exported.items():
        assert _same(libraries[model].outputs(inputs, want), want)
    names = _dynamic_symbols(os.path.join(exported["guide"][0], "libguide.so"))
    assert names and all(name.startswith("guide_") for name in names), names


@needs_cc
def test_the_api_describes_every_tensor(exported):
    folder, name, network, _, _ = exported["cnn"]
    library = Library(os.path.join(folder, f"lib{name}.so"), name)
    cell = network.cells[0]
    assert library.cells() == 1 and library.cell_name(0).decode() == cell.name
    assert library.cell(cell.name.encode()) == 0 and library.cell(b"nothing") == -1
    assert library.tensors(0) == len(cell.tensors)
    header = open(os.path.join(folder, f"{name}.h")).read()
    for index, spec in enumerate(cell.tensors):
        assert library.tensor_name(0, index).decode() == spec.name
        assert library.tensor(0, spec.name.encode()) == index
        assert library.tensor_type(0, index).decode() == spec.dtype
        assert [library.tensor_shape(0, index)[d] for d in range(library.tensor_rank(0, index))] \
            == list(spec.shape)
        assert library.tensor_bytes(0, index) == spec.size
        assert f"{spec.name}: {spec.dtype}[{'x'.join(map(str, spec.shape))}]" in header
    assert "enum { CNN_MAIN_X = 0 };" in header or "CNN_MAIN_X" in header
    assert library.tensor(0, b"nothing") == -1 and library.tensor_name(0, 999) is None
    instance = library.create(0)
    assert library.data(instance, 999) is None and library.bind(instance, 0, None) == -1
    library.free(instance)
    assert library.create(5) is None
    assert library.version().decode() == f"myelin {myelin.__version__}"
    assert library.target().decode().startswith(network.target.triple)


@needs_cc
def test_reference_inputs_are_bound(tmp_path):
    flow = myelin.Flow()
    f = myelin.Builder(flow, "f")
    x = f.var("x", myelin.DT_FLOAT, [4, 8])
    x.ref = True
    w = f.array("w", np.arange(24, dtype=np.float32).reshape(8, 3))
    f.matmul(x, w, name="y")
    myelin.export(flow, tmp_path, name="refs", toolchain=[CC], threads=1)
    library = Library(str(tmp_path / "librefs.so"), "refs")
    instance = library.create(0)
    assert library.compute(instance) == -1            # x is not bound
    value = np.random.default_rng(0).random((4, 8), np.float32)
    assert library.bind(instance, library.tensor(0, b"f/x"), value.ctypes.data) == 0
    assert library.compute(instance) == 0
    got = library.array(instance, "f/y", np.float32)
    np.testing.assert_allclose(got, value @ np.arange(24, dtype=np.float32).reshape(8, 3),
                               rtol=1e-6)
    library.free(instance)


def _elf(path):
    """(machine, class) of the ELF file at ``path``."""
    with open(path, "rb") as file:
        head = file.read(20)
    assert head[:4] == b"\x7fELF"
    return struct.unpack_from("<H", head, 18)[0], head[4]


def _dynamic_symbols(path):
    """The names of the functions and objects the shared library ``path`` defines for
    others (its dynamic symbol table, read here: no binutils needed)."""
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    entsize, count, _ = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize)
                for i in range(count)]
    names = set()
    for _, kind, _, _, offset, size, link, _, _, _ in sections:
        if kind != 11:             # SHT_DYNSYM
            continue
        strings = sections[link]
        for at in range(offset, offset + size, 24):
            name, info, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", data, at)
            if name and shndx and info >> 4 in (1, 2):
                start = strings[4] + name
                names.add(data[start:data.index(b"\0", start)].decode())
    return names


@needs_zig
def test_a_library_for_aarch64(tmp_path):
    model = resnet_onnx.small()
    done = myelin.export(model, tmp_path, name="cnn", target="aarch64-linux-gnu", threads=2,
                         input_shapes={"x": (1, 3, 32, 32)})
    assert "aarch64" in done.triple and done.toolchain[-1] == "aarch64-linux-gnu"
    assert _elf(done.library) == (183, 2)             # EM_AARCH64, 64-bit
    symbols = _dynamic_symbols(done.library)
    assert {"cnn_create", "cnn_compute", "cnn_data", "cnn_tensor", "cnn_free",
            "cnn_version", "cnn_target"} <= symbols
    assert all(name.startswith("cnn_") for name in symbols), symbols
    header = open(done.header).read()
    assert "aarch64" in header and "main/x: float32[1x3x32x32]" in header
    sysroot = "/usr/aarch64-linux-gnu"
    if not shutil.which("qemu-aarch64") or not os.path.isdir(sysroot):
        pytest.skip("qemu-aarch64 (qemu-user) or an aarch64 C library (libc6-arm64-cross) "
                    "is not installed: the library is not run")
    # Run it: a C program linked with zig cc for aarch64, under qemu-aarch64.
    zig = [sys.executable, "-m", "ziglang", "cc", "-target", "aarch64-linux-gnu"]
    program = _program(str(tmp_path), "cnn", zig)
    network = myelin.onnx.load(model, input_shapes={"x": (1, 3, 32, 32)}, cache=False,
                               threads=2).network()
    inputs = {"main/x": np.random.default_rng(4).standard_normal((1, 3, 32, 32), np.float32)}
    want = _python_outputs(network, inputs)
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))
    stdout, got = _run_program(["qemu-aarch64", "-L", sysroot, program], str(tmp_path),
                               inputs, want, env)
    assert "aarch64" in stdout
    for name in want:        # (other instructions, other roundings: close, not equal)
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


@needs_cc
def test_the_command_exports_a_flow_file(tmp_path, capsys):
    flow = guide_flow(np.random.default_rng(0))[0]
    flow.save(str(tmp_path / "guide.flow"))
    assert cli_main([ "export", str(tmp_path / "guide.flow"), "-o", str(tmp_path / "out"),
                     "--toolchain", CC, "--threads", "1"]) in (0, None)
    assert "wrote" in capsys.readouterr().out
    assert os.path.exists(tmp_path / "out" / "libguide.so")
    assert os.path.exists(tmp_path / "out" / "guide.h")


def test_errors_are_clear(tmp_path, monkeypatch):
    flow = guide_flow(np.random.default_rng(0))[0]
    with pytest.raises(ExportError, match="failed"):
        myelin.export(flow, tmp_path, toolchain=[sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(ExportError, match="cannot run"):
        myelin.export(flow, tmp_path, toolchain=["/nonexistent/cc"])
    monkeypatch.setattr(aot, "_zig", lambda: None)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ExportError, match="no C toolchain links for riscv64"):
        aot._toolchain("riscv64-unknown-linux-gnu")
    assert aot._name("3d-model.v2") == "m_3d_model_v2"


@needs_cc
def test_the_readme_c_example_runs(exported):
    """The README's complete C program, against the guide's library, prints what the Python
    API computes."""
    import pathlib
    text = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    source = text.split("```c\n", 1)[1].split("```", 1)[0]
    folder, name, network, _, _ = exported["guide"]
    with open(os.path.join(folder, "classify.c"), "w") as file:
        file.write(source)
    program = os.path.join(folder, "classify")
    subprocess.run([CC, "-O2", "-o", program, os.path.join(folder, "classify.c"), "-I", folder,
                    "-L", folder, "-lguide", f"-Wl,-rpath,{folder}"], check=True)
    printed = subprocess.run([program], capture_output=True, text=True, check=True).stdout
    y = _python_outputs(network, {"f/x": (np.arange(64, dtype=np.float32) / 64)[None]})["f/y"]
    assert printed.strip() == f"class {y.argmax()}, p = {y.max():.6f}"
