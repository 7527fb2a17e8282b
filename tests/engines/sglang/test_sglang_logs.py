"""SGLang's memory lines as dspark reads them (dspark.engines.sglang.logs.memory_terms), in the installed 0.5.23's
formats (model_runner.py "Load weight end", memory_pool.py _log_kv_size, kv_cache_configurator.py "Memory pool
end", cuda_graph_setup.py "Capture ... end")."""

from __future__ import annotations

import pytest

from dspark.engines import engine_spec
from dspark.engines.sglang.logs import memory_terms

LINES = {
    "[2026-12-01 10:00:01 TP0] Load weight end. elapsed=3.21 s, type=Qwen3ForCausalLM, avail mem=124.52 GB, "
    "mem usage=15.27 GB.": {"weights_gib": 15.27, "avail_after_weights_gib": 124.52},
    "[2026-12-01 10:00:02 TP0] Load weight end. elapsed=3.21 s, type=Qwen3ForCausalLM, quant=fp8, avail mem=130.00 "
    "GB, mem usage=8.50 GB.": {"weights_gib": 8.5, "avail_after_weights_gib": 130.0},
    "[2026-12-01 10:00:03 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 812345, K size: 55.77 GB, "
    "V size: 55.77 GB": {"kv_tokens": 812345.0, "kv_gib": 111.54},
    "[2026-12-01 10:00:03 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 400000, KV size: 20.10 GB":
        {"kv_tokens": 400000.0, "kv_gib": 20.1},
    "[2026-12-01 10:00:04 TP0] Memory pool end. avail mem=12.34 GB": {"avail_after_pool_gib": 12.34},
    "[2026-12-01 10:00:09 TP0] Capture target decode cuda graph end. bs=[1, 2, 4, 8], elapsed=5.00 s, mem usage=0.62 "
    "GB, avail mem=11.70 GB.": {"cudagraph_target_decode_gib": 0.62},
    "[2026-12-01 10:00:12 TP0] Capture target prefill CUDA graph end. elapsed=2.00 s, mem usage=0.30 GB, avail "
    "mem=11.40 GB.": {"cudagraph_target_prefill_gib": 0.3},
}


@pytest.mark.parametrize(("line", "terms"), LINES.items())
def test_each_memory_line_gives_its_terms(line: str, terms: dict[str, float]) -> None:
    assert memory_terms(line) == terms


@pytest.mark.parametrize("line", [
    "[2026-12-01 10:00:05 TP0] max_total_num_tokens=812345, chunked_prefill_size=8192, max_running_requests=2048",
    "KV Cache is allocated. dtype: torch.bfloat16",  # no figures
    "Memory pool end.",
    "",
])
def test_other_lines_give_none(line: str) -> None:
    assert memory_terms(line) is None


def test_the_spec_reads_them_and_keys_on_memory_flags_only() -> None:
    spec = engine_spec("sglang")
    line = next(iter(LINES))
    assert spec.log_format.memory_terms(line) == LINES[line]
    options = spec.parse_flags(["--mem-fraction-static", "0.8", "--disable-cuda-graph", "--port", "30001",
                                "--api-key", "s3cr3t-value"])
    flags = spec.memory_flags(options)
    assert flags["mem_fraction_static"] == 0.8 and flags["disable_cuda_graph"] is True
    assert "port" not in flags and "s3cr3t-value" not in repr(flags)
