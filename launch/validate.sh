#!/usr/bin/env bash
# For users of the deployment's shell scripts: validate with MAX_NUM_SEQS from the environment.
# dspark prints "MAX_NUM_SEQS not set, using default: 6" when nothing sets the seat count.
set -euo pipefail
exec dspark validate "$@"
