"""The seat advisor: predict throughput, per-stream speed and queueing against seats; pure (no I/O)."""
