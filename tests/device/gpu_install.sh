#!/usr/bin/env bash
# On the GPU machine: reassemble the bundle gpu_bundle.py made, check its SHA-256 sums, install it without
# touching the image's packages. Not collected by pytest.
#
#   tests/device/gpu_install.sh PARTS_DIR VLLM_SITE DSPARK_SITE
#
# PARTS_DIR holds bundle.partNN and SHA256SUMS (the parts may have arrived in separate device calls).
# VLLM_SITE gets vLLM 0.25.0 and every carried wheel (`pip install --no-deps --target`: the image's own
# packages stay as they are, so its transformers keeps its huggingface-hub); put it on PYTHONPATH to use vLLM.
# DSPARK_SITE gets only what dspark needs beyond the image (pydantic and its three helpers), so dspark runs
# there without vLLM importable.
set -euo pipefail
parts=$(cd "$1" && pwd) site=$2 dsite=$3
work=${TMPDIR:-/tmp}/gpu-bundle
rm -rf "$work" && mkdir -p "$work"
(cd "$parts" && grep ' bundle.part' SHA256SUMS | sha256sum --quiet -c -)
cat "$parts"/bundle.part* > "$work/bundle.tar"
(cd "$work" && grep ' bundle.tar$' "$parts/SHA256SUMS" | sha256sum --quiet -c -)
echo "checksums ok: $(ls "$parts"/bundle.part* | wc -l) parts, $(stat -c %s "$work/bundle.tar") bytes"
# tarfile reads plain and xz-compressed tars alike (gpu_bundle.py --xz-preset); no xz binary needed there.
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
  "$work/bundle.tar" "$work"
rm -f "$work/bundle.tar"
pip_target() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$@"; }
pip_target "$site" "$work"/wheels/*.whl
pip_target "$dsite" "$work"/wheels/{pydantic,pydantic_core,annotated_types,typing_inspection}-*.whl
rm -rf "$work"
echo "installed $(ls -d "$site"/*.dist-info | wc -l) distributions into $site"
