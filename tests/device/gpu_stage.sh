#!/usr/bin/env bash
# HERE: lay out what the device calls carry, in an ignored folder of the checkout the device tool sends.
#
#   tests/device/gpu_stage.sh PARTS_DIR STAGE_DIR      (e.g. .gpu/bundle/parts  /work/main/.gpu)
#
# STAGE_DIR/src  : this checkout's dspark package and tests/device (the GPU scripts, configs, probe)
# STAGE_DIR/cN   : bundle part N with SHA256SUMS, one folder per device call (each call carries under 64 MiB)
set -euo pipefail
parts=$(cd "$1" && pwd) stage=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$stage"
rm -rf "$stage/src" "$stage"/c[0-9]*
mkdir -p "$stage/src/tests"
cp -r "$root/dspark" "$stage/src/dspark"
cp -r "$root/tests/device" "$stage/src/tests/device"
rm -rf "$stage/src/tests/device/results"  # recorded here, not needed there (and every call carries under 64 MiB)
find "$stage/src" -name __pycache__ -prune -exec rm -rf {} +
i=0
for part in "$parts"/bundle.part*; do
  mkdir -p "$stage/c$i"
  cp "$part" "$parts/SHA256SUMS" "$stage/c$i/"
  i=$((i + 1))
done
du -sh "$stage/src" "$stage"/c[0-9]*
