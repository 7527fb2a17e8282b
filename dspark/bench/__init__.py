"""Measure seats against a live engine: streaming bench client, /metrics sampler, sweep, supervision."""
