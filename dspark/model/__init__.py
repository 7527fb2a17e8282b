"""The model: architecture from config.json, model directories, weights, loading for a plan."""
