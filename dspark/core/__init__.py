"""Leaf modules every layer may use: errors, units, constants, redaction, JSON files, findings, hints, dataclass."""
