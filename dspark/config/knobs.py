"""The settings table: every knob's environment variable, flag, recipe key, converter and default.

Pure. dspark.config.settings resolves these (flag > environment > recipe > default); --help and docs/environment.md
are generated from this table, so a knob is declared once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

from dspark.core.constants import MAX_NUM_SEQS_LIMIT, KvCacheDtype
from dspark.core.suggest import closest
from dspark.core.units import SIZE_UNITS_HELP, parse_count, parse_size
from dspark.engines import DEFAULT_ENGINE, ENGINE_NAMES

# The fallback the deployment's scripts used when nothing set seats (what its KV pin held; docs/deployment.md).
# validate replaces it with the computed safe count for the configuration at hand (capacity.seats.default_seats).
DEFAULT_MAX_NUM_SEQS = 6


class Invalid(Exception):
    """A raw value a knob rejects; the resolver adds where it came from and what is valid."""

    def __init__(self, reason: str, suggestion: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.suggestion = suggestion


Convert = Callable[[object], Any]


@dataclass(frozen=True)
class Knob:
    name: str
    env: str
    flag: str | None  # dspark's own command-line flag; None: set through the engine's flags after --, env, recipe
    recipe_path: str | None
    convert: Convert
    expected: str  # what is valid, in words, for messages
    default: object = None
    computed: bool = False  # when nothing sets it, a later layer derives it
    # Variables an orchestrator sets in every pod, read below `env` (which wins; a disagreement is noted).
    aliases: tuple[str, ...] = ()


def _blank(raw: object) -> bool:
    return isinstance(raw, str) and not raw.strip()


def _whole(lo: int, hi: int | None = None) -> Convert:
    def convert(raw: object) -> int:
        if isinstance(raw, bool):
            raise Invalid("not a whole number")
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, str) and re.fullmatch(r"\s*[+-]?\d+\s*", raw):
            if len(raw.strip()) > 20:  # beyond any bound here, and past 4,300 digits int() itself refuses
                raise Invalid("out of range")
            value = int(raw)
        else:
            raise Invalid("not a whole number")
        if value < lo or (hi is not None and value > hi):
            raise Invalid("out of range")
        return value

    return convert


def _tokens(raw: object) -> int:
    try:
        value = parse_count(raw) if isinstance(raw, str | int) else None
    except (ValueError, TypeError) as exc:
        raise Invalid(str(exc)) from None
    if value is None:
        raise Invalid("not a whole number of tokens")
    if value < 1:
        raise Invalid("out of range")
    return value


def _bytes(raw: object) -> int:
    try:
        value = parse_size(raw) if isinstance(raw, str | int) else None
    except (ValueError, TypeError) as exc:
        # The parser's message ends with the accepted units, which `expected` already lists.
        raise Invalid(str(exc).split("; use ", 1)[0]) from None
    if value is None:
        raise Invalid("not a size")
    if value < 1:
        raise Invalid("out of range")
    return value


def _fraction(*, upper_inclusive: bool) -> Convert:
    def convert(raw: object) -> float:
        if isinstance(raw, bool):
            raise Invalid("not a number")
        if isinstance(raw, str):
            if not re.fullmatch(r"\s*(\d+(\.\d*)?|\.\d+)\s*", raw):
                raise Invalid("not a number")
            raw = float(raw)
        if not isinstance(raw, int | float):
            raise Invalid("not a number")
        value = float(raw)
        if not (0 < value < 1 or (upper_inclusive and value == 1)):
            raise Invalid("out of range")
        return value

    return convert


def _choice(*options: str) -> Convert:
    def convert(raw: object) -> str:
        value = str(raw).strip().lower() if isinstance(raw, str) else None
        if value not in options:
            raise Invalid("not one of the choices", closest(str(raw), options))
        return value

    return convert


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _boolean(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = raw.strip().lower() if isinstance(raw, str) else ""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise Invalid("not a yes/no value")


def _text(raw: object) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise Invalid("not a non-empty string")
    return raw.strip()


_KV_DTYPES: tuple[str, ...] = get_args(KvCacheDtype)

KNOBS: tuple[Knob, ...] = (
    Knob("engine", "DSPARK_ENGINE", "--engine", "engine", _choice(*ENGINE_NAMES), " or ".join(ENGINE_NAMES),
         DEFAULT_ENGINE),
    Knob("model", "DSPARK_MODEL", "--model", "model.path", _text, "a model directory or repo id"),
    Knob("served_model_name", "DSPARK_SERVED_MODEL_NAME", None, "model.served_name", _text, "a name"),
    Knob("platform", "DSPARK_PLATFORM", "--platform", None, _choice("cuda", "cpu"), "cuda or cpu", computed=True),
    Knob(
        "hardware",
        "DSPARK_HARDWARE",
        "--hardware",
        "hardware",
        _text,
        "a hardware profile name or a file saved by `dspark probe --json` (`--platform cpu`: by `dspark probe "
        "--platform cpu --json`)",
        computed=True,
    ),
    Knob(
        "tensor_parallel_size",
        "DSPARK_TP",
        "--tp",
        "parallel.tensor",
        _whole(1, 1024),
        "1 to 1024",
        1,
    ),
    Knob(
        "pipeline_parallel_size",
        "DSPARK_PP",
        None,
        "parallel.pipeline",
        _whole(1, 1024),
        "1 to 1024",
        1,
    ),
    # A Kubernetes LeaderWorkerSet sets LWS_GROUP_SIZE, LWS_WORKER_INDEX and LWS_LEADER_ADDRESS in every pod.
    Knob("nnodes", "DSPARK_NNODES", "--nnodes", "parallel.nodes", _whole(1, 1024), "1 to 1024 nodes", 1,
         aliases=("LWS_GROUP_SIZE",)),
    Knob("node_rank", "DSPARK_NODE_RANK", "--node-rank", None, _whole(0, 1023), "0 to nnodes - 1", 0,
         aliases=("LWS_WORKER_INDEX",)),
    Knob("master_addr", "DSPARK_MASTER_ADDR", "--master-addr", "parallel.master_addr", _text, "an address",
         aliases=("LWS_LEADER_ADDRESS",)),
    Knob("master_port", "DSPARK_MASTER_PORT", "--master-port", "parallel.master_port", _whole(1, 65535), "1 to 65535"),
    Knob(
        "distributed_runtime",
        "DSPARK_DISTRIBUTED_RUNTIME",
        None,
        "parallel.runtime",
        _choice("native", "ray"),
        "native or ray",
        "native",
    ),
    Knob(
        "max_model_len",
        "DSPARK_MAX_MODEL_LEN",
        "--max-model-len",
        "context.max_model_len",
        _tokens,
        "a positive number of tokens (e.g. 262144 or 256K)",
        computed=True,
    ),
    Knob(
        "kv_cache_dtype",
        "DSPARK_KV_CACHE_DTYPE",
        "--kv-cache-dtype",
        "kv_cache.dtype",
        _choice(*_KV_DTYPES),
        "one of " + ", ".join(_KV_DTYPES),
        "auto",
    ),
    Knob(
        "kv_cache_memory_bytes",
        "DSPARK_KV_CACHE_MEMORY",
        "--kv-cache-memory",
        "kv_cache.memory",
        _bytes,
        f"a positive size: {SIZE_UNITS_HELP.removeprefix('use ')}",
        computed=True,
    ),
    Knob(
        "max_total_tokens",
        "DSPARK_KV_CACHE_TOKENS",
        None,
        "kv_cache.tokens",
        _tokens,
        "a positive number of tokens",
    ),
    Knob(
        "gpu_memory_utilization",
        "DSPARK_GPU_MEMORY_UTILIZATION",
        None,
        "kv_cache.gpu_memory_utilization",
        _fraction(upper_inclusive=True),
        "a fraction above 0 and at most 1 (e.g. 0.85)",
    ),
    Knob(
        "mem_fraction_static",
        "DSPARK_MEM_FRACTION_STATIC",
        None,
        "kv_cache.mem_fraction_static",
        _fraction(upper_inclusive=False),
        "a fraction between 0 and 1 (e.g. 0.85)",
    ),
    Knob(
        "max_num_seqs",
        "MAX_NUM_SEQS",
        "--max-num-seqs",
        "batching.max_num_seqs",
        _whole(1, MAX_NUM_SEQS_LIMIT),
        f"a whole number of seats from 1 to {MAX_NUM_SEQS_LIMIT}",
        DEFAULT_MAX_NUM_SEQS,
    ),
    Knob(
        "max_num_batched_tokens",
        "DSPARK_MAX_NUM_BATCHED_TOKENS",
        None,
        "batching.max_num_batched_tokens",
        _tokens,
        "a positive number of tokens (e.g. 8192 or 8K)",
    ),
    Knob(
        "num_speculative_tokens",
        "DSPARK_NUM_SPECULATIVE_TOKENS",
        None,
        "speculative.num_speculative_tokens",
        _whole(1, 64),
        "1 to 64",
    ),
    Knob(
        "enable_prefix_caching",
        "DSPARK_PREFIX_CACHING",
        None,
        "prefix_caching",
        _boolean,
        "1/0, true/false, yes/no or on/off",
    ),
    Knob("host", "DSPARK_HOST", None, None, _text, "an address"),
    Knob("port", "DSPARK_PORT", "--port", None, _whole(1, 65535), "1 to 65535"),
)
KNOB_NAMES = tuple(k.name for k in KNOBS)
ENV_NAMES = ("DSPARK_RECIPE", *(k.env for k in KNOBS))
BY_NAME = {k.name: k for k in KNOBS}


def reads_as(name: str, raw: object, value: object) -> bool:
    """Whether a raw value of knob `name` (dspark's grammar: '256K', '4') converts to `value`, e.g. an engine flag's."""
    if raw == value:
        return True
    knob = BY_NAME.get(name)
    try:
        return knob is not None and bool(knob.convert(raw) == value)
    except Invalid:
        return False  # resolving the settings names the bad value; here it only differs
