"""Target description: the CPU to compile for, its SIMD features and vector width.

The host CPU and its features come from LLVM. ``features`` restricts them the way SLING's
``--cpu=-avx512`` flag does, so every code path can be tested on one machine: a preset
("sse", "avx", "avx2", "avx512", "host") or a comma-separated list of ``+feat``/``-feat``.
"""

import dataclasses
import functools
import os

import llvmlite.binding as llvm

from myelin.errors import MyelinError

# Features switched off by each preset (on top of the host's features).
_AVX512 = ["avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512vnni", "avx512bf16",
           "avx512fp16", "avx512vbmi", "avx512vbmi2", "avx512bitalg", "avx512vpopcntdq",
           "avx512ifma", "avx10.1-512", "avx10.1-256", "evex512"]
_AVX2 = ["avx2", "fma", "f16c", "vaes", "vpclmulqdq", "avxvnni", "avxifma", "avxvnniint8",
         "avxneconvert", "avxvnniint16"] + _AVX512
_AVX = ["avx", "xsave"] + _AVX2
_FAMILIES = {"avx512": _AVX512, "avx2": _AVX2, "avx": _AVX}
PRESETS = {
    "host": [],
    "avx512": [],
    "noavx512": _AVX512,
    "avx2": _AVX512,
    "avx": _AVX2,
    "sse": _AVX,
}


@functools.cache
def _initialize():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.cache
def _initialize_all():
    _initialize()
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def _host_features():
    return {name: on for name, on in llvm.get_host_cpu_features().items()}


def _apply(features, spec):
    """Apply a preset name or a "+a,-b" list to a feature dict (in place)."""
    spec = (spec or "host").strip()
    if spec in PRESETS:
        for name in PRESETS[spec]:
            if name in features:
                features[name] = False
        return
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        if item[0] not in "+-":
            raise MyelinError(f"CPU feature {item!r} must start with + or - "
                              f"(or use a preset: {', '.join(PRESETS)})")
        name, on = item[1:], item[0] == "+"
        # Turning a feature family off also turns off everything that builds on it.
        names = _FAMILIES.get(name, [name]) if not on else [name]
        for n in names:
            if on or n in features:
                features[n] = on


@dataclasses.dataclass(frozen=True)
class Target:
    """A CPU to generate code for: triple, CPU name, feature string and SIMD facts."""

    triple: str
    cpu: str
    features: str

    @property
    def feature_set(self):
        return {f[1:] for f in self.features.split(",") if f.startswith("+")}

    @property
    def vector_bytes(self):
        """Width of the widest SIMD register the generated code uses."""
        if not self.triple.startswith("x86_64"):
            return 16
        found = self.feature_set
        if "avx512f" in found:
            return 64
        if "avx" in found:
            return 32
        return 16

    @property
    def vector_registers(self):
        """How many SIMD registers kernels can keep values in."""
        if self.triple.startswith(("aarch64", "arm64")) or "avx512f" in self.feature_set:
            return 32
        return 16

    @property
    def has_fma(self):
        found = self.feature_set
        return "fma" in found or not self.triple.startswith("x86_64")

    @property
    def native_half(self):
        """True if half <-> float conversions are instructions (F16C on x86-64, AArch64), not
        library calls."""
        return "f16c" in self.feature_set or self.triple.startswith(("aarch64", "arm64"))

    @property
    def is_host(self):
        return self.triple == llvm.get_process_triple()

    def isa(self):
        """A short name of the instruction set used, for kernel variants: SSE, AVX, AVX2, AVX512."""
        found = self.feature_set
        if not self.triple.startswith("x86_64"):
            return self.triple.split("-")[0]
        if "avx512f" in found:
            return "AVX512"
        if "avx2" in found:
            return "AVX2"
        if "avx" in found:
            return "AVX"
        return "SSE"

    @functools.cached_property
    def data_layout(self):
        """LLVM's data layout string of this target."""
        return str(self.machine().target_data)

    def machine(self, opt=3, reloc="default", codemodel="jitdefault"):
        """An LLVM TargetMachine for this target."""
        if self.is_host:
            _initialize()
        else:
            _initialize_all()
        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu, features=self.features, opt=opt,
                                            reloc=reloc, codemodel=codemodel)


def host(features=None):
    """The host CPU, with features restricted by ``features`` (or $MYELIN_CPU_FEATURES)."""
    _initialize()
    spec = features if features is not None else os.environ.get("MYELIN_CPU_FEATURES", "host")
    found = _host_features()
    _apply(found, spec)
    text = ",".join(("+" if on else "-") + name for name, on in sorted(found.items()))
    return Target(llvm.get_process_triple(), llvm.get_host_cpu_name(), text)


def cross(triple, cpu="generic", features=""):
    """Another LLVM target, for emitting assembly or object code without running it."""
    _initialize_all()
    try:
        llvm.Target.from_triple(triple)
    except RuntimeError as error:
        raise MyelinError(f"LLVM does not know target {triple!r}: {error}") from None
    return Target(triple, cpu, features)
