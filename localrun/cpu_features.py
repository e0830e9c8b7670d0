"""Which CPU features llama.cpp may use here: what the CPU reports, what the OS enables, what the build uses.

A CPU can report a feature whose register state the OS does not enable. Seen on Intel Xeon VMs
(Firecracker guests): CPUID and /proc/cpuinfo report AMX, but the kernel's XSAVE mask
(`arch_prctl(ARCH_GET_XCOMP_SUPP)`, 0x202e7 there) lacks XTILEDATA (bit 18). ggml's own check asks
for permission (ARCH_REQ_XCOMP_PERM), which still succeeds there, so its AMX buffer type takes the
weights and the first matrix product over two or more rows executes `tileloadd`: SIGILL. A build made
with `-march=native` on a newer CPU and copied to an older one (a Docker image, a shared venv) dies the
same way, with whatever instruction the older CPU lacks.

So the decision trusts the OS, not only CPUID: a feature is usable when the build uses it, the CPU
reports it and the OS enables the register state it needs. Everything below is a pure function of
plain data (`Machine`, the build's feature list), table-tested; `probe()` alone reads the machine.

A leaf module: the runner applies the decision, `doctor` and `/api/ps` show it.
"""

from __future__ import annotations

import ctypes
import platform
import sys
from dataclasses import dataclass

# XSAVE state components (bit numbers of XCR0) each group of instructions needs the OS to enable.
_XSTATE = {"avx": (1, 2), "avx512": (5, 6, 7), "amx": (17, 18)}

# ggml's CPU feature names (llama_print_system_info) -> (/proc/cpuinfo flag, XSAVE group or None).
_X86 = {
    "SSE3": ("pni", None), "SSSE3": ("ssse3", None), "AVX": ("avx", "avx"), "AVX_VNNI": ("avx_vnni", "avx"),
    "AVX2": ("avx2", "avx"), "F16C": ("f16c", "avx"), "FMA": ("fma", "avx"), "BMI2": ("bmi2", None),
    "AVX512": ("avx512f", "avx512"), "AVX512_VBMI": ("avx512vbmi", "avx512"),
    "AVX512_VNNI": ("avx512_vnni", "avx512"), "AVX512_BF16": ("avx512_bf16", "avx512"),
    "AMX_INT8": ("amx_int8", "amx"),
}
REBUILD = 'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --force-reinstall --no-cache-dir llama-cpp-python'


@dataclass(frozen=True, slots=True)
class Machine:
    """What the CPU reports and what the OS enables, as plain data.

    `xstate` is the kernel's mask of XSAVE components it supports for user space; None where it
    cannot be asked (not x86-64 Linux, or a kernel older than 5.16, which cannot enable AMX at all).
    """

    x86: bool
    linux: bool
    flags: frozenset[str]
    xstate: int | None


@dataclass(frozen=True, slots=True)
class Feature:
    """One instruction-set feature the build uses, and whether this machine can run it."""

    name: str
    cpu: bool  # reported by the CPU
    os: bool  # its register state enabled by the OS
    runs: bool = True  # False when a probe of the build's kernel for it crashed

    @property
    def usable(self) -> bool:
        return self.cpu and self.os and self.runs

    def describe(self) -> str:
        if self.usable:
            return f"{self.name}: used"
        if not self.cpu:
            return f"{self.name}: used by the build, not reported by the CPU"
        if not self.os:
            return f"{self.name}: reported by the CPU, not enabled by the OS"
        return f"{self.name}: reported by the CPU and enabled by the OS, but the build's kernel crashed in a probe"


@dataclass(frozen=True, slots=True)
class CpuPlan:
    """The load-time decision: which of the build's features are safe, and whether to keep the weights
    out of ggml's AMX buffer type (the one feature llama.cpp can avoid at run time)."""

    features: tuple[Feature, ...]
    avoid_amx: bool

    @property
    def missing(self) -> tuple[Feature, ...]:
        """Features compiled into the build that this machine cannot run, other than AMX (avoidable)."""
        return tuple(f for f in self.features if not f.usable and f.name != "AMX_INT8")

    def lines(self) -> list[str]:
        """The decision in words, one line per point, as `doctor` and the daemon log show it."""
        out = []
        amx = next((f for f in self.features if f.name == "AMX_INT8"), None)
        if amx is not None:
            out.append(f"AMX: {amx.describe().split(': ', 1)[1]}" + (": not used" if self.avoid_amx else ""))
        others = [f.name for f in self.features if f.name != "AMX_INT8"]
        if self.missing:
            names = ", ".join(f.name for f in self.missing)
            out.append(f"this llama.cpp build uses {names}, which this machine lacks or its OS does not enable: "
                       f"expect SIGILL; rebuild it for this machine with {REBUILD}")
        elif others:
            out.append(f"the build's other CPU features are present and enabled: {', '.join(others)}")
        return out


