#!/usr/bin/env bash
# Run on a machine with an NVIDIA GPU (the device tool's H200): dspark probe / validate against live NVML,
# beside nvidia-smi's own figures, idle and with 100 GiB held by another process. Outputs go to $OUT.
# Needs only what the GPU image has plus the wheels in .device-wheels/ (pydantic for recipes).
set -uo pipefail
OUT=${OUT:-/tmp/dspark-gpu}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .device-wheels/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site
smi() { nvidia-smi --query-gpu=name,memory.total,memory.used,memory.free,memory.reserved --format=csv,noheader,nounits; }
mkdir -p /tmp/qwen3-32b && cp tests/fixtures/configs/qwen3-32b.json /tmp/qwen3-32b/config.json

smi > "$OUT/smi_idle.csv"
python3 -m dspark probe --json > "$OUT/probe_idle.json"; echo "probe rc=$?"
python3 -m dspark probe > "$OUT/probe_idle.txt" 2>&1
python3 -m dspark validate > "$OUT/validate_default.txt" 2>&1; echo "validate default rc=$?"
python3 -m dspark validate --json > "$OUT/validate_default.json"
python3 -m dspark validate --model /tmp/qwen3-32b --engine vllm --json -- --max-model-len 32768 > "$OUT/validate_q32_idle.json"; echo "q32 idle rc=$?"
python3 -m dspark validate --model /tmp/qwen3-32b --engine sglang --json -- --context-length 32768 > "$OUT/validate_q32_sglang_idle.json"; echo "q32 sglang idle rc=$?"

rm -f /tmp/held
python3 - <<'PY' &
import time, torch
held = torch.empty(100 * 2**30, dtype=torch.uint8, device="cuda")
open("/tmp/held", "w").write("1")
time.sleep(90)
PY
for _ in $(seq 1 60); do [ -f /tmp/held ] && break; sleep 1; done; sleep 2
smi > "$OUT/smi_held.csv"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader > "$OUT/smi_apps_held.csv"
python3 -m dspark probe --json > "$OUT/probe_held.json"
python3 -m dspark validate --model /tmp/qwen3-32b --engine vllm --json -- --max-model-len 32768 > "$OUT/validate_q32_held.json"; echo "q32 held rc=$?"
python3 -m dspark validate --model /tmp/qwen3-32b --engine vllm -- --max-model-len 32768 > "$OUT/validate_q32_held.txt" 2>&1
python3 -m dspark validate --model /tmp/qwen3-32b --engine vllm --kv-cache-memory 20GiB --json -- --max-model-len 32768 > "$OUT/validate_q32_held_pin.json"; echo "q32 held pinned rc=$?"
kill %1 2>/dev/null; wait
# The device tool returns few files: fold the JSON outputs into one.
python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
bundle = {p.stem: json.loads(p.read_text() or "null") for p in sorted(out.glob("*.json")) if p.stem != "all"}
(out / "all.json").write_text(json.dumps(bundle, indent=1))
for p in out.glob("*.json"):
    if p.name != "all.json":
        p.unlink()
PY
cat "$OUT"/*.txt > "$OUT/text.log"; rm -f "$OUT"/*.txt
ls -la "$OUT"
