#!/usr/bin/env bash
# Writes `dspark validate --json` (and the table) for every shipped recipe on every built-in profile into DIR,
# one file each: a refactor that says "behaviour unchanged" diffs two such directories (docs/architecture.md).
set -uo pipefail
out=${1:?usage: scripts/validate_snapshot.sh DIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
# An empty store of recorded boots (dspark.runtime.boot_store): the snapshot is of dspark's own figures.
DSPARK_DATA_DIR=$(mktemp -d)
export DSPARK_DATA_DIR
trap 'rm -rf "$DSPARK_DATA_DIR"' EXIT
for recipe in recipes/*.yaml; do
  name=$(basename "$recipe" .yaml)
  for hw in gb10 gb10x2 rtx5090 h100-80gb h200 h200:8 b200; do
    python3 -m dspark validate "$recipe" --hardware "$hw" --json >"$out/$name@$hw.json" 2>"$out/$name@$hw.err"; echo "rc=$?" >>"$out/$name@$hw.err"
    python3 -m dspark validate "$recipe" --hardware "$hw" >"$out/$name@$hw.txt" 2>&1; echo "rc=$?" >>"$out/$name@$hw.txt"
  done
done
