"""dspark's KV-usage count for Flash-Next ("align" GDN state, MTP 4) against vLLM's own KVCacheManager.

The CPU engine cannot serve GDN state in "align" mode (its pre-copy is a Triton kernel), so the real-engine
check (tests/bench/test_kv_usage_engine.py) covers "none" mode; here vLLM's scheduler-side manager itself,
driven without a model (tests/real_engines/kv_usage_witness.py), holds Flash-Next's groups through 8 prefills and
their decode, and the blocks it holds are compared step by step with what dspark counts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dspark.advise.kv_usage import counting_for
from dspark.planning.validate import ValidateRequest, validate

HERE = Path(__file__).resolve().parent
REQUESTS, PROMPT, OUTPUT, ACCEPTED = 8, 2048, 512, 2


@pytest.mark.engine
@pytest.mark.timeout(300)
def test_flash_next_align_blocks_are_the_managers_own(vllm_python: str) -> None:
    report = validate(ValidateRequest(recipe="flash-next-vllm", flags={"max_num_seqs": REQUESTS}))
    details = report.capacity.details
    counting = counting_for(report.capacity)
    groups = details["groups"]
    assert isinstance(groups, list) and details["mamba_cache_mode"] == "align"
    mamba_groups = sum(1 for g in groups if g["kind"] == "mamba")
    spec = int(details["num_speculative_tokens"])  # type: ignore[call-overload]
    case = {"block_size": details["block_size"], "speculative_tokens": spec, "num_blocks": details["num_blocks"],
            "mamba_groups": mamba_groups, "requests": REQUESTS, "prompt": PROMPT, "output": OUTPUT,
            "accepted": ACCEPTED}
    proc = subprocess.run([vllm_python, str(HERE / "kv_usage_witness.py"), json.dumps(case)], capture_output=True,
                          text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["usable"] == counting.pools[0].size
    assert seen["after_prefill"] == REQUESTS * counting.per_request(PROMPT)["blocks"]
    transient = []
    for step in seen["steps"]:
        counted = REQUESTS * counting.per_request(step["computed"] + 1 + spec)["blocks"]
        if step["blocks"] != counted:
            # The one departure: while a request's state crosses a block boundary the previous state block
            # lingers (MambaManager frees it at the next allocation): one more block per GDN group per request.
            assert step["blocks"] == counted + REQUESTS * mamba_groups, step
            transient.append(step["computed"])
    steps = len(seen["steps"])
    peak = max(s["usage"] for s in seen["steps"])
    counted_peak = counting.usage([PROMPT + OUTPUT - 1 - ACCEPTED + spec] * REQUESTS)
    print(f"\nvLLM KVCacheManager, Flash-Next align, {REQUESTS} requests of {PROMPT} + {OUTPUT}: {steps} decode "
          f"steps match dspark's count in {steps - len(transient)}; {len(transient)} crossing steps hold "
          f"{REQUESTS * mamba_groups} blocks more (at {transient}); peak usage {peak:.4f} vs dspark's "
          f"{counted_peak:.4f} at the last step")
    # The transient lasts while the verified and proposed tokens straddle a boundary: a few steps per block.
    block = int(details["block_size"])  # type: ignore[call-overload]
    crossings = (PROMPT + OUTPUT) // block - PROMPT // block
    assert len(transient) <= crossings * (-(-(1 + spec) // (1 + ACCEPTED)) + 1)
