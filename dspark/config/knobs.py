"""The settings table: every knob's environment variable, flag and its help, recipe key, converter and default.

Pure. dspark.config.settings resolves these (flag > environment > recipe > default); the plan options' --help
(dspark.commands.options) and docs/environment.md (dspark.config.environment_doc) are generated from this table,
so a knob is declared once. Each engine adds its own knobs from its package (dspark.engines.<name>.knobs)
into the slots named here.
"""

from __future__ import annotations

from typing import get_args

from dspark.core.constants import MAX_NUM_SEQS_LIMIT, KvCacheDtype
from dspark.core.knob import Invalid, Knob, boolean, choice, text, tokens, whole
from dspark.engines import DEFAULT_ENGINE, ENGINE_NAMES, engine_knob_declarations

# The fallback the deployment's scripts used when nothing set seats (what its KV pin held; docs/deployment.md).
# validate replaces it with the computed safe count for the configuration at hand (capacity.seats.default_seats).
DEFAULT_MAX_NUM_SEQS = 6


_KV_DTYPES: tuple[str, ...] = get_args(KvCacheDtype)

# Where each engine's own knobs go (Knob.slot), in engine order: a KV pool pinned outright (bytes, tokens), or sized
# as a share of GPU memory.
SLOTS = ("kv_pin", "kv_share")

_TABLE: tuple[Knob | str, ...] = (
    Knob("engine", "DSPARK_ENGINE", "--engine", "engine", choice(*ENGINE_NAMES), " or ".join(ENGINE_NAMES),
         DEFAULT_ENGINE, help=f"Engine (default: the recipe's, else {DEFAULT_ENGINE}).", rank=10,
         choices=ENGINE_NAMES),
    Knob("model", "DSPARK_MODEL", "--model", "model.path", text, "a model directory or repo id",
         help="Model directory (config.json; weights optional) or cached HF repo id.", metavar="DIR|REPO", rank=30),
    Knob("served_model_name", "DSPARK_SERVED_MODEL_NAME", None, "model.served_name", text, "a name"),
    Knob("platform", "DSPARK_PLATFORM", "--platform", None, choice("cuda", "cpu"), "cuda or cpu", computed=True,
         help="cuda (default) or cpu (vLLM's CPU build).", rank=20, choices=("cuda", "cpu")),
    Knob(
        "hardware",
        "DSPARK_HARDWARE",
        "--hardware",
        "hardware",
        text,
        "a hardware profile name or a file saved by `dspark probe --json` (`--platform cpu`: by `dspark probe "
        "--platform cpu --json`)",
        computed=True,
        help="Plan against a saved probe or a profile (gb10, gb10x2, rtx5090, h100-80gb, h200, b200; h200:8 = 8 GPUs); "
        "with --platform cpu, a CPU host saved by `dspark probe --platform cpu --json`.",
        metavar="FILE|PROFILE",
        rank=40,
    ),
    Knob(
        "tensor_parallel_size",
        "DSPARK_TP",
        "--tp",
        "parallel.tensor",
        whole(1, 1024),
        "1 to 1024",
        1,
        help="Tensor-parallel size.",
        metavar="N",
        rank=90,
    ),
    Knob(
        "pipeline_parallel_size",
        "DSPARK_PP",
        None,
        "parallel.pipeline",
        whole(1, 1024),
        "1 to 1024",
        1,
    ),
    # A Kubernetes LeaderWorkerSet sets LWS_GROUP_SIZE, LWS_WORKER_INDEX and LWS_LEADER_ADDRESS in every pod.
    Knob("nnodes", "DSPARK_NNODES", "--nnodes", "parallel.nodes", whole(1, 1024), "1 to 1024 nodes", 1,
         aliases=("LWS_GROUP_SIZE",), help="Nodes the engine spans.", metavar="N", rank=100),
    Knob("node_rank", "DSPARK_NODE_RANK", "--node-rank", None, whole(0, 1023), "0 to nnodes - 1", 0,
         aliases=("LWS_WORKER_INDEX",), help="This node's rank in a multi-node launch.", metavar="R", rank=110),
    Knob("master_addr", "DSPARK_MASTER_ADDR", "--master-addr", "parallel.master_addr", text, "an address",
         aliases=("LWS_LEADER_ADDRESS",), help="Address of node 0 (multi-node).", metavar="ADDR", rank=120),
    Knob("master_port", "DSPARK_MASTER_PORT", "--master-port", "parallel.master_port", whole(1, 65535), "1 to 65535",
         help="Port of node 0 (multi-node).", metavar="PORT", rank=130),
    Knob(
        "distributed_runtime",
        "DSPARK_DISTRIBUTED_RUNTIME",
        None,
        "parallel.runtime",
        choice("native", "ray"),
        "native or ray",
        "native",
    ),
    Knob(
        "max_model_len",
        "DSPARK_MAX_MODEL_LEN",
        "--max-model-len",
        "context.max_model_len",
        tokens,
        "a positive number of tokens (e.g. 262144 or 256K)",
        computed=True,
        help="Context window in tokens: 262144, or with vLLM's suffixes, k/m decimal and K/M binary: "
        "32k = 32,000, 256K = 262,144.",
        metavar="TOKENS",
        rank=70,
    ),
    Knob(
        "kv_cache_dtype",
        "DSPARK_KV_CACHE_DTYPE",
        "--kv-cache-dtype",
        "kv_cache.dtype",
        choice(*_KV_DTYPES),
        "one of " + ", ".join(_KV_DTYPES),
        "auto",
        help="KV-cache dtype: auto, fp8, bfloat16, ...",
        metavar="DTYPE",
        rank=80,
    ),
    *SLOTS,  # each engine's own knobs (engine_knobs), slot by slot
    Knob(
        "max_num_seqs",
        "MAX_NUM_SEQS",
        "--max-num-seqs",
        "batching.max_num_seqs",
        whole(1, MAX_NUM_SEQS_LIMIT),
        f"a whole number of seats from 1 to {MAX_NUM_SEQS_LIMIT}",
        DEFAULT_MAX_NUM_SEQS,
        help="Seats (vLLM --max-num-seqs, SGLang --max-running-requests).",
        metavar="N",
        rank=60,
    ),
    Knob(
        "max_num_batched_tokens",
        "DSPARK_MAX_NUM_BATCHED_TOKENS",
        None,
        "batching.max_num_batched_tokens",
        tokens,
        "a positive number of tokens (e.g. 8192 or 8K)",
    ),
    Knob(
        "num_speculative_tokens",
        "DSPARK_NUM_SPECULATIVE_TOKENS",
        None,
        "speculative.num_speculative_tokens",
        whole(1, 64),
        "1 to 64",
    ),
    Knob(
        "enable_prefix_caching",
        "DSPARK_PREFIX_CACHING",
        None,
        "prefix_caching",
        boolean,
        "1/0, true/false, yes/no or on/off",
    ),
    Knob("host", "DSPARK_HOST", None, None, text, "an address"),
    Knob("port", "DSPARK_PORT", "--port", None, whole(1, 65535), "1 to 65535", help="Port the server listens on.",
         metavar="PORT", rank=140),
)


