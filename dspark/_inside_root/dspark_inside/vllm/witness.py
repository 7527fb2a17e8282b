"""`python -m dspark_inside.vllm.witness`: the installed vLLM's own KV planner on dspark's inputs (the witness).

shapes.VllmPlannerRequest (or a list of them) -> WitnessAnswer (or a list, from one engine import). The planning
is kv_plan's, shared with the scheduler replay. The capacity figures come from get_kv_cache_capacity where it
exists, else get_max_concurrency_for_kv_cache_config x max_model_len. The layers' specs are dspark's resolution:
the witness judges the planning arithmetic from specs and a budget, not the platform's block-size choice. A
release without those pieces is answered plainly as outside what the witness reads, naming what it lacks.
"""

from __future__ import annotations

import importlib

from dspark_inside import checks, protocol
from dspark_inside.shapes import VllmPlannerRequest, WitnessAnswer
from dspark_inside.vllm import kv_plan


def _figures(req: VllmPlannerRequest) -> WitnessAnswer:
    planned = kv_plan.plan(req)  # a release it cannot read is said so, before anything else is asked of it
    utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
    called = list(planned.functions)
    config, kv_config = planned.config, planned.kv_config
    max_model_len = config.model_config.max_model_len  # auto-fit writes the fitted length back
    if hasattr(utils, "get_kv_cache_capacity"):
        pool, concurrency = utils.get_kv_cache_capacity(config, kv_config)
        called.append("kv_cache_utils.get_kv_cache_capacity")
    else:
        concurrency = utils.get_max_concurrency_for_kv_cache_config(config, kv_config)
        pool = int(concurrency * max_model_len)
        called.append("kv_cache_utils.get_max_concurrency_for_kv_cache_config")
    per_request = sum(
        -(-g.kv_cache_spec.max_memory_usage_bytes(config) // g.kv_cache_spec.page_size_bytes)
        for g in kv_config.kv_cache_groups
    )
    line = (
        f"KV cache size: {pool:,} tokens, Maximum concurrency for {max_model_len:,} tokens per request: "
        f"{concurrency:.2f}x"
    )  # kv_cache_utils.update_kv_cache_capacity's format, without the device name
    return {
        "ok": True, "kv_pool_tokens": int(pool), "max_concurrency": float(concurrency),
        "max_model_len": int(max_model_len), "num_blocks": int(kv_config.num_blocks),
        "blocks_per_request": per_request, "kv_line": line, "functions": called,
    }


def _planner(request: VllmPlannerRequest) -> WitnessAnswer:
    figures = _figures(request)  # first: a release it cannot read is said so, before anything else is asked of it
    return {"engine_version": kv_plan.engine_version(), **figures}


def answer(request: VllmPlannerRequest) -> WitnessAnswer:
    """The witness's answer to one request; errors (an engine refusal included) come back as text."""
    return checks.witness("vllm", _planner, request)


if __name__ == "__main__":
    raise SystemExit(protocol.serve(protocol.each(answer)))
