#!/usr/bin/env bash
# There (the GPU machine, after gpu_install.sh): issue 28's "a boot recorded by `start --watch` makes the next
# `validate` of the same plan equal the engine to the token", on the H200. Not collected by pytest.
#
#   tests/device/gpu_boot_record.sh SRC VLLM_SITE OUT
#
# 1. `dspark validate --json` of the unpinned Qwen3-8B plan (vLLM's default utilisation: dspark's estimate) with an
#    empty data directory: the prediction, before any boot.
# 2. gpu_start.sh unpinned: `dspark start --watch` boots the engine on that plan, reads its KV lines and records
#    the boot in $DSPARK_DATA_DIR/observations/, then Ctrl-C.
# 3. The same `dspark validate --json` again, then `dspark observations list`: the pool must now be the
#    engine's, to the token, labelled observed.
set -uo pipefail
src=$1 site=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
export DSPARK_DATA_DIR=/tmp/dspark-boot-data PYTHONUNBUFFERED=1
rm -rf "$DSPARK_DATA_DIR"
model=/tmp/gpu-models/qwen3-8b
mkdir -p $model && cp "$src/tests/device/configs/qwen3-8b.json" $model/config.json
plan() {  # the plan gpu_start.sh starts, in its environment (vLLM importable: the installed release is the key's)
  MAX_NUM_SEQS=16 PYTHONPATH=$src:$site PATH=$site/bin:$PATH python3 -m dspark validate --json --model $model --engine vllm \
    -- --max-model-len 32768 --load-format dummy --skip-tokenizer-init --host 127.0.0.1
}
plan >"$out/validate-before.json" 2>"$out/validate-before.err"; echo "validate before: rc $?"
bash "$here/gpu_start.sh" "$src" "$site" "$out" unpinned
plan >"$out/validate-after.json" 2>"$out/validate-after.err"; echo "validate after: rc $?"
PYTHONPATH=$src:$site python3 -m dspark observations list >"$out/observations.txt" 2>&1
ls -la "$DSPARK_DATA_DIR/observations" >>"$out/observations.txt" 2>&1
cp "$DSPARK_DATA_DIR"/observations/*.json "$out/" 2>/dev/null
python3 - "$out" <<'EOF'
import json, re, sys
from pathlib import Path
out = Path(sys.argv[1])
log = (out / "start-watch-unpinned.log").read_text(errors="replace")
engine = [int(m.replace(",", "")) for m in re.findall(r"GPU KV cache size: ([\d,]+) tokens", log)]
before, after = (json.loads((out / f"validate-{w}.json").read_text())["capacity"] for w in ("before", "after"))
result = {"engine_pool_tokens": engine[-1] if engine else None,
          "before": {"kv_pool_tokens": before["kv_pool_tokens"], "kv_budget_source": before["kv_budget_source"]},
          "after": {"kv_pool_tokens": after["kv_pool_tokens"], "kv_budget_source": after["kv_budget_source"],
                    "budget_source": after.get("budget_source")}}
result["after_equals_engine"] = bool(engine) and after["kv_pool_tokens"] == engine[-1]
(out / "boot-record.json").write_text(json.dumps(result, indent=1) + "\n")
print(json.dumps(result, indent=1))
EOF
