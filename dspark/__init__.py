"""dspark: the engine's own capacity arithmetic before launch, then a verified argv."""

__version__ = "0.1.0"
