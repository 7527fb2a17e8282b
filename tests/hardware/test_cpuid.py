"""The ISA flags read as the engine's torch reads them: CPUID leaf 7 behind XCR0's AVX-512 state (cpuinfo's rules)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dspark.hardware import cpuid as cpuid_module
from dspark.hardware.cpuid import _flags, x86_isa_flags
from dspark.hardware.select import read_cpu_flags

OSXSAVE = 1 << 26 | 1 << 27
XCR0_AVX512 = 0x2E7  # x87, SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM, PKRU
XCR0_AVX = 0x7  # the OS saves no AVX-512 state
Leaves = Mapping[tuple[int, int], tuple[int, int, int, int]]


def _cpu(max_leaf: int = 0x1F, ecx1: int = OSXSAVE, valid: int = XCR0_AVX512, ebx7: int = 0, edx7: int = 0,
         eax71: int = 0) -> Leaves:
    return {(0, 0): (max_leaf, 0, 0, 0), (1, 0): (0, 0, ecx1, 0), (0xD, 0): (valid, 0, 0, 0),
            (7, 0): (1, ebx7, 0, edx7), (7, 1): (eax71, 0, 0, 0)}


class _Cpuid:
    """CPUID over a table of leaves (absent ones read zero), called as the machine code is: (leaf, sub, out)."""

    def __init__(self, leaves: Leaves) -> None:
        self.leaves = leaves

    def __call__(self, leaf: int, sub: int, out: Any) -> None:
        regs = out._obj  # ctypes.byref's target
        for i, value in enumerate(self.leaves.get((leaf, sub), (0, 0, 0, 0))):
            regs[i] = value


AVX2 = 1 << 5
AVX512F = 1 << 16
AMX_BF16, AMX_TILE = 1 << 22, 1 << 24
AVX512_BF16 = 1 << 5  # CPUID.(7,1):EAX


@pytest.mark.parametrize(("leaves", "xcr0", "flags"), [
    (_cpu(ebx7=AVX2 | AVX512F, edx7=AMX_BF16 | AMX_TILE, eax71=AVX512_BF16), XCR0_AVX512,
     ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f")),  # Sapphire Rapids
    (_cpu(ebx7=AVX2 | AVX512F, eax71=AVX512_BF16), XCR0_AVX512, ("avx512_bf16", "avx512f")),  # Zen 4
    (_cpu(ebx7=AVX2 | AVX512F), XCR0_AVX512, ("avx512f",)),  # Skylake-SP
    (_cpu(ebx7=AVX2), XCR0_AVX512, ()),  # Haswell: AVX2 only
    # The CPU has AVX-512 but the OS does not save its state: torch (and so the engine) says no AVX-512.
    (_cpu(ebx7=AVX2 | AVX512F, edx7=AMX_TILE), XCR0_AVX, ()),
    (_cpu(valid=XCR0_AVX, ebx7=AVX512F), XCR0_AVX512, ()),  # CPUID's XSAVE leaf does not offer that state
    (_cpu(max_leaf=6, ebx7=AVX512F), XCR0_AVX512, ()),  # no leaf 7 to read
], ids=["sapphire-rapids", "zen4", "skylake-sp", "haswell", "os-without-avx512-state", "no-zmm-in-leaf-d", "leaf6"])
def test_flags_follow_cpuinfo_rules(leaves: Leaves, xcr0: int, flags: tuple[str, ...]) -> None:
    assert _flags(_Cpuid(leaves), lambda xcr: xcr0 if xcr == 0 else 0) == flags


def test_xgetbv_is_not_executed_where_the_os_has_not_enabled_it() -> None:
    def fault(xcr: int) -> int:
        raise AssertionError("XGETBV without OSXSAVE is #UD: the process would die of SIGILL")

    assert _flags(_Cpuid(_cpu(ecx1=1 << 26, ebx7=AVX512F)), fault) == ()


def test_the_live_cpu_is_read_by_cpuid_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cpuid_module, "x86_isa_flags", lambda: ("avx512f",))
    assert read_cpu_flags() == ("avx512f",)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t: avx2 amx_tile\n")
    assert read_cpu_flags(cpuinfo) == ("amx_tile",)  # a saved /proc/cpuinfo is read as it is
    monkeypatch.setattr(cpuid_module, "x86_isa_flags", lambda: None)  # not x86-64 Linux, or no executable memory
    assert read_cpu_flags() == read_cpu_flags(Path("/proc/cpuinfo"))


_TORCH = {"avx512_f": "avx512f", "avx512_bf16": "avx512_bf16", "amx_tile": "amx_tile", "amx_bf16": "amx_bf16"}


@pytest.mark.engine
def test_this_cpu_reads_as_the_engines_torch_reads_it(vllm_python: str) -> None:
    """vLLM's CPU build branches on torch.cpu (_is_avx512_supported, _is_amx_tile_supported, ...): same answer.

    Under qemu-user with an AVX2-only CPU model (scripts/ci-avx2.sh) both say none, where /proc/cpuinfo still
    lists the host's AVX-512 and AMX.
    """
    code = "import json, torch; print(json.dumps(dict(torch.cpu.get_capabilities())))"
    out = subprocess.run([vllm_python, "-c", code], capture_output=True, text=True, timeout=600, check=True).stdout
    capabilities = json.loads(out.splitlines()[-1])
    assert x86_isa_flags() == tuple(sorted(ours for theirs, ours in _TORCH.items() if capabilities.get(theirs)))
