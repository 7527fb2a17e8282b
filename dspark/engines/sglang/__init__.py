"""SGLang: flag reader (options), launch plan (adapter), memory-pool accounting (capacity), registry entry (spec)."""
