"""What the version matrix showed for engine releases dspark does not model (docs/version-matrix.md); data only.

An unmodelled release is planned with the nearest modelled one; this says, per release the matrix ran, what
that stands on: which modelled release it was compared with, whether any compared figure differed, and
whether the witness (the engine's own planner, run in its interpreter) can read that release.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MatrixEntry:
    """One release as the matrix saw it, beside the modelled release it was compared with."""

    engine: str
    version: str
    compared_with: str
    differs: str  # what differed from compared_with, in words; "" when every compared figure was equal
    witness_reads: bool
    witness_note: str = ""  # why the witness cannot read it, when it cannot

    def summary(self) -> str:
        """One sentence for a finding: what differs (or that nothing did) and what the witness can do."""
        what = (f"differs from {self.compared_with}: {self.differs}" if self.differs
                else f"gave {self.compared_with}'s figures on every case it ran")
        witness = ("its own planner runs as the witness (--engine-check)" if self.witness_reads
                   else f"the witness cannot read it ({self.witness_note})")
        return f"the version matrix (docs/version-matrix.md): {self.engine} {self.version} {what}; {witness}"


_VLLM_EQUAL = "KV planning: pools and concurrency on the tiny CPU models and the GB10 Flash-Next cases"
_SGLANG_OLD = ("its runtime context has no override_platform, so a CPU host cannot stand in for a CUDA one; "
               "sizing functions compared by source only")
# Measured by `run_matrix.py start` (docs/version-matrix.md, "dspark start across the range").
_H200_FRACTION = ("; on an H200 its default fraction is below 0.5.23's 0.91 too (Qwen3-32B at 32,768 tokens: "
                  "269,414 tokens against 271,132; equal with --mem-fraction-static 0.91 given)")

ENTRIES: tuple[MatrixEntry, ...] = (
    *(MatrixEntry("vllm", v, "0.32.0", "", True) for v in ("0.28.0", "0.29.0", "0.30.0", "0.31.0")),
    MatrixEntry("sglang", "0.5.22", "0.5.23", "", True),
    MatrixEntry(
        "sglang", "0.5.21", "0.5.23",
        "the default --mem-fraction-static on a GB10 (nvidia-smi [N/A]) is 0.891, not 0.895 "
        "(ServerArgs._handle_gpu_memory_settings), which lowers the pool by about 0.5% (28,668 of 5,205,219 "
        "tokens at 118 GiB free); with the fraction given, the pools are equal" + _H200_FRACTION,
        True),
    *(MatrixEntry(
        "sglang", v, "0.5.23",
        "the default --mem-fraction-static on a GB10 (nvidia-smi [N/A]) is 0.891, not 0.895, as in 0.5.21"
        + _H200_FRACTION, True) for v in ("0.5.19", "0.5.20")),
    MatrixEntry("sglang", "0.5.18", "0.5.23", "not compared in-process", False, _SGLANG_OLD),
)
_BY_KEY = {(e.engine, e.version): e for e in ENTRIES}


def matrix_entry(engine: str, version: str) -> MatrixEntry | None:
    """The matrix's word on one release, or None where the matrix did not run it."""
    return _BY_KEY.get((engine, version))


def matrix_note(engine: str, version: str) -> str:
    """The sentence a finding adds for an unmodelled release (says so where the matrix did not run it)."""
    entry = matrix_entry(engine, version)
    if entry is None:
        return f"the version matrix (docs/version-matrix.md) did not run {engine} {version}"
    return entry.summary()
