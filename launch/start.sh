#!/usr/bin/env bash
# For users of the deployment's shell scripts: `launch/start.sh --max-num-seqs 12 [RECIPE]`.
# --max-num-seqs goes straight through (dspark start passes it to the engine after validating it).
set -euo pipefail
exec dspark start "$@"
