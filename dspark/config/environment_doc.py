"""docs/environment.md, generated from the settings table (dspark.config.knobs) and each engine's flag reader.

  python -m dspark.config.environment_doc --write-docs    rewrite docs/environment.md
  python -m dspark.config.environment_doc --check-docs    exit 1 when the checked-in file is not the generated one
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dspark.config.knobs import KNOBS, Knob
from dspark.config.settings import engine_flags_for
from dspark.engines import ENGINE_NAMES, engine_knobs_module, engine_spec

DOC = Path(__file__).resolve().parents[2] / "docs" / "environment.md"

_HEAD = (
    '# Environment variables\n'
    '\n'
    'Precedence: command-line flag > environment > recipe > built-in default (`--explain` shows where '
    'each value\n'
    'came from). A variable that is set but empty is an error, not "unset": an empty value usually means '
    'a broken\n'
    'compose file (write the variable out rather than `${VAR:-}`). `DSPARK_*` names dspark does not read '
    'are reported\n'
    'as likely typos. `dspark validate --help` lists each variable beside its flag.\n'
    '\n'
)

_RECIPE_ROW = ("| `DSPARK_RECIPE` | recipe | the RECIPE argument | — | — | a shipped recipe name or a recipe file |")

_TAIL = (
    '"dspark flag" is dspark\'s own option; "engine flag after `--`" is the engine\'s own serve flag, '
    'which dspark\n'
    'reads from the flags you pass after `--` (`dspark validate --model DIR -- --gpu-memory-utilization '
    '0.85`) and\n'
    'which set the same setting; "—": there is none. A setting the chosen engine does not read '
    '(`DSPARK_KV_CACHE_TOKENS`\n'
    'with vLLM, `DSPARK_GPU_MEMORY_UTILIZATION` with SGLang, `DSPARK_MEM_FRACTION_STATIC` with vLLM) is '
    'an error that\n'
    'names what to use; `DSPARK_KV_CACHE_MEMORY` with SGLang becomes the tokens that budget buys at '
    "SGLang's bytes per\n"
    'token, launched as `--max-total-tokens` (said in a finding). A command-line value that overrides a '
    'variable is\n'
    'said: `MAX_NUM_SEQS=8 from the environment overridden by --max-num-seqs 12` (stderr; '
    '`settings.<name>.overridden`\n'
    'in `--json`).\n'
    '\n'
    "Sizes and token counts are read in dspark's grammar; engine flags after `--` in the engine's own\n"
    '([units.md](units.md) says which is which).\n'
    '\n'
    "`MAX_NUM_SEQS` keeps the name the deployment's container scripts used. When nothing sets the seats, "
    'dspark\n'
    'uses the computed safe count (every seat holds a full window) and prints `MAX_NUM_SEQS not set, '
    'using default: N`.\n'
    '\n'
    'Read elsewhere:\n'
    '\n'
    '| variable | what it does |\n'
    '|---|---|\n'
    "| `DSPARK_DATA_DIR` | dspark's data directory: the boots `start --watch` and `sweep` record (`observations/`, "
    'one JSON file per plan; `dspark observations` lists and clears them); default `$XDG_DATA_HOME/dspark`, '
    'else `~/.local/share/dspark` ([observations.md](observations.md)) |\n'
    "| `DSPARK_ENGINE_PYTHON` | the interpreter of the engine's virtualenv (`--engine-python`), for the "
    'argv check and `start` |\n'
    '| `DSPARK_ENGINE_VERSION` | the engine version the figures model (`--engine-version`); default: the '
    "installed engine's, else the newest modelled |\n"
    '| `DSPARK_ENGINES_DIR` | where the test suite finds the engines it installs (default `.engines/`) |\n'
    '| `DSPARK_IMAGE` | the container image `launch/compose.spark-pair.yaml` runs |\n'
    "| `DSPARK_PROFILE_TRACE` | `1`: an eager single-GPU vLLM estimate takes its activation peak from the "
    "installed release's own profile run, traced on this host (tens of seconds once, then cached under "
    '`profile-traces/` in the data directory) ([profile-trace.md](profile-trace.md)) |\n'
    '| `LWS_GROUP_SIZE`, `LWS_WORKER_INDEX`, `LWS_LEADER_ADDRESS` | set by a Kubernetes LeaderWorkerSet '
    'in every pod: nnodes, node_rank and master_addr, below `DSPARK_NNODES`, `DSPARK_NODE_RANK`, '
    '`DSPARK_MASTER_ADDR` (an explicit one wins; a disagreement is noted) ([deployment.md](deployment.md)) |\n'
    '| `RAY_ADDRESS` | the Ray cluster `dspark start` joins when the distributed runtime is `ray` '
    '(default: the local one) |\n'
    '| `CUDA_VISIBLE_DEVICES` | which GPUs the engine will see, in order; dspark plans against exactly '
    'those ([hardware.md](hardware.md)) |\n'
    "| `VLLM_*` | passed to vLLM; `VLLM_CPU_KVCACHE_SPACE` sizes the CPU build's KV cache "
    '([engines/vllm.md](engines/vllm.md)) |\n'
    '| `HF_TOKEN`, `*_TOKEN`, `*_KEY`, `*_SECRET`, `*_PASSWORD` | never printed: plans show `***` for '
    'their values |\n'
)


def _engine_flags(knob: Knob, engine: str) -> list[str]:
    """The engine's own flags that set `knob`, each with its --no- form where the reader takes one."""
    spec = engine_spec(engine)
    known = set(spec.known_flags())
    derived = engine_knobs_module(engine).DERIVED_FLAGS.get(knob.name, ())
    negated = [f"--{attr.replace('_', '-')}" for attr, name in spec.negated_flag_knobs.items() if name == knob.name]
    shown = []
    for flag in (*engine_flags_for(knob.name, engine), *derived, *negated):
        off = "--no-" + flag.removeprefix("--")
        shown.append(f"`{flag}` / `{off}`" if off in known else f"`{flag}`")
    return shown


def _row(knob: Knob) -> str:
    engines = "; ".join(f"{engine_knobs_module(e).TITLE} {' / '.join(flags)}" for e in ENGINE_NAMES
                        if (flags := _engine_flags(knob, e)))
    cells = (f"`{knob.env}`", knob.name, f"`{knob.flag}`" if knob.flag else "—", engines or "—",
             f"`{knob.recipe_path}`" if knob.recipe_path else "—", knob.expected)
    return "| " + " | ".join(cells) + " |"


def environment_md() -> str:
    """The text of docs/environment.md."""
    table = ["| variable | setting | dspark flag | engine flag after `--` | recipe key | accepted values |",
             "|---|---|---|---|---|---|", _RECIPE_ROW, *(_row(k) for k in KNOBS)]
    return _HEAD + "\n".join(table) + "\n\n" + _TAIL


def main(argv: list[str] | None = None) -> int:
    """--write-docs rewrites the file; --check-docs exits 1 when it is stale."""
    parser = argparse.ArgumentParser(prog="python -m dspark.config.environment_doc",
                                     description=(__doc__ or "").splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write-docs", action="store_true", help=f"rewrite {DOC}")
    mode.add_argument("--check-docs", action="store_true", help="exit 1 when the checked-in file is stale")
    args = parser.parse_args(argv)
    text = environment_md()
    if args.write_docs:
        DOC.write_text(text, encoding="utf-8")
        return 0
    if DOC.read_text(encoding="utf-8") != text:
        sys.stderr.write(f"{DOC} is stale: run python -m dspark.config.environment_doc --write-docs\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
