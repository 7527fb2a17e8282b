"""Configuration: knobs, settings with provenance, recipes (pydantic, YAML, checks, messages)."""
