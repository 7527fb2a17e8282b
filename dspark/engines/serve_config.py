"""ServeConfig: every value one engine launch needs, resolved (precedence applied) and validated.

Built by dspark.planning.serve_config from the settings; an engine's adapter (dspark/engines/<engine>/adapter.py)
turns it into a LaunchPlan. Nothing here reads the world.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dspark.capacity.result import EngineValues


@dataclass(frozen=True)
class ServeConfig:
    """Every value the launch needs, already resolved (precedence applied) and validated."""

    engine: str
    model: str
    max_num_seqs: int
    platform: Literal["cpu", "cuda"] = "cuda"
    served_model_name: str | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str | None = None
    max_num_batched_tokens: int | None = None
    cudagraph_max_capture_size: int | None = None
    speculative: Mapping[str, Any] | None = None  # {"method", "num_speculative_tokens", "model"}
    enable_prefix_caching: bool | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    host: str | None = None
    port: int | None = None
    extra_args: tuple[str, ...] = ()  # the user's own engine flags, passed through after ours are removed
    env: Mapping[str, str] = field(default_factory=dict)
    distributed_runtime: str = "native"  # "ray": the engine places its workers on a running Ray cluster
    # The engine's own knobs (EngineSpec.engine_knobs) by name: its KV-pool pin, in its unit, and its memory share.
    engine_values: EngineValues = field(default_factory=dict)
