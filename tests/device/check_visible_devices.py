"""On a machine with two or more NVIDIA GPUs: dspark's GPU list under CUDA_VISIBLE_DEVICES equals CUDA's own.

Run by visible_devices_on_gpu.sh (the device tool's 2x H200). For each CUDA_VISIBLE_DEVICES value it asks
torch (the CUDA runtime, which is what the engine uses) which GPUs it sees, by UUID and in order, and
`dspark probe --json` which GPUs it plans against; they must be the same list. Then it holds memory on
one physical GPU and checks that the probe of that GPU (and only that one) shows it, and that data and
tensor parallelism are judged against the visible GPUs. Prints one PASS/FAIL line per check, exits 1 on
any failure, and writes every reading to $OUT/visible.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("OUT", "/tmp/dspark-gpu"))
FAILURES: list[str] = []
READINGS: dict[str, object] = {}


def check(name: str, ok: bool, detail: str) -> None:
    """Record one check."""
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        FAILURES.append(name)


def run(argv: list[str], visible: str | None) -> subprocess.CompletedProcess[str]:
    """argv with CUDA_VISIBLE_DEVICES set to `visible` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


def cuda_uuids(visible: str | None) -> list[str]:
    """The GPUs the CUDA runtime enumerates under `visible`, as nvidia-smi-style UUIDs, in CUDA order."""
    code = ("import json, torch\n"
            "print(json.dumps(['GPU-' + str(torch.cuda.get_device_properties(i).uuid) "
            "for i in range(torch.cuda.device_count())]))")
    proc = run([sys.executable, "-c", code], visible)
    return list(json.loads(proc.stdout.strip().splitlines()[-1])) if proc.returncode == 0 else []


def probe(visible: str | None) -> tuple[int, dict[str, object]]:
    """`dspark probe --json` under `visible`: exit code and the snapshot (or the error object)."""
    proc = run([sys.executable, "-m", "dspark", "probe", "--json"], visible)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError:
        return proc.returncode, {"stdout": proc.stdout, "stderr": proc.stderr[-2000:]}


def main() -> int:
    """Every check; exit 1 when any failed."""
    OUT.mkdir(parents=True, exist_ok=True)
    everything = cuda_uuids(None)
    READINGS["cuda_all"] = everything
    check("two GPUs", len(everything) >= 2, f"CUDA sees {len(everything)} GPU(s)")
    if len(everything) < 2:
        return 1
    u0, u1 = everything[0], everything[1]
    cases: list[str | None] = [None, "0", "1", "1,0", u1, u1[:12], "", "0,7", "7"]
    for visible in cases:
        want = cuda_uuids(visible)
        rc, snap = probe(visible)
        gpus = snap.get("gpus") if isinstance(snap, dict) else None
        gpus = gpus if isinstance(gpus, list) else []
        got = [str(g.get("uuid")) for g in gpus] if isinstance(gpus, list) else []
        READINGS[f"probe[{visible!r}]"] = {"rc": rc, "cuda": want, "dspark": got, "snapshot": snap}
        if want:
            check(f"CUDA_VISIBLE_DEVICES={visible!r}", rc == 0 and got == want, f"CUDA {want} / dspark {got} (rc {rc})")
        else:
            # No GPU for the engine: dspark must not plan against NVML's list (it refuses or shows none).
            check(f"CUDA_VISIBLE_DEVICES={visible!r}", rc != 0 or got == [], f"CUDA sees none; dspark rc {rc} {got}")

    # Hold 30 GiB on physical GPU 1 and see it only there.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import torch,time; x=torch.empty(30*2**30,dtype=torch.uint8,device='cuda');"
         "print('held',flush=True); time.sleep(120)"],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "1"}, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    holder.stdout.readline()
    time.sleep(2)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=uuid,memory.used,memory.free", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=False).stdout
    READINGS["smi_held"] = smi
    free_by_uuid = {line.split(",")[0].strip(): int(line.split(",")[2]) for line in smi.strip().splitlines()}
    for visible, uuid in (("0", u0), ("1", u1)):
        _, snap = probe(visible)
        gpus = snap.get("gpus") if isinstance(snap, dict) else None
        gpus = gpus if isinstance(gpus, list) else []
        free_mib = int(gpus[0]["free_bytes"]) // 2**20 if gpus else -1
        READINGS[f"held probe[{visible}]"] = snap
        check(f"free memory of the visible GPU {visible} under load", abs(free_mib - free_by_uuid[uuid]) <= 2,
              f"dspark {free_mib} MiB, nvidia-smi {free_by_uuid[uuid]} MiB")

    model = Path("/tmp/qwen3-32b")
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(Path("tests/fixtures/configs/qwen3-32b.json").read_text())

    def validate(visible: str, flags: list[str], name: str, want_rc: int, needle: str = "") -> None:
        argv = [sys.executable, "-m", "dspark", "validate", "--model", str(model), "--engine", "vllm", "--json",
                "--", "--max-model-len", "32768", *flags]
        proc = run(argv, visible)
        READINGS[name] = {"rc": proc.returncode, "stdout": proc.stdout[-6000:], "stderr": proc.stderr[-2000:]}
        ok = proc.returncode == want_rc and needle in proc.stdout
        check(name, ok, f"exit {proc.returncode} (want {want_rc})" + (f", names {needle!r}" if needle else ""))

    # With GPU 1 busy, a TP=2 plan over both visible GPUs is sized by the busier one and refused by vLLM's
    # start-up free-memory gate; TP=1 on GPU 0 alone is not affected.
    validate("0,1", ["--tensor-parallel-size", "2"], "TP=2 over 0,1 with GPU 1 busy", 1, "startup_free_memory")
    validate("0", [], "TP=1 on GPU 0 with GPU 1 busy", 0)
    holder.kill()
    holder.wait()
    time.sleep(2)
    # Parallelism is judged against the visible GPUs: TP=2 / DP=2 need two of them (exit 1: does not fit).
    validate("0", ["--tensor-parallel-size", "2"], "TP=2 with one visible GPU", 1)
    validate("0,1", ["--tensor-parallel-size", "2"], "TP=2 with two visible GPUs", 0)
    validate("1", ["--data-parallel-size", "2"], "DP=2 with one visible GPU", 1)
    validate("0,1", ["--data-parallel-size", "2"], "DP=2 with two visible GPUs", 0)
    (OUT / "visible.json").write_text(json.dumps(READINGS, indent=1, default=str))
    print(f"{len(FAILURES)} failed: {FAILURES}" if FAILURES else "all checks passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