def crash_hint(signal_name: str, loading: bool) -> str:
    """What a runner's death by `signal_name` most likely means, and the fix; "" when nothing likely."""
    if signal_name == "SIGILL" or (loading and signal_name in ("SIGSEGV", "SIGBUS")):
        return ("the llama.cpp build likely uses CPU features this machine lacks or its OS does not enable "
                f"(`localrun doctor` checks them); rebuild it here with {REBUILD}")
    return ""


def machine_key(build: str, machine: Machine) -> str:
    """Names a llama.cpp build on a kind of CPU, for remembering what it needs there."""
    import hashlib

    flags = hashlib.sha256(" ".join(sorted(machine.flags)).encode()).hexdigest()[:12]
    return f"{build} on {_cpu_model()} (flags {flags})"


def _cpu_model() -> str:
    return _cpuinfo_field("model name") or platform.processor() or platform.machine()


def xstate_enabled(machine: Machine, group: str | None) -> bool:
    """Whether the OS enables the register state `group` needs (True when none is needed)."""
    if group is None or not machine.x86:
        return True
    if machine.xstate is None:
        # No XSAVE query: a Linux kernel that old cannot enable AMX; elsewhere trust the CPU flags,
        # which kernels clear for AVX/AVX-512 when they do not enable the state.
        return not (machine.linux and group == "amx")
    return all(machine.xstate >> bit & 1 for bit in _XSTATE[group])


def build_features(system_info: str) -> tuple[str, ...]:
    """The CPU feature names llama.cpp's system info says the build uses ("AVX2 = 1" -> "AVX2")."""
    names = []
    for part in system_info.replace("CPU :", "|").split("|"):
        name, _, value = part.partition("=")
        if value.strip() == "1" and name.strip() in _X86:
            names.append(name.strip())
    return tuple(dict.fromkeys(names))


def plan(machine: Machine, features: tuple[str, ...], amx_runs: bool | None = None) -> CpuPlan:
    """Check each of the build's x86 features against the CPU and the OS, and AMX also against a probe
    of ggml's kernel (`amx_runs`; None when not probed); avoid AMX unless all allow it."""
    checked = tuple(
        Feature(name, cpu=_X86[name][0] in machine.flags, os=xstate_enabled(machine, _X86[name][1]),
                runs=amx_runs is not False or name != "AMX_INT8")
        for name in features if machine.x86 and name in _X86
    )
    amx = next((f for f in checked if f.name == "AMX_INT8"), None)
    return CpuPlan(checked, avoid_amx=amx is not None and not amx.usable)


# -- reading this machine ----------------------------------------------------------------------

_ARCH_GET_XCOMP_SUPP = 0x1021
_SYS_ARCH_PRCTL = 158  # x86-64


def probe() -> Machine:
    """This machine's CPU flags and the kernel's XSAVE mask."""
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")
    linux = sys.platform.startswith("linux")
    return Machine(x86=x86, linux=linux, flags=frozenset(_cpuinfo_field("flags", "Features").split()),
                   xstate=_xcomp_supported() if x86 and linux else None)


def cpuinfo_fields(text: str) -> dict[str, str]:
    """/proc/cpuinfo's "key : value" lines as a dict, the first CPU's value of each key."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _cpuinfo_field(*names: str) -> str:
    """The first CPU's value of the first of `names` in /proc/cpuinfo ("" where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            fields = cpuinfo_fields(f.read())
    except OSError:
        return ""
    return next((fields[name] for name in names if fields.get(name)), "")


def _xcomp_supported() -> int | None:
    """arch_prctl(ARCH_GET_XCOMP_SUPP): the XSAVE components the kernel supports for user space."""
    if platform.architecture()[0] != "64bit":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mask = ctypes.c_uint64(0)
        if libc.syscall(_SYS_ARCH_PRCTL, _ARCH_GET_XCOMP_SUPP, ctypes.byref(mask)) != 0:
            return None  # EINVAL: a kernel older than 5.16
        return mask.value
    except (OSError, AttributeError):
        return None


__all__ = ["CpuPlan", "Feature", "Machine", "REBUILD", "build_features", "cpuinfo_fields", "crash_hint", "machine_key",
           "plan", "probe", "xstate_enabled"]
