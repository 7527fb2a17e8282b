"""Scripts that run in SGLang's interpreter (by path, never imported by dspark)."""
