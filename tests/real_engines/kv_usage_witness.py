"""Drive vLLM's scheduler-side KVCacheManager (no model) and print the blocks it holds (run by the engine's python).

Usage: kv_usage_witness.py JSON, with block_size, speculative_tokens, num_blocks, mamba_groups, requests,
prompt, output, accepted. The hybrid's groups are built as vLLM builds Flash-Next's: `mamba_groups` groups of
GDN state in "align" mode (prefix caching on) and one full-attention group holding the MTP layer. Every request
is prefilled in one chunk, then all decode together, each step verifying 1 + speculative tokens (lookahead slots
reserved as the scheduler reserves them) and keeping 1 + accepted. Prints one JSON object: the blocks held
after the prefills, after each decode step's allocation (when the engine would report usage), and
KVCacheManager.usage at those points.
"""

from __future__ import annotations

import json
import sys

import torch
from vllm import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from vllm.v1.request import Request


def main(arg: str) -> None:
    """Run one case and print its JSON."""
    c = json.loads(arg)
    bs, spec, nb = c["block_size"], c["speculative_tokens"], c["num_blocks"]
    mamba = MambaSpec(block_size=bs, shapes=((4, 4),), dtypes=(torch.bfloat16,), page_size_padded=589824,
                      mamba_cache_mode="align", num_speculative_blocks=spec)
    full = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=256, dtype=torch.bfloat16)
    groups = [KVCacheGroupSpec([f"gdn{i}.{j}" for j in range(12)], mamba) for i in range(c["mamba_groups"])]
    groups.append(KVCacheGroupSpec([f"attn{j}" for j in range(13)], full, is_eagle_group=True))
    init_none_hash(sha256)
    manager = KVCacheManager(KVCacheConfig(num_blocks=nb, kv_cache_tensors=[], kv_cache_groups=groups),
                             max_model_len=262144, scheduler_block_size=bs, hash_block_size=bs,
                             max_in_flight_tokens=8192, enable_caching=True, use_eagle=True,
                             num_prefill_lookahead=spec)
    hasher = get_request_block_hasher(bs, sha256)
    prompt, output, accepted = c["prompt"], c["output"], c["accepted"]
    reqs = [Request(f"r{i}", [10 + (i * 7 + t) % 400 for t in range(prompt)], SamplingParams(max_tokens=output),
                    None, block_hasher=hasher) for i in range(c["requests"])]

    def held() -> int:
        blocks: int = round(manager.usage * (nb - 1))
        return blocks

    for r in reqs:
        blocks, hit, _ = manager.get_computed_blocks(r)
        assert manager.allocate_slots(r, prompt - hit, hit, blocks, num_lookahead_tokens=spec) is not None
        r.num_computed_tokens = prompt
        r.append_output_token_ids(5)
    after_prefill = held()
    steps: list[dict[str, float]] = []
    while reqs[0].num_output_tokens + 1 + accepted <= output:
        for r in reqs:
            r.spec_token_ids = [7] * spec
            assert manager.allocate_slots(r, 1 + spec, num_lookahead_tokens=spec) is not None
        steps.append({"computed": reqs[0].num_computed_tokens, "blocks": held(), "usage": manager.usage})
        for r in reqs:
            r.num_computed_tokens += 1 + accepted
            r.append_output_token_ids([5] * (1 + accepted))
            r.spec_token_ids = []
    print(json.dumps({"after_prefill": after_prefill, "usable": nb - 1, "steps": steps}))


if __name__ == "__main__":
    main(sys.argv[1])
