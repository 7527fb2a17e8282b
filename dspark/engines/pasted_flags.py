"""Engine flags after `--`: read by the engine's flag reader, mapped onto dspark's knobs, the rest named.

Pure: the readers (dspark/engines/<name>/options.py) mirror each engine's own parser; nothing here runs an
engine. Flag reading has four rooms: dspark.engines.argv (the argparse machinery every reader runs on),
dspark/engines/<engine>/options.py (each engine's reader), dspark.engines.flag_values (the value converters
they share) and dspark.engines.pasted_flags (what the pasted flags set: knob values, unplaced flags, DP).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dspark.core.errors import SettingsError
from dspark.core.findings import Finding
from dspark.core.suggest import closest
from dspark.engines.spec import AnyEngineSpec


def parse_engine_flags(engine: AnyEngineSpec, argv: tuple[str, ...]) -> Any:
    """The pasted engine flags as the engine's own flag reader sees them."""
    return engine.parse_flags(argv)


def flag_values_from_engine_flags(engine: AnyEngineSpec, options: Any) -> dict[str, object]:
    """Knob values the pasted engine flags set (only those dspark plans with)."""
    out: dict[str, object] = {}
    spec = engine
    for attr, knob in spec.flag_knobs.items():
        value = getattr(options, attr, None)
        if value is None or (knob == "max_model_len" and not isinstance(value, int)):
            continue
        out[knob] = value
    for attr, knob in spec.negated_flag_knobs.items():
        if getattr(options, attr, None):
            out[knob] = False
    return out


SameValue = Callable[[str, object, object], bool]


def merge_flags(own: Mapping[str, object | None], pasted: Mapping[str, object], *,
                same: SameValue) -> dict[str, object | None]:
    """dspark's flags and the pasted engine flags together; the same knob given differently is an error.

    same(knob, raw, parsed): whether dspark's raw value, read in dspark's grammar, is the engine flag's parsed
    one (docs/units.md): `--max-num-seqs 4 -- --max-num-seqs 4` agrees, and so does `--max-model-len 1M --
    --context-length 1Mi` (SGLang's 1M is 10**6). dspark.config.knobs.reads_as is that test.
    """
    merged = dict(own)
    for knob, value in pasted.items():
        mine = merged.get(knob)
        if mine is not None and not same(knob, mine, value):
            raise SettingsError(
                f"{knob} is given twice on the command line: {mine!r} (dspark flag) and {value!r} (engine flag)",
                hint="give it once",
            )
        merged[knob] = value
    return merged


def unplaced_flag_findings(engine: AnyEngineSpec, options: Any) -> list[Finding]:
    """Engine flags after `--` that dspark's reader does not know: said, with a guess where one is close.

    dspark reads only the flags that change capacity; the rest reach the engine untouched. validate does not
    run the engine's parser, so a typo such as --max-num-seq would otherwise pass unremarked.
    """
    flags = [arg.partition("=")[0] for arg in getattr(options, "unknown", ()) if arg.startswith("-")]
    if not flags:
        return []
    known = engine.known_flags()
    named = []
    for flag_name in flags:
        close = closest(flag_name, known, cutoff=0.85)
        named.append(f"{flag_name} (did you mean {close}?)" if close else flag_name)
    return [Finding("warn", "argv-not-checked",
                    f"dspark cannot place these {engine.name} flags: {', '.join(named)}; they are passed to the engine "
                    "unchecked here (dspark reads the flags that change capacity; `dspark start` runs the installed "
                    "engine's own parser, which rejects unknown ones)")]


def data_parallel_of(engine: AnyEngineSpec, options: Any) -> tuple[int, bool]:
    """(DP size, DP attention) from the engine flags, as the engine reads them (its EngineSpec.data_parallel).

    Plain DP adds replicas of TP × PP GPUs each; DP attention runs the DP ranks inside the TP group (no extra GPUs).
    """
    return engine.data_parallel(options)
