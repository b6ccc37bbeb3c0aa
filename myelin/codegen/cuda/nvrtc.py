"""NVRTC, CUDA's run-time compiler: CUDA C source in, a CUBIN (and its PTX) for one
architecture out.

NVRTC needs no GPU and no driver, only its library (the ``nvidia-cuda-nvrtc-cu12`` wheel, used
through ``cuda-bindings``; ``pip install 'myelin[cuda]'``). A compile error raises
:class:`~myelin.errors.CompileError` with NVRTC's log and the source lines it points at.
"""

import dataclasses
import re

from myelin.codegen.cuda import support
from myelin.errors import CompileError

SOURCE_NAME = "myelin.cu"
_CONTEXT = 2          # source lines shown on each side of a line an error names


@dataclasses.dataclass(frozen=True)
class Binary:
    """A compiled module: the CUBIN the driver loads, its PTX (for dumps) and NVRTC's log
    (warnings)."""

    cubin: bytes
    ptx: str
    log: str


def _library():
    """cuda.bindings' nvrtc module; CompileError if NVRTC cannot be loaded."""
    try:
        from cuda.bindings import nvrtc
        result, _, _ = nvrtc.nvrtcVersion()
    except Exception as error:      # ImportError, or the library's own loading errors
        raise CompileError(f"NVRTC cannot be loaded ({type(error).__name__}: {error}); "
                           f"install it with pip install 'myelin[cuda]'") from error
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC cannot be loaded: {result}")
    return nvrtc


def version():
    """NVRTC's version, "major.minor"."""
    _, major, minor = _library().nvrtcVersion()
    return f"{major}.{minor}"


def _check(nvrtc, result, what):
    code = result[0]
    if code != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC failed to {what}: {code}")
    return result[1:]


def _bytes(nvrtc, program, size_function, get_function, what):
    (size,) = _check(nvrtc, size_function(program), f"size the {what}")
    buffer = b" " * size
    _check(nvrtc, get_function(program, buffer), f"get the {what}")
    return buffer


def compile(source, arch, options=()):
    """Compile the module ``source`` (which includes the support header) for ``arch``
    ("sm_90") with extra NVRTC ``options``; returns a :class:`Binary`."""
    nvrtc = _library()
    (program,) = _check(nvrtc, nvrtc.nvrtcCreateProgram(
        source.encode(), SOURCE_NAME.encode(), 1, [support.HEADER.encode()],
        [support.HEADER_NAME.encode()]), "create a program")
    try:
        arguments = [f"--gpu-architecture={arch}".encode()] + [o.encode() for o in options]
        (result,) = nvrtc.nvrtcCompileProgram(program, len(arguments), arguments)
        log = _bytes(nvrtc, program, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog,
                     "log").rstrip(b"\0 ").decode(errors="replace")
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC could not compile the CUDA module for {arch} "
                               f"({result.name}):\n{log}\n{_quote(source, log)}")
        cubin = _bytes(nvrtc, program, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, "CUBIN")
        ptx = _bytes(nvrtc, program, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, "PTX")
        return Binary(bytes(cubin), ptx.rstrip(b"\0").decode(), log)
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _quote(source, log):
    """The lines of ``source`` the log's messages point at (``myelin.cu(12): error``), with
    their neighbours and line numbers."""
    lines = source.splitlines()
    named = sorted({int(n) for n in re.findall(rf"{re.escape(SOURCE_NAME)}\((\d+)\)", log)})
    shown = []
    for number in named:
        for i in range(max(1, number - _CONTEXT), min(len(lines), number + _CONTEXT) + 1):
            mark = ">" if i == number else " "
            shown.append(f"{mark}{i:5d} | {lines[i - 1]}")
        shown.append("")
    return "source lines:\n" + "\n".join(shown) if shown else ""
