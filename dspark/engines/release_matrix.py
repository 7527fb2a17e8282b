"""What the version matrix showed for engine releases dspark does not model (docs/version-matrix.md); data only.

With the modelled releases it also sets the range the engine extras pin (`extra_requirement`): pyproject.toml
repeats it, and tests/engines/test_release_matrix.py holds the two equal.

An unmodelled release is planned with the nearest modelled one; this says, per release the matrix ran, what
that stands on: which modelled release it was compared with, whether any compared figure differed, and
whether the witness (the engine's own planner or sizing, run in its interpreter) can read that release.
"""

from __future__ import annotations

from typing import NamedTuple

from dspark.engines import engine_spec


class MatrixEntry(NamedTuple):
    """One release as the matrix saw it, beside the modelled release it was compared with."""

    engine: str
    version: str
    compared_with: str
    differs: str  # what differed from compared_with, in words; "" when every compared figure was equal
    witness_reads: bool
    witness_note: str = ""  # why the witness cannot read it, or what limits what it reads

    def summary(self) -> str:
        """One sentence for a finding: what differs (or that nothing did) and what the witness can do."""
        what = (f"differs from {self.compared_with}: {self.differs}" if self.differs
                else f"gave {self.compared_with}'s figures on every case it ran")
        witness = ("its own planner runs as the witness (--engine-check)" if self.witness_reads
                   else f"the witness cannot read it ({self.witness_note})")
        if self.witness_reads and self.witness_note:
            witness += f"; {self.witness_note}"
        return f"the version matrix (docs/version-matrix.md): {self.engine} {self.version} {what}; {witness}"


_VLLM_EQUAL = "KV planning: pools and concurrency on the tiny CPU models and the GB10 Flash-Next cases"
# SGLang: each release's own sizing run in-process by the witness (docs/version-matrix.md, "SGLang: every
# release's own sizing"); the figures quoted are the seed case (flash-next-sglang, TP=2 over two GB10s, 118 GiB
# free at start-up, 26 GiB loaded) against 0.5.23's 5,019,351 / 4,767,831 tokens at 16 / 32 seats, and the
# oracle suite's tiny models on an H200, all with the breakable prefill CUDA graph a CUDA host gets.
_FRACTION_0887 = "the default --mem-fraction-static on a GB10 (nvidia-smi [N/A]) is 0.887, not 0.891"
_HYBRID_0907 = ("it reserves nothing for a prefill CUDA graph on a hybrid model: the tiny hybrid on an H200 gets "
                "0.907, not 0.903 (+0.5% of the pool)")
_MTP_UNCOUNTED = ("with NEXTN and no --speculative-draft-model-path, the target's cell leaves out an MTP layer "
                  "the config lists (num_nextn_predict_layers), so such pools are larger (up to +50% on the tiny "
                  "hybrid case; Flash-Next's config lists none)")
_REFUSES_SEED = ("it refuses NEXTN on a hybrid model with the radix cache unless given --mamba-scheduler-strategy "
                 "extra_buffer and SGLANG_ENABLE_SPEC_V2=1 (its ServerArgs._handle_mamba_radix_cache)")


_OLD_GRAPH_FLAG = ("its parser has no --cuda-graph-max-bs-decode (its flag is --cuda-graph-max-bs): `dspark start` "
                   "passes that name to its parser and its witness; --engine-check hands the witness dspark's argv, "
                   "which it refuses")


def _sglang(version: str, differs: str) -> MatrixEntry:
    old_parser = version in ("0.5.10", "0.5.11", "0.5.12", "0.5.13")
    return MatrixEntry("sglang", version, "0.5.23", differs, True, _OLD_GRAPH_FLAG if old_parser else "")


# vLLM 0.27.x read against 0.26.0's source; its own planner agreed with dspark's 0.26.0 figures on the seven
# GPU-truth configs (tests/device/configs, H200, 32,768 tokens), pinned at 20 GiB and at dspark's unpinned budget.
_VLLM_027 = ("its unpinned KV budget follows 0.32's accounting (Worker.determine_available_memory: the free-memory "
             "drop after the profile run plus the transient peak headroom, without 0.32's allocator split limit), "
             "which no GPU run has measured, so the unpinned estimate is 0.26.0's heuristics; its default-V2 "
             "architectures take the V2 runner even when hybrid, and a hybrid MLA/Mamba block aligns to 128; "
             "pinned, every pool the witness compared was 0.26.0's")


ENTRIES: tuple[MatrixEntry, ...] = (
    *(MatrixEntry("vllm", v, "0.26.0", _VLLM_027, True) for v in ("0.27.0", "0.27.1")),
    *(MatrixEntry("vllm", v, "0.32.0", "", True) for v in ("0.28.0", "0.29.0", "0.30.0", "0.31.0")),
    _sglang("0.5.22", ""),
    *(_sglang(v, f"{_FRACTION_0887}, which lowers the seed pool to 4,987,539 / 4,736,019 at 16 / 32 seats "
                 f"(-31,812 tokens, -0.6%; with the fraction given, equal)")
      for v in ("0.5.20", "0.5.21")),
    *(_sglang(v, f"{_FRACTION_0887} (seed pool 4,987,539 / 4,736,019 at 16 / 32 seats, -0.6%); {_MTP_UNCOUNTED}")
      for v in ("0.5.17", "0.5.18", "0.5.19")),
    *(_sglang(v, f"{_FRACTION_0887}, so the seed pool is 4,996,971 / 4,745,451 at 16 / 32 seats (-22,380 tokens, "
                 f"-0.4%); {_MTP_UNCOUNTED}")
      for v in ("0.5.15", "0.5.16")),
    _sglang("0.5.14", f"its default fraction on a GB10 is 0.891 as 0.5.23's, but it keeps 520 hybrid state slots "
                      f"(0.5.23: 517), so the seed pool is 5,028,783 / 4,777,263 at 16 / 32 seats (+9,432 tokens, "
                      f"+0.2%); {_HYBRID_0907}; {_MTP_UNCOUNTED}"),
    _sglang("0.5.13", f"{_REFUSES_SEED}; given them, its default fraction on a GB10 is 0.858 and the seed pool "
                      f"4,767,121 / 4,515,601 at 16 / 32 seats (-252,230 tokens, -5.0%); {_HYBRID_0907}; "
                      f"{_MTP_UNCOUNTED}"),
    *(_sglang(v, f"{_REFUSES_SEED}; given them, its default fraction on a GB10 is 0.858 and the speculative "
                 f"state is split with the KV pool, so the seed pool is 3,330,313 / 3,198,265 at 16 / 32 seats "
                 f"(-33%); {_HYBRID_0907}; {_MTP_UNCOUNTED}")
      for v in ("0.5.10", "0.5.11", "0.5.12")),
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


def _release_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def covered_range(engine: str) -> tuple[str, str]:
    """The oldest and newest releases of `engine` that the matrix ran or dspark models."""
    versions = [e.version for e in ENTRIES if e.engine == engine] + list(engine_spec(engine).modelled_versions)
    return min(versions, key=_release_key), max(versions, key=_release_key)


def extra_requirement(engine: str) -> str:
    """The engine extra's requirement: the covered range (pyproject.toml's [vllm] / [sglang] extras say this)."""
    oldest, newest = covered_range(engine)
    return f"{engine}>={oldest},<={newest}"
