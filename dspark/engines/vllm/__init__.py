"""vLLM: flag reader (options), launch plan (adapter), KV accounting by version (capacity), registry entry (spec)."""
