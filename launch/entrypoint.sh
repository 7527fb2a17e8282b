#!/usr/bin/env bash
# Container entrypoint: the environment (MAX_NUM_SEQS, DSPARK_*) configures dspark, which validates,
# prints the plan and execs the engine, so the engine becomes PID 1 and receives signals directly.
#   DSPARK_RECIPE  recipe name or path (default: the default recipe)
#   NODE_RANK      alias of DSPARK_NODE_RANK for multi-node images
#   Any arguments are passed to `dspark start` (e.g. --max-num-seqs 12, or -- <engine flags>).
set -euo pipefail
if [[ -n "${NODE_RANK:-}" && -z "${DSPARK_NODE_RANK:-}" ]]; then
  export DSPARK_NODE_RANK="$NODE_RANK"
fi
args=(start)
if [[ -n "${DSPARK_RECIPE:-}" ]]; then
  args+=("$DSPARK_RECIPE")
fi
exec dspark "${args[@]}" "$@"
