"""vLLM: flag reader (options), launch plan (adapter), KV accounting by version (capacity), planning hooks
(plan), start-up log lines (logs), KV-usage counting (kv_usage), registry entry (spec).
"""