def _assemble(table: tuple[Knob | str, ...], engines: tuple[Knob, ...]) -> tuple[Knob, ...]:
    """The table with each slot replaced by the engines' knobs for it; an engine knob in no slot is an error."""
    strays = [k.name for k in engines if k.slot not in SLOTS]
    if strays:
        raise AssertionError(f"engine knobs {strays} name no slot of {SLOTS}")
    out: list[Knob] = []
    for item in table:
        out += [k for k in engines if k.slot == item] if isinstance(item, str) else [item]
    return tuple(out)


KNOBS: tuple[Knob, ...] = _assemble(_TABLE, engine_knob_declarations())
KNOB_NAMES = tuple(k.name for k in KNOBS)
ENV_NAMES = ("DSPARK_RECIPE", *(k.env for k in KNOBS))
BY_NAME = {k.name: k for k in KNOBS}


def slot_knobs(slot: str) -> tuple[str, ...]:
    """The engines' own knobs in `slot` (SLOTS), in engine order: "kv_pin", each engine's KV-pool pin (vLLM's bytes,
    SGLang's tokens); "kv_share", the share of memory each gives its pool. Generic code names them through this."""
    return tuple(k.name for k in KNOBS if k.slot == slot)


def reads_as(name: str, raw: object, value: object) -> bool:
    """Whether a raw value of knob `name` (dspark's grammar: '256K', '4') converts to `value`, e.g. an engine flag's."""
    if raw == value:
        return True
    knob = BY_NAME.get(name)
    try:
        return knob is not None and bool(knob.convert(raw) == value)
    except Invalid:
        return False  # resolving the settings names the bad value; here it only differs


__all__ = [
    "BY_NAME", "DEFAULT_MAX_NUM_SEQS", "ENV_NAMES", "KNOBS", "KNOB_NAMES", "SLOTS", "Invalid", "Knob", "reads_as",
]
