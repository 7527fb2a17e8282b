"""The model: architecture from config.json, model directories, weights (pure, but for modeldir's file reads)."""
