"""SGLang: flag reader (options), launch plan (adapter), memory-pool accounting (capacity), planning hooks
(plan), start-up log lines (logs), KV-usage counting (kv_usage), registry entry (spec).

POOL_PIN: the knob that pins its KV pool, and its unit (read cheaply by the registry, before any spec loads).
"""

from typing import Literal

POOL_PIN: tuple[str, Literal["bytes", "tokens"]] = ("max_total_tokens", "tokens")
