"""The x86 ISA flags a CPU engine's torch sees: CPUID and XCR0, read in this process as pytorch's cpuinfo does.

vLLM's CPU build asks torch (torch.cpu._is_avx512_supported(), _is_amx_tile_supported(), ...), and torch asks
the CPU: CPUID leaf 7 and, for the AVX-512 and AMX bits, XGETBV's XCR0 (the OS must save the opmask and ZMM
state, mask 0xE6). /proc/cpuinfo is the kernel's view and can differ: under user-mode emulation (qemu-user,
Rosetta) it names the host's CPU while the engine runs on the emulated one. So the flags are read the engine's
way; None where this cannot be done here (not x86-64 Linux, executable memory refused), and the caller falls
back to /proc/cpuinfo.
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import sys
from collections.abc import Callable
from typing import Any

# x86-64 System V machine code. cpuid(leaf: edi, subleaf: esi, out: rdx) stores eax, ebx, ecx, edx at out:
# push rbx; mov eax, edi; mov ecx, esi; mov r8, rdx; cpuid; mov [r8], eax; mov [r8+4], ebx; mov [r8+8], ecx;
# mov [r8+12], edx; pop rbx; ret
_CPUID = bytes.fromhex("53 89f8 89f1 4989d0 0fa2 418900 41895804 41894808 4189500c 5b c3")
# xgetbv(xcr: edi) -> edx:eax: mov ecx, edi; xgetbv; shl rdx, 32; or rax, rdx; ret
_XGETBV = bytes.fromhex("89f9 0f01d0 48c1e220 4809d0 c3")
_OSXSAVE = 0x0C00_0000  # CPUID.1:ECX bits 26 (XSAVE) and 27 (OSXSAVE: the OS enabled XGETBV)
_AVX512_STATE = 0xE6  # XCR0: SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM
_Regs = ctypes.c_uint32 * 4


def x86_isa_flags() -> tuple[str, ...] | None:
    """amx_bf16, amx_tile, avx512_bf16, avx512f as torch reads them (cpuinfo's x86 isa rules), sorted."""
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        code = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, ValueError):  # W^X policies (SELinux execmem, PaX) refuse an executable mapping
        return None
    with code:
        code.write(_CPUID)
        code.seek(64)
        code.write(_XGETBV)
        base = ctypes.c_void_p.from_buffer(code)
        address = ctypes.addressof(base)
        cpuid = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(_Regs))(address)
        xgetbv = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint32)(address + 64)
        flags = _flags(cpuid, xgetbv)
        del cpuid, xgetbv, base  # the mapping cannot close while a ctypes object exports it
    return flags


def _flags(cpuid: Callable[..., Any], xgetbv: Callable[[int], int]) -> tuple[str, ...]:
    def leaf(index: int, sub: int = 0) -> tuple[int, int, int, int]:
        regs = _Regs()
        cpuid(index, sub, ctypes.byref(regs))
        return regs[0], regs[1], regs[2], regs[3]

    max_leaf = leaf(0)[0]
    basic_ecx = leaf(1)[2] if max_leaf >= 1 else 0
    avx512_regs = False
    if basic_ecx & _OSXSAVE == _OSXSAVE:  # XGETBV faults where the OS has not enabled it
        low, _, _, high = leaf(0xD) if max_leaf >= 0xD else (0, 0, 0, 0)  # the XCR0 bits this CPU offers
        valid = high << 32 | low
        avx512_regs = valid & _AVX512_STATE == _AVX512_STATE and xgetbv(0) & _AVX512_STATE == _AVX512_STATE
    if not avx512_regs or max_leaf < 7:
        return ()
    _, ebx, _, edx = leaf(7)
    eax1 = leaf(7, 1)[0]
    # cpuinfo: avx512f EBX bit 16, avx512bf16 (7,1):EAX bit 5, amx_bf16 EDX bit 22, amx_tile EDX bit 24
    found = {"avx512f": ebx >> 16, "avx512_bf16": eax1 >> 5, "amx_bf16": edx >> 22, "amx_tile": edx >> 24}
    return tuple(sorted(name for name, bit in found.items() if bit & 1))
