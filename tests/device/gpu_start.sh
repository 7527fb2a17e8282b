#!/usr/bin/env bash
# There (the GPU machine, after gpu_install.sh): `dspark start --watch` for real, pinned (--kv-cache-memory 20GiB,
# the default) or unpinned (vLLM's default utilisation, the estimate), with vLLM importable,
# then Ctrl-C as a terminal sends it (SIGINT to the whole process group) once the engine has printed its KV
# lines; afterwards no dspark/vLLM process may be left and the GPU's memory must be back to idle.
#
#   tests/device/gpu_start.sh SRC VLLM_SITE OUT [pinned|unpinned|spec]
#
# spec: the 27B recipe's shape (Qwen3.5-27B hybrid GDN, text only) drafting 3 tokens with its own MTP layer,
# pinned; the Triton GDN prefill kernel, as FlashInfer is not carried.
set -uo pipefail
src=$1 site=$2 out=$3 mode=${4:-pinned}
pin=(--kv-cache-memory 20GiB)
[ "$mode" = unpinned ] && pin=()
name=qwen3-8b extra=()
if [ "$mode" = spec ]; then
  name=qwen3.5-27b
  extra=(--language-model-only --additional-config '{"gdn_prefill_backend": "triton"}'
         --speculative-config '{"method": "mtp", "num_speculative_tokens": 3}')
fi
export PYTHONPATH=$src:$site PATH=$site/bin:$PATH VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
model=/tmp/gpu-models/$name
mkdir -p $model && cp "$src/tests/device/configs/$name.json" $model/config.json
log=$out/start-watch-$mode.log
echo "idle: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
MAX_NUM_SEQS=16 setsid python3 -m dspark start --watch --model $model --engine vllm "${pin[@]}" -- \
  --max-model-len 32768 --load-format dummy --skip-tokenizer-init --host 127.0.0.1 "${extra[@]}" >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  # the engine's line ("Maximum concurrency for N tokens per request: X.XXx"), not dspark's own plan table
  grep -q "Maximum concurrency for .* tokens per request" "$log" && break
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
# what is left of the process group dspark started (the device tool's own wrapper names dspark in its args)
echo "left in dspark's process group: $(ps -eo pgid= | grep -cx " *$pid") processes"
ps -eo pid,pgid,args | awk -v g=$pid '$2 == g' | cut -c1-200
echo "after: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
grep -E "KV cache size|Maximum concurrency|kv|KV|watch|verdict|exec" "$log" | grep -v DEBUG | tail -25
