#!/usr/bin/env bash
# There (the GPU machine, after gpu_install.sh): `dspark start --watch` for real, pinned, with vLLM importable,
# then Ctrl-C as a terminal sends it (SIGINT to the whole process group) once the engine has printed its KV
# lines; afterwards no dspark/vLLM process may be left and the GPU's memory must be back to idle.
#
#   tests/device/gpu_start.sh SRC VLLM_SITE OUT
set -uo pipefail
src=$1 site=$2 out=$3
export PYTHONPATH=$src:$site PATH=$site/bin:$PATH VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
model=/tmp/gpu-models/qwen3-8b
mkdir -p $model && cp "$src/tests/device/configs/qwen3-8b.json" $model/config.json
log=$out/start-watch.log
echo "idle: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
MAX_NUM_SEQS=16 setsid python3 -m dspark start --watch --model $model --engine vllm --kv-cache-memory 20GiB -- \
  --max-model-len 32768 --load-format dummy --skip-tokenizer-init --host 127.0.0.1 >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  grep -q "Maximum concurrency" "$log" && break
  kill -0 $pid 2>/dev/null || break
  sleep 1
done
sleep 8  # --watch reads the KV lines and compares them with the plan
t0=$SECONDS
kill -INT -- -$pid 2>/dev/null
for _ in $(seq 1 60); do kill -0 $pid 2>/dev/null || break; sleep 1; done
if kill -0 $pid 2>/dev/null; then echo "dspark still running $((SECONDS - t0)) s after SIGINT"; else echo "dspark exited $((SECONDS - t0)) s after SIGINT"; fi
wait $pid; echo "dspark rc=$?"
sleep 2
echo "left: $(ps -eo pid,pgid,args | grep -E 'vllm|EngineCore|dspark' | grep -vc grep) processes"
ps -eo pid,pgid,args | grep -E 'vllm|EngineCore|dspark' | grep -v grep
echo "after: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
grep -E "KV cache size|Maximum concurrency|kv|KV|watch|verdict|exec" "$log" | grep -v DEBUG | tail -25
