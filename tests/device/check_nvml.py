"""Real-GPU check of dspark/hardware/nvml.py; needs only pynvml and psutil (not collected by pytest).

Run on a machine with an NVIDIA GPU, from the repository root:

    PYTHONPATH=. python tests/device/check_nvml.py [--expect-pid PID]

It prints, as JSON, the raw NVML answers (v1 and v2 memory, addressing mode, attributes, versions)
and dspark's NvmlSource snapshot, then checks that the snapshot carries NVML's v2 figures; exit 1
when a check fails. With --expect-pid, a process known to hold GPU memory (e.g. one that allocated
with torch) must also be listed among the GPU's processes with its memory. Compare the output with
`nvidia-smi --query-gpu=name,memory.total,memory.used,memory.free,memory.reserved --format=csv`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import pynvml

from dspark.hardware.nvml import NvmlSource, NvmlUnavailable


def _try(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """fn(*args) or the NVML error's text."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # a probe script reports every answer, failures included
        return f"error: {type(exc).__name__}: {exc}"


def _struct(value: Any, fields: tuple[str, ...]) -> Any:
    """An NVML struct's fields as a dict, or the error text."""
    return value if isinstance(value, str) else {f: getattr(value, f) for f in fields}


def raw() -> dict[str, Any]:
    """What NVML itself answers, device by device."""
    pynvml.nvmlInit()
    try:
        out: dict[str, Any] = {
            "driver": _try(pynvml.nvmlSystemGetDriverVersion),
            "cuda": _try(pynvml.nvmlSystemGetCudaDriverVersion),
            "devices": [],
        }
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            v2 = _try(pynvml.nvmlDeviceGetMemoryInfo, h, version=pynvml.nvmlMemory_v2)
            out["devices"].append({
                "name": _try(pynvml.nvmlDeviceGetName, h),
                "cc": _try(pynvml.nvmlDeviceGetCudaComputeCapability, h),
                "memory_v1": _struct(_try(pynvml.nvmlDeviceGetMemoryInfo, h), ("total", "free", "used")),
                "memory_v2": _struct(v2, ("total", "reserved", "free", "used")),
                "addressing_mode": _try(pynvml.nvmlDeviceGetAddressingMode, h),
                "attributes_memorySizeMB": _try(lambda h=h: pynvml.nvmlDeviceGetAttributes(h).memorySizeMB),
                "compute_procs": len(_try(pynvml.nvmlDeviceGetComputeRunningProcesses, h) or []),
            })
        return out
    finally:
        pynvml.nvmlShutdown()


def visible_devices_checks(full: Any) -> list[str]:
    """CUDA_VISIBLE_DEVICES against the real NVML: '' = none, an index, a UUID, an index past the end."""
    failures: list[str] = []
    count = len(full.gpus)
    cases: list[tuple[str, list[int] | None]] = [("", None), ("0", [0]), (str(count), None),
                                                  (full.gpus[-1].uuid, [full.gpus[-1].index])]
    if count > 1:
        cases.append((f"{count - 1},0", [count - 1, 0]))
    for visible, want in cases:
        try:
            snap = NvmlSource(environ={"CUDA_VISIBLE_DEVICES": visible}).snapshot()
            got: list[int] | None = [g.index for g in snap.gpus]
        except NvmlUnavailable:
            got = None
        print(f"CUDA_VISIBLE_DEVICES={visible!r}: {got}", file=sys.stderr)
        if got != want:
            failures.append(f"CUDA_VISIBLE_DEVICES={visible!r}: planned against {got}, the engine would see {want}")
    return failures


def main(argv: list[str]) -> int:
    """Print raw NVML and dspark's snapshot; 1 when the snapshot disagrees with NVML v2."""
    expect_pid = int(argv[argv.index("--expect-pid") + 1]) if "--expect-pid" in argv else None
    facts = raw()
    snap = NvmlSource(environ={}).snapshot()  # every GPU, whatever this shell's CUDA_VISIBLE_DEVICES says
    print(json.dumps({"raw_nvml": facts, "dspark": dataclasses.asdict(snap)}, indent=2, default=str))
    failures = []
    for gpu, dev in zip(snap.gpus, facts["devices"], strict=True):
        v2 = dev["memory_v2"]
        if isinstance(v2, dict) and gpu.memory_source == "nvml":
            got = (gpu.total_bytes, gpu.free_bytes, gpu.used_bytes, gpu.reserved_bytes)
            want = (v2["total"], v2["free"], v2["used"], v2["reserved"])
            # free/used move if a process allocates between the two reads; total and reserved must not.
            if got[0] != want[0] or got[3] != want[3]:
                failures.append(f"GPU {gpu.index}: dspark {got} vs NVML v2 {want}")
        if gpu.compute_capability is None:
            failures.append(f"GPU {gpu.index}: no compute capability")
    if expect_pid is not None:
        held = [p for g in snap.gpus for p in g.processes if p.pid == expect_pid]
        print(f"expected pid {expect_pid}: {held}", file=sys.stderr)
        if not held or not (held[0].used_bytes or 0) > 0:
            failures.append(f"pid {expect_pid} not listed with memory among {[g.processes for g in snap.gpus]}")
    failures += visible_devices_checks(snap)
    for f in failures:
        print("FAIL", f, file=sys.stderr)
    print("OK" if not failures else "FAILED", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
