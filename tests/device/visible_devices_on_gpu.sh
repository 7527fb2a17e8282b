#!/usr/bin/env bash
# Run on the device tool's 2x H200 (kind nvidia-h200-x2): CUDA_VISIBLE_DEVICES as CUDA sees it vs dspark probe.
# Needs the wheels in .device-wheels/ (pydantic: not in the GPU image). Outputs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/dspark-gpu}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .device-wheels/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$OUT/smi_list.txt"
python3 tests/device/check_visible_devices.py 2>&1 | tee "$OUT/visible.log"
