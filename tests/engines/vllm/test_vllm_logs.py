"""vLLM's memory lines as dspark reads them (dspark.engines.vllm.logs.memory_terms), on the engine's own text.

The 0.25.0 lines are copied from tests/device/results/2026-12-01 (H200 boots); the 0.32.0 ones from a CPU boot
of the installed build and from its source's formats (gpu_worker.py, gpu_model_runner.py, utils/mem_utils.py).
"""

from __future__ import annotations

import pytest

from dspark.engines import engine_spec
from dspark.engines.vllm.logs import memory_terms

# H200, vLLM 0.25.0 (tests/device/results/2026-12-01/logs.tar.xz: qwen3.5-27b-mtp3.log, qwen3-8b.log, pinned run).
H200_025 = {
    "(EngineCore pid=1324) INFO 12-01 22:20:51 [v1/worker/gpu_model_runner.py:5306] Model loading took 51.02 GiB "
    "memory and 0.948030 seconds": {"weights_gib": 51.02},
    "(EngineCore pid=2132) INFO 12-01 22:05:48 [model_runner.py:302] Model loading took 15.27 GiB and 2.122392 "
    "seconds": {"weights_gib": 15.27},
    "(EngineCore pid=1324) INFO 12-01 22:23:12 [v1/worker/gpu_model_runner.py:6639] Estimated CUDA graph memory: "
    "0.54 GiB total": {"cudagraph_estimate_gib": 0.54},
    "(EngineCore pid=1324) DEBUG 12-01 22:23:13 [v1/worker/gpu_worker.py:537] Memory profiling takes 141.85 seconds. "
    "Total non KV cache memory: 54.2GiB; torch peak memory increase: 2.93GiB; non-torch forward increase memory: "
    "0.25GiB; weights memory: 51.02GiB.": {"non_kv_gib": 54.2, "torch_peak_increase_gib": 2.93,
                                            "non_torch_increase_gib": 0.25, "profiled_weights_gib": 51.02},
    "(EngineCore pid=1324) INFO 12-01 22:23:13 [v1/worker/gpu_worker.py:538] Available KV cache memory: 73.88 GiB":
        {"available_kv_gib": 73.88},
    "(EngineCore pid=2132) INFO 12-01 22:06:26 [model_runner.py:722] Graph capturing finished in 1 secs, took "
    "0.15 GiB": {"cudagraph_captured_gib": 0.15},
    "(EngineCore pid=2132) INFO 12-01 22:06:25 [gpu_worker.py:459] Initial free memory 139.29 GiB, reserved 20.0 GiB "
    "memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling.":
        {"initial_free_gib": 139.29, "available_kv_gib": 20.0},
}
# vLLM 0.32.0: MemoryProfilingResult.__repr__ names "total consumed (from mem_get_info)" where 0.25 said
# "non-torch forward increase memory"; the CPU worker's determine_available_memory lines, unpinned and pinned.
V032 = {
    "Memory profiling takes 12.50 seconds. Total non KV cache memory: 16.33GiB; torch peak memory increase: 1.1GiB; "
    "total consumed (from mem_get_info): 15.23GiB; weights memory: 15.0GiB.":
        {"non_kv_gib": 16.33, "torch_peak_increase_gib": 1.1, "total_consumed_gib": 15.23,
         "profiled_weights_gib": 15.0},
    "(EngineCore pid=31501) INFO 12-02 06:18:40 [cpu_worker.py:262] Auto set (1.41/23.54) GiB for KV cache on node 0, "
    "with 2.82 GiB requested memory for the worker. 1.41 GiB memory was consumed by non-kv usages.":
        {"available_kv_gib": 1.41, "node_total_gib": 23.54, "requested_gib": 2.82, "non_kv_gib": 1.41},
    "(EngineCore pid=7) INFO 12-02 06:18:40 [cpu_worker.py:262] Explicitly set (1.0/23.54) GiB for KV cache on node 0.":
        {"available_kv_gib": 1.0, "node_total_gib": 23.54},
}


@pytest.mark.parametrize(("line", "terms"), [*H200_025.items(), *V032.items()])
def test_each_memory_line_gives_its_terms(line: str, terms: dict[str, float]) -> None:
    assert memory_terms(line) == terms


@pytest.mark.parametrize("line", [
    "(EngineCore pid=2852) INFO 12-01 22:08:41 [kv_cache_utils.py:2146] GPU KV cache size: 814,368 tokens",
    "(APIServer pid=1) INFO [api_utils.py:286] non-default args: {'max_num_seqs': 2}",
    "Model loading took a while",  # no figure: not the engine's line
    "Available KV cache memory: unknown GiB",
    "",
])
def test_other_lines_give_none(line: str) -> None:
    assert memory_terms(line) is None


def test_the_spec_reads_them_through_its_log_format() -> None:
    fmt = engine_spec("vllm").log_format
    line = next(iter(H200_025))
    assert fmt.memory_terms(line) == H200_025[line]
    # Its KV-pool line stays what it was.
    kv = fmt.kv_pool("(EngineCore pid=3) INFO [kv_cache_utils.py:2328] CPU KV cache size: 1,388,672 tokens, "
                     "Maximum concurrency for 2,048 tokens per request: 678.06x")
    assert kv is not None and (kv.pool_tokens, kv.max_model_len) == (1_388_672, 2048)


def test_memory_flags_keep_memory_settings_and_only_the_names_of_unread_flags() -> None:
    spec = engine_spec("vllm")
    secret = "sk-live-0123456789abcdef"  # noqa: S105 - a made-up value the key must not hold
    options = spec.parse_flags(["--enforce-eager", "--dtype", "float16", "--api-key", secret,
                                f"--hf-token={secret}", "--port", "8123", "--max-cudagraph-capture-size", "64"])
    flags = spec.memory_flags(options)
    assert flags["dtype"] == "float16" and flags["enforce_eager"] is True
    assert flags["max_cudagraph_capture_size"] == 64
    assert "port" not in flags  # launch-only
    assert secret not in repr(flags)
    unread = flags["unread_flags"]
    assert isinstance(unread, list) and {"--api-key", "--hf-token"} <= set(unread)
