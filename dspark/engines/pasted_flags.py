"""Engine flags after `--`: read by the engine's flag reader, mapped onto dspark's knobs, the rest named.

Pure: the readers (dspark/engines/<name>/options.py) mirror each engine's own parser; nothing here runs an
engine. Flag reading has five rooms: dspark.engines.argv (the argparse machinery every reader runs on),
dspark/engines/<engine>/options.py (each engine's reader), dspark.engines.flag_values (the value converters
they share), dspark.engines.parser_flags (each release's whole table of flags: abbreviations, flags it
lacks) and dspark.engines.pasted_flags (what the pasted flags set: knob values, unplaced flags, DP).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from dspark.core.errors import SettingsError
from dspark.core.findings import Finding
from dspark.core.suggest import closest
from dspark.engines.parser_flags import EngineArgv, FlagTable, engine_argv, flag_table, require_unambiguous
from dspark.engines.spec import AnyEngineSpec


class PastedFlags(NamedTuple):
    """The pasted engine flags as the engine's parser reads them: spelled out, read, and what was said."""

    argv: tuple[str, ...]  # every abbreviation spelled out (the launch passes these)
    options: Any  # the engine's flag reader on them (VllmOptions, SglangOptions)
    findings: tuple[Finding, ...] = ()
    table: FlagTable | None = None  # the engine's table of flags they were read against (None: dspark has none)


def read_engine_flags(engine: AnyEngineSpec, argv: Sequence[str], version: str | None = None) -> PastedFlags:
    """The pasted flags read as `engine` `version`'s parser reads them (None: the newest release dspark has).

    Abbreviations are the flag they abbreviate (`--max-num-se 64` is --max-num-seqs 64, said as an info); an
    ambiguous one and a flag that parser does not have are refused (SettingsError), as the engine refuses them,
    where dspark has that release's table; where another release's table stands in, they are warnings.
    """
    table = flag_table(engine.name, version)
    if table is None:
        options = engine.parse_flags(tuple(argv))
        return PastedFlags(tuple(argv), options, tuple(unplaced_flag_findings(engine, options)))
    read = engine_argv(argv, table, engine.flag_grammar)
    findings: list[Finding] = []
    if table.exact:
        require_unambiguous(read, table)
        _require_known(engine, read, table)
    else:
        findings += _stand_in_findings(engine, read, table, version)
    if read.abbreviated:
        spelled = ", ".join(f"{given} as {full}" for given, full in read.abbreviated)
        findings.append(Finding("info", "engine-flag-abbreviated",
                                f"{table.label} reads abbreviated flags, and so does dspark: {spelled}"))
    return PastedFlags(read.argv, engine.parse_flags(read.argv), tuple(findings), table)


def parse_engine_flags(engine: AnyEngineSpec, argv: tuple[str, ...], version: str | None = None) -> Any:
    """The pasted engine flags as the engine's own flag reader sees them (abbreviations spelled out)."""
    return read_engine_flags(engine, argv, version).options


def _foreign_hint(engine: AnyEngineSpec, flag: str) -> str | None:
    """`that is sglang's flag; vllm's is --kv-cache-memory-bytes`, for another engine's flag that sets a knob."""
    from dspark.engines import ENGINE_NAMES, engine_spec, foreign_knobs  # noqa: PLC0415 - the registry imports this module's users

    for name in ENGINE_NAMES:
        other_table = flag_table(name, None)
        if name == engine.name or other_table is None or flag not in other_table.options:
            continue
        knob = engine_spec(name).flag_knobs.get(flag[2:].replace("-", "_"))
        if knob is None:
            return f"{flag} is {name}'s flag, not {engine.name}'s"
        instead = dict(foreign_knobs(engine.name)).get(knob, knob)
        own = [f"--{attr.replace('_', '-')}" for attr, k in engine.flag_knobs.items() if k == instead]
        return (f"{flag} is {name}'s flag ({knob}); {engine.name}'s is {' or '.join(own)}" if own else
                f"{flag} is {name}'s flag ({knob}); {engine.name} has no flag for it")
    return None


def _guesses(read: EngineArgv, table: FlagTable) -> list[str]:
    """`--api-key for --apikey`: the parser's flag closest to each unknown one, where one is close. Worded so that
    no text follows a flag's name where a value could (the redactor hides what follows a secret-looking flag)."""
    known = [o for o in table.options if o.startswith("--")]
    out = []
    for flag_name in dict.fromkeys(read.unknown):
        close = closest(flag_name, known, cutoff=0.8) if flag_name.startswith("--") else None
        if close:
            out.append(f"{close} for {flag_name}")
    return out


def _require_known(engine: AnyEngineSpec, read: EngineArgv, table: FlagTable) -> None:
    """A flag the engine's parser does not have is refused now, as that parser refuses it at start."""
    if not read.unknown:
        return
    guesses = _guesses(read, table)
    hints = [h for h in (_foreign_hint(engine, f) for f in dict.fromkeys(read.unknown)) if h]
    hints += [f"did you mean {', '.join(guesses)}?"] if guesses else []
    raise SettingsError(
        f"{table.label} has no flag {', '.join(dict.fromkeys(read.unknown))}: it would refuse the argv "
        "(unrecognized arguments)",
        hint="; ".join(hints) if hints else f"remove or rename it (`{engine.name} serve --help` lists the flags)",
    )


def _stand_in_findings(engine: AnyEngineSpec, read: EngineArgv, table: FlagTable,
                       version: str | None) -> list[Finding]:
    """Where dspark has no table for the release, the nearest one's verdicts are said, not enforced."""
    out = []
    why = (f"dspark has no table of {engine.name} {version}'s flags; {table.label} stands in, and `dspark start` "
           "runs the installed engine's own parser")
    if read.unknown:
        guesses = _guesses(read, table)
        out.append(Finding("warn", "argv-not-checked",
                           f"{table.label} has no flag {', '.join(dict.fromkeys(read.unknown))} ({why})"
                           + (f"; did you mean {', '.join(guesses)}?" if guesses else "")))
    for given, candidates in read.ambiguous:
        out.append(Finding("warn", "argv-not-checked",
                           f"{given} could match {', '.join(candidates)} in {table.label}; dspark did not read it "
                           f"({why})"))
    return out


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
    """Engine flags after `--` that dspark's reader does not know, for an engine dspark has no table of flags for:
    said, with a guess where one is close (with a table, read_engine_flags judges every flag as the engine does).
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


# Launch-only or identity fields: they do not change what the engine holds in memory (the model is keyed by its
# config, not its path); `unknown` is kept by flag name only, never with values (which may be secrets).
_NOT_MEMORY = frozenset({"model", "model_path", "served_model_name", "host", "port", "unknown", "ambiguous"})


def memory_flags(options: Any) -> dict[str, object]:
    """The parsed engine flags (either engine's options dataclass) that change the engine's memory, for the key
    of a recorded boot; secret-free."""
    import dataclasses  # noqa: PLC0415

    out: dict[str, object] = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)
                              if f.name not in _NOT_MEMORY and getattr(options, f.name) is not None}
    names = sorted({arg.split("=", 1)[0] for arg in getattr(options, "unknown", ()) if arg.startswith("-")})
    if names:
        out["unread_flags"] = names
    return out
