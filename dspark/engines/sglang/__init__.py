"""SGLang: flag reader (options), launch plan (adapter), memory-pool accounting (capacity), planning hooks
(plan), start-up log lines (logs), KV-usage counting (kv_usage), registry entry (spec).
"""
