"""Scripts that run in the vLLM interpreter (by path, not imported by dspark): they import only vllm and stdlib."""
