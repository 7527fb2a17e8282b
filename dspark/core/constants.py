"""Names and limits shared by recipes, settings and the CLI; importing this costs nothing (no pydantic)."""

from __future__ import annotations

from typing import Literal

DEFAULT_RECIPE = "flash-next-vllm"

# No engine runs anywhere near this many sequences in one batch (vLLM's own default is 256 or 1024,
# SGLang's CUDA-graph tables stop at 512); a larger number is a typo (an extra digit, tokens for seats),
# and both engines preallocate per-seat state (SGLang's req_to_token rows, hybrid state slots), so a huge
# value turns into an out-of-memory crash at start-up instead of an error here.
MAX_NUM_SEQS_LIMIT = 65536


# The KV-cache dtypes dspark can account for; other engine spellings are refused here rather than
# guessed at, because the pool size depends on the bytes per element.
KvCacheDtype = Literal[
    "auto",
    "bfloat16",
    "bf16",
    "float16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
    "nvfp4",
    "mxfp8",
    "fp4_e2m1",
    "fp4_mx_block16",
]
