"""The CPU-feature decision from plain data: what the CPU reports, what the OS enables (the kernel's
XSAVE mask), what the build uses, and what a probe of ggml's AMX kernel showed."""

from __future__ import annotations

import pytest

from localrun.cpu_features import Machine, build_features, crash_hint, plan

SAPPHIRE_RAPIDS_FLAGS = frozenset(
    "fpu sse sse2 pni ssse3 fma avx avx2 f16c bmi2 avx512f avx512dq avx512vbmi avx512_vnni avx512_bf16 avx_vnni "
    "amx_bf16 amx_tile amx_int8".split())
EPYC_FLAGS = frozenset("fpu sse sse2 pni ssse3 fma avx avx2 f16c bmi2".split())
NATIVE_SPR_BUILD = ("SSE3", "SSSE3", "AVX", "AVX_VNNI", "AVX2", "F16C", "FMA", "BMI2", "AVX512", "AVX512_VBMI",
                    "AVX512_VNNI", "AVX512_BF16", "AMX_INT8")
PORTABLE_BUILD = ("SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2")

FIRECRACKER_XSTATE = 0x202E7  # seen on the VMs of the issue: AMX's XTILEDATA (bit 18) missing
AMX_ENABLED_XSTATE = 0x600E7  # this project's other Xeon VMs: XTILECFG and XTILEDATA both present


def machine(flags=SAPPHIRE_RAPIDS_FLAGS, xstate=AMX_ENABLED_XSTATE, x86=True, linux=True) -> Machine:
    return Machine(x86=x86, linux=linux, flags=flags, xstate=xstate)


@pytest.mark.parametrize("case, m, build, amx_runs, avoid_amx, amx_line, missing", [
    ("AMX reported, OS withholds its tile state",
     machine(xstate=FIRECRACKER_XSTATE), NATIVE_SPR_BUILD, None, True,
     "AMX: reported by the CPU, not enabled by the OS: not used", []),
    ("AMX reported and enabled, kernel runs", machine(), NATIVE_SPR_BUILD, True, False, "AMX: used", []),
    ("AMX reported and enabled, not probed yet", machine(), NATIVE_SPR_BUILD, None, False, "AMX: used", []),
    ("AMX reported and enabled, the build's kernel crashes", machine(), NATIVE_SPR_BUILD, False, True,
     "AMX: reported by the CPU and enabled by the OS, but the build's kernel crashed in a probe: not used", []),
    ("a kernel older than 5.16 cannot enable AMX", machine(xstate=None), NATIVE_SPR_BUILD, None, True,
     "AMX: reported by the CPU, not enabled by the OS: not used", []),
    ("AMD EPYC with a portable build", machine(EPYC_FLAGS), PORTABLE_BUILD, None, False, None, []),
    ("a Sapphire Rapids build copied to an EPYC", machine(EPYC_FLAGS, xstate=0x7), NATIVE_SPR_BUILD, None, True,
     "AMX: used by the build, not reported by the CPU: not used",
     ["AVX_VNNI", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"]),
    ("AVX-512 reported, its ZMM state not enabled by the OS", machine(xstate=0x20007 | 0x60000), NATIVE_SPR_BUILD,
     None, False, "AMX: used", ["AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"]),
    ("not x86: nothing of this applies", machine(frozenset({"neon"}), None, x86=False), ("NEON",), None, False,
     None, []),
])
def test_the_plan_trusts_the_os_and_the_probe_not_only_cpuid(case, m, build, amx_runs, avoid_amx, amx_line, missing):
    p = plan(m, build, amx_runs=amx_runs)
    assert p.avoid_amx is avoid_amx, case
    assert [f.name for f in p.missing] == missing, case
    amx_lines = [line for line in p.lines() if line.startswith("AMX:")]
    assert amx_lines == ([amx_line] if amx_line else []), case


def test_a_build_using_missing_features_says_how_to_rebuild():
    lines = plan(machine(EPYC_FLAGS, xstate=0x7), NATIVE_SPR_BUILD).lines()
    assert any("expect SIGILL" in line and "-DGGML_NATIVE=OFF" in line for line in lines), lines


def test_a_machine_that_runs_everything_lists_the_features_it_checked():
    lines = plan(machine(EPYC_FLAGS), PORTABLE_BUILD).lines()
    assert lines == ["the build's other CPU features are present and enabled: " + ", ".join(PORTABLE_BUILD)]


def test_build_features_are_read_from_llama_cpp_system_info():
    info = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 0 | AMX_INT8 = 1 | LLAMAFILE = 1 | "
            "OPENMP = 1 | REPACK = 1 |")
    assert build_features(info) == ("SSE3", "SSSE3", "AVX", "AVX2", "AMX_INT8")


@pytest.mark.parametrize("signal_name, loading, explained", [
    ("SIGILL", False, True), ("SIGILL", True, True), ("SIGSEGV", True, True), ("SIGBUS", True, True),
    ("SIGSEGV", False, False), ("SIGKILL", True, False), ("", True, False),
])
def test_a_crash_is_blamed_on_cpu_features_only_where_that_is_likely(signal_name, loading, explained):
    hint = crash_hint(signal_name, loading)
    assert bool(hint) is explained
    if explained:
        assert "-DGGML_NATIVE=OFF" in hint and "localrun doctor" in hint
