"""Settings: each knob's value and where it came from; command-line flag > environment > recipe > default.

Pure: the environment comes in as a Mapping argument; nothing here reads os.environ.

Every knob (its variable, flag, recipe key and accepted values) is declared once, in the settings table
(dspark.config.knobs); docs/environment.md is generated from it (python -m dspark.config.environment_doc).
A set-but-empty variable is an error, as issue #3 asks: "unset" and "empty" are different, and an empty
MAX_NUM_SEQS usually means a broken compose file or script.

Sources, as --explain and --json print them:
  flag                       a command-line flag
  env:NAME                   environment variable NAME
  recipe:<file>:<key.path>   that key of the recipe file
  default                    dspark's built-in default (a None value: the engine's own default applies)
  computed                   derived by a later layer (hardware probe, capacity); filled in with with_computed()
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dspark.core.constants import DEFAULT_RECIPE
from dspark.core.errors import SettingsError
from dspark.core.redact import printable
from dspark.core.suggest import closest
from dspark.engines import ENGINE_NAMES, engine_spec, foreign_knobs, pool_pins

if TYPE_CHECKING:  # pydantic models cost start-up time; settings only reads recipe attributes
    from dspark.config.recipes import Recipe
from dspark.config.knobs import BY_NAME, ENV_NAMES, KNOB_NAMES, KNOBS, Invalid, Knob, slot_knobs
from dspark.core.units import format_size

T = TypeVar("T")

ENGINE_FLAG = "its engine flag after --"  # where a knob without a dspark flag came from on the command line
FALLBACK_NOTICE = "MAX_NUM_SEQS not set, using default: {value}"

# DSPARK_* names other parts of dspark read, so their presence is not reported as a typo.
OTHER_DSPARK_ENV = frozenset({"DSPARK_DATA_DIR", "DSPARK_ENGINE_PYTHON", "DSPARK_ENGINE_VERSION", "DSPARK_ENGINES_DIR",
                              "DSPARK_IMAGE", "DSPARK_PROFILE_TRACE"})

_SOURCE_RANK = {"flag": 0, "env": 1, "recipe": 2, "default": 3, "computed": 3}


@dataclass(frozen=True)
class Setting(Generic[T]):
    """A value and the place it came from ("flag", "env:NAME", "recipe:<file>:<key>", "default", "computed")."""

    value: T
    source: str
    # (source, raw value) of the environment value this one replaced; not part of what the setting is.
    overridden: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @property
    def layer(self) -> str:
        """The source without its detail: flag, env, recipe, default or computed."""
        return self.source.split(":", 1)[0]

    def to_json(self) -> dict[str, object]:
        """{"value": ..., "source": ...}, plus "overridden": [{"source", "value"}] when it replaced the environment."""
        out: dict[str, object] = {"value": self.value, "source": self.source}
        if self.overridden:
            out["overridden"] = [{"source": source, "value": raw} for source, raw in self.overridden]
        return out


@dataclass(frozen=True)
class ResolvedSettings:
    """Every knob as a Setting; printable as JSON (to_json) and as a table (explain).

    The fields are the recipe, then the knob table's names in its order, each typed as its converter returns
    (None where the knob has no default): typed here for mypy, held equal to the table by
    tests/config/test_knobs.py. A knob an engine package declares that no field types (a new engine's, before
    it earns a field) is in `engine_settings`; `setting(name)` reads either.
    """

    recipe: Setting[str | None]
    engine: Setting[str]
    model: Setting[str | None]
    served_model_name: Setting[str | None]
    platform: Setting[str | None]
    hardware: Setting[str | None]
    tensor_parallel_size: Setting[int]
    pipeline_parallel_size: Setting[int]
    nnodes: Setting[int]
    node_rank: Setting[int]
    master_addr: Setting[str | None]
    master_port: Setting[int | None]
    distributed_runtime: Setting[str]
    max_model_len: Setting[int | None]
    kv_cache_dtype: Setting[str]
    kv_cache_memory_bytes: Setting[int | None]
    max_total_tokens: Setting[int | None]
    gpu_memory_utilization: Setting[float | None]
    mem_fraction_static: Setting[float | None]
    max_num_seqs: Setting[int]
    max_num_batched_tokens: Setting[int | None]
    num_speculative_tokens: Setting[int | None]
    enable_prefix_caching: Setting[bool | None]
    host: Setting[str | None]
    port: Setting[int | None]
    notes: tuple[str, ...] = ()  # what resolution decided that a user should see (ignored values, blanks)
    engine_settings: Mapping[str, Setting[Any]] = field(default_factory=dict)  # engine knobs without a field

    def setting(self, name: str) -> Setting[Any]:
        """The Setting of knob `name` (a field, or one of engine_settings); KeyError for a name that is neither."""
        if name in self.engine_settings:
            return self.engine_settings[name]
        found = getattr(self, name, None) if name in _TYPED else None
        if not isinstance(found, Setting):
            raise KeyError(name)
        return found

    def settings(self) -> dict[str, Setting[Any]]:
        """Name -> Setting: the recipe, then the knob table's order."""
        return {"recipe": self.recipe, **{name: self.setting(name) for name in KNOB_NAMES}}

    @property
    def pool_pin_settings(self) -> tuple[Setting[Any], ...]:
        """Each engine's KV-pool pin (the knob table's kv_pin slot), set or not: at most the plan's engine's is."""
        return tuple(self.setting(name) for name in slot_knobs("kv_pin"))

    @property
    def max_num_seqs_is_fallback(self) -> bool:
        """True when nothing set the seats: the built-in default, or the safe count capacity computed for it."""
        return self.max_num_seqs.layer in ("default", "computed")

    def notices(self) -> tuple[str, ...]:
        """Lines to print before launching: the seats fallback (as the deployment's scripts said it), then notes."""
        fallback = (FALLBACK_NOTICE.format(value=self.max_num_seqs.value),) if self.max_num_seqs_is_fallback else ()
        return fallback + self.notes

    def to_json(self) -> dict[str, dict[str, object]]:
        """{"max_num_seqs": {"value": 12, "source": "env:MAX_NUM_SEQS"}, ...}."""
        return {name: setting.to_json() for name, setting in self.settings().items()}

    def explain(self) -> str:
        """A table of each value and where it came from, for --explain."""
        rows = [(name, _shown(name, s.value, s.source), s.source) for name, s in self.settings().items()]
        width = max(len(r[0]) for r in rows)
        vwidth = max(len(r[1]) for r in rows)
        # The notices are not repeated here: they are printed once, on stderr, beside this table.
        # Values come from recipes and the environment: their control characters are shown, not obeyed.
        return printable("\n".join(f"{name:<{width}}  {value:<{vwidth}}  {source}" for name, value, source in rows))

    def with_computed(self, **values: object) -> ResolvedSettings:
        """Fill in values another layer derived; only knobs that nothing else set (source default or computed)."""
        changes: dict[str, Any] = {}
        engine = dict(self.engine_settings)
        for name, value in values.items():
            current = self.setting(name)
            if current.layer not in ("default", "computed"):
                raise ValueError(f"{name} was set by {current.source}; a computed value must not replace it")
            if name in engine:
                engine[name] = Setting(value, "computed")
            else:
                changes[name] = Setting(value, "computed")
        return replace(self, **changes, engine_settings=engine)

    def missing_for_launch(self) -> tuple[str, ...]:
        """What `start` still needs that planning does not (the address of node 0 for a multi-node launch)."""
        missing: list[str] = []
        if self.nnodes.value > 1 and self.distributed_runtime.value == "native" and self.master_addr.value is None:
            missing.append(
                f"a launch across {self.nnodes.value} nodes needs the address of node 0: "
                "set --master-addr or DSPARK_MASTER_ADDR (or parallel.master_addr in the recipe)"
            )
        if self.model.value is None:
            missing.append("no model: give a recipe or --model DIR")
        return tuple(missing)


# The knobs ResolvedSettings types as fields (the rest of the table is in its engine_settings).
_TYPED = frozenset(f.name for f in fields(ResolvedSettings)) - {"recipe", "notes", "engine_settings"}


def _shown(name: str, value: object, source: str) -> str:
    if value is None:
        return "(computed later)" if source == "computed" else "(engine default)"
    if isinstance(value, int) and (name, "bytes") in pool_pins():  # a pin in bytes: shown as a size too
        return f"{value} = {format_size(value)}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def select_recipe(cli_recipe: str | None, env: Mapping[str, str], *, model_given: bool = False) -> Setting[str | None]:
    """Which recipe to load: --recipe > DSPARK_RECIPE > the default recipe (none when --model is given)."""
    # Set-but-empty is an error, as for every setting: '' usually means a broken script or compose file.
    if cli_recipe is not None:
        if not cli_recipe.strip():
            raise SettingsError(f"RECIPE {cli_recipe!r}: empty; expected a shipped recipe name or a recipe file",
                                hint="leave the argument out to use DSPARK_RECIPE or the default recipe")
        return Setting(cli_recipe.strip(), "flag")
    raw = env.get("DSPARK_RECIPE")
    if raw is not None:
        if not raw.strip():
            raise SettingsError(
                f"DSPARK_RECIPE={raw!r}: empty; expected a shipped recipe name or a recipe file",
                hint="unset DSPARK_RECIPE to use the default recipe (in compose files, leave the variable out "
                "rather than writing ${DSPARK_RECIPE:-})",
            )
        return Setting(raw.strip(), "env:DSPARK_RECIPE")
    return Setting(None if model_given else DEFAULT_RECIPE, "default")


def resolve_settings(
    cli: Mapping[str, object | None],
    env: Mapping[str, str],
    recipe: Recipe | None,
    defaults: Mapping[str, object] | None = None,
) -> ResolvedSettings:
    """Apply flag > environment > recipe > default to every knob; SettingsError for malformed or clashing values."""
    # cli: knob name (KNOB_NAMES, plus "recipe") -> flag value, None where the flag was not given.
    # defaults: knob name -> a default that replaces the built-in one.
    unknown = set(cli) - set(KNOB_NAMES) - {"recipe"}
    if unknown:
        raise KeyError(f"not a setting: {', '.join(sorted(unknown))}")
    overrides = dict(defaults or {})
    if set(overrides) - set(KNOB_NAMES):
        raise KeyError(f"not a setting: {', '.join(sorted(set(overrides) - set(KNOB_NAMES)))}")
    notes: list[str] = []
    values: dict[str, Setting[Any]] = {}
    for knob in KNOBS:
        values[knob.name] = _resolve_one(
            knob, cli.get(knob.name), env=env, recipe=recipe, overrides=overrides, notes=notes
        )

    _one_pool_pin(values, notes)
    _one_runtime(values, env, recipe)
    _check_against_recipe(values, recipe)
    _check_engine_reads(values)
    _check_combinations(values)
    notes.extend(_single_node_unused(values))
    notes.extend(_stray_env(env))

    cli_recipe = cli.get("recipe")
    choice = select_recipe(cli_recipe if isinstance(cli_recipe, str) else None, env, model_given=recipe is None)
    if recipe is not None and choice.layer == "default":
        choice = Setting(recipe.name, "default")
    typed = {name: setting for name, setting in values.items() if name in _TYPED}
    untyped = {name: setting for name, setting in values.items() if name not in _TYPED}
    return ResolvedSettings(recipe=choice, notes=tuple(notes), engine_settings=untyped, **typed)


def _resolve_one(
    knob: Knob,
    flag_value: object | None,
    *,
    env: Mapping[str, str],
    recipe: Recipe | None,
    overrides: Mapping[str, object],
    notes: list[str],
) -> Setting[Any]:
    raw = env.get(knob.env)
    if flag_value is not None:
        # A knob without a dspark flag reached the command line through the engine's own flags after --.
        given = knob.flag or ENGINE_FLAG
        value = _convert(knob, flag_value, given)
        setting: Setting[Any] = Setting(value, "flag")
        if raw is not None:
            # Precedence is no secret: the environment value the command line replaced is said (stderr, --json).
            notes.append(f"{knob.env}={raw} from the environment overridden by {given} "
                         f"{_shown(knob.name, value, 'flag')}")
            setting = Setting(value, "flag", overridden=((f"env:{knob.env}", raw),))
        return _over_alias(knob, setting, env, notes)
    if raw is not None:
        if not raw.strip():
            raise SettingsError(
                f"{knob.env}={raw!r}: empty; expected {knob.expected}",
                hint=f"unset {knob.env} to use the recipe's value or the default (in compose files, leave the "
                f"variable out rather than writing ${{{knob.env}:-}})",
            )
        return _over_alias(knob, Setting(_convert(knob, raw, knob.env), f"env:{knob.env}"), env, notes)
    for alias in knob.aliases:  # an orchestrator's variable (LeaderWorkerSet): below dspark's own, above the recipe
        raw = env.get(alias)
        if raw is not None:
            if not raw.strip():
                raise SettingsError(f"{alias}={raw!r}: empty; expected {knob.expected}",
                                    hint=f"set {knob.env} to override it")
            return Setting(_convert(knob, raw, alias), f"env:{alias}")
    if recipe is not None and knob.recipe_path is not None:
        value = _recipe_value(recipe, knob.recipe_path)
        if value is not None:
            return Setting(value, f"recipe:{recipe.source}:{knob.recipe_path}")
    if knob.name in overrides:
        return Setting(overrides[knob.name], "default")
    return Setting(knob.default, "computed" if knob.computed and knob.default is None else "default")


def _over_alias(knob: Knob, setting: Setting[Any], env: Mapping[str, str], notes: list[str]) -> Setting[Any]:
    """An explicit value wins over an orchestrator's variable; a disagreement between them is noted."""
    for alias in knob.aliases:
        raw = env.get(alias)
        if raw is None:
            continue
        try:
            theirs = knob.convert(raw)
        except Invalid:
            theirs = raw
        if theirs != setting.value:
            notes.append(f"{where(setting)} sets {knob.name}={setting.value!r}, which wins over {alias}={raw!r}")
    return setting


def _shown_raw(raw: object) -> str:
    """A raw value for a message: whole, or its start and length when it is longer than a line (5,000 digits)."""
    text = repr(raw) if not isinstance(raw, int) or raw.bit_length() < 256 else f"<a {raw.bit_length():,}-bit number>"
    return text if len(text) <= 80 else f"{text[:40]}… ({len(text):,} characters)"


def _convert(knob: Knob, raw: object, where: str) -> object:
    try:
        return knob.convert(raw)
    except Invalid as exc:
        # where: dspark's flag (--x), the engine's flags after -- (ENGINE_FLAG), or a variable (its own or an alias).
        from_env = not where.startswith("--") and where != ENGINE_FLAG
        value = _shown_raw(raw)
        if from_env:
            shown = f"{where}={value}"
        elif where == ENGINE_FLAG:
            shown = f"{knob.name} {value} (an engine flag after --)"
        else:
            shown = f"{where} {value}"
        hint = None
        if from_env:
            fallback = "the recipe's value" + (f" or the default ({knob.default})" if knob.default is not None else "")
            hint = f"unset {where} to use {fallback}"
        suggestion = f"; did you mean {exc.suggestion!r}?" if exc.suggestion else ""
        raise SettingsError(f"{shown}: {exc.reason}; expected {knob.expected}{suggestion}", hint=hint) from None


def recipe_value(recipe: Recipe, name: str) -> object:
    """The value the recipe itself gives knob `name` (None where it gives none), as resolution would read it."""
    path = BY_NAME[name].recipe_path
    return None if path is None else _recipe_value(recipe, path)


def _recipe_value(recipe: Recipe, path: str) -> object:
    node: object = recipe
    for part in path.split("."):
        node = getattr(node, part, None)
        if node is None:
            return None
    return node


def _one_pool_pin(values: dict[str, Setting[Any]], notes: list[str]) -> None:
    """The engines' KV-pool pins (each engine package's POOL_PIN) are spellings of one pin: the higher layer wins
    whole."""
    set_pins = [(knob, unit) for knob, unit in dict(pool_pins()).items() if values[knob].value is not None]
    if len(set_pins) < 2:
        return
    (first, first_unit), (second, second_unit) = set_pins[:2]
    a, b = values[first], values[second]
    if _SOURCE_RANK[a.layer] == _SOURCE_RANK[b.layer]:
        raise SettingsError(
            f"both a KV pin in {first_unit} ({a.source}) and one in {second_unit} ({b.source}) are set",
            hint="keep one: each fixes the size of the KV pool",
        )
    if _SOURCE_RANK[a.layer] < _SOURCE_RANK[b.layer]:
        notes.append(f"{second} from {b.source} is ignored: {a.source} pins the KV pool in {first_unit}")
        values[second] = Setting(None, "default")
    else:
        notes.append(f"{first} from {a.source} is ignored: {b.source} pins the KV pool in {second_unit}")
        values[first] = Setting(None, "default")


def _one_runtime(values: dict[str, Setting[Any]], env: Mapping[str, str], recipe: Recipe | None) -> None:
    """The engine's own backend flag (after `--`) passes through verbatim: a lower layer must not say otherwise."""
    runtime = values["distributed_runtime"]
    if runtime.layer != "flag":
        return
    knob = BY_NAME["distributed_runtime"]
    others = []
    raw = env.get(knob.env)
    if raw is not None and raw.strip().lower() != runtime.value:
        others.append(f"{knob.env}={raw!r}")
    in_recipe = _recipe_value(recipe, "parallel.runtime") if recipe is not None else None
    if in_recipe is not None and in_recipe != runtime.value:
        others.append(f"{recipe.source if recipe else ''}: parallel.runtime {in_recipe}")
    if others:
        raise SettingsError(
            f"the engine flags ask for distributed runtime {runtime.value!r} but {' and '.join(others)} says otherwise",
            hint="they are one setting: keep one of them, or make them agree",
        )


def how_to_set(knob: str, engine: str) -> str:
    """Every way a user sets `knob` for `engine`: dspark's flag, the engine's own flag after --, env, recipe key."""
    k = BY_NAME[knob]
    ways = [k.flag] if k.flag else []
    ways += [f"{engine}'s {flag} after --" for flag in engine_flags_for(knob, engine)]
    ways.append(k.env)
    if k.recipe_path:
        ways.append(f"{k.recipe_path} in the recipe")
    return ", ".join(ways)


def engine_flags_for(knob: str, engine: str) -> tuple[str, ...]:
    """The engine's own flags (given after --) that set `knob`, where the flag is spelled as its reader's field."""
    spec = engine_spec(engine)
    known = set(spec.known_flags())
    spelled = (f"--{attr.replace('_', '-')}" for attr, name in spec.flag_knobs.items() if name == knob)
    return tuple(flag for flag in spelled if flag in known)


def where(setting: Setting[Any]) -> str:
    """How a user would name the place a value came from."""
    if setting.layer == "env":
        return setting.source.split(":", 1)[1]
    if setting.layer == "flag":
        return "the command line"
    return setting.source


def _check_against_recipe(values: dict[str, Setting[Any]], recipe: Recipe | None) -> None:
    engine = values["engine"]
    if recipe is not None and engine.value != recipe.engine:
        raise SettingsError(
            f"recipe {recipe.name} is for {recipe.engine}, but {where(engine)} asks for {engine.value}",
            hint=f"pick a {engine.value} recipe (dspark recipes list) or unset {BY_NAME['engine'].env}",
        )
    spec = values["num_speculative_tokens"]
    if spec.value is not None and (recipe is None or recipe.speculative is None):
        raise SettingsError(
            f"{where(spec)} sets num_speculative_tokens, but no speculative method is configured",
            hint="speculative decoding is set up in the recipe (speculative.method)",
        )


_WRITTEN = ("flag", "env", "recipe")  # layers a user wrote; default and computed values are dspark's own


def _check_engine_reads(values: dict[str, Setting[Any]]) -> None:
    """The knob x engine rule: a setting the engine does not read is a SettingsError naming it, never a no-op.

    From the engine's spec: a knob it has no such setting for (dspark.engines.foreign_knobs: its spec's, and
    every other engine's own knob it does not read), a platform it has no build for (platforms), a value its
    parser does not take for a knob both engines read (knob_values).
    """
    engine = values["engine"].value
    spec = engine_spec(engine)
    for name, instead in foreign_knobs(engine):
        setting = values[name]
        if setting.value is not None:
            raise SettingsError(
                f"{name} from {where(setting)} does not apply to {engine}: {engine} has no such setting",
                hint=f"use {instead} for {engine} ({how_to_set(instead, engine)})",
            )
    platform = values["platform"]
    if platform.value is not None and platform.value not in spec.platforms:
        others = [name for name in ENGINE_NAMES if platform.value in engine_spec(name).platforms]
        raise SettingsError(
            f"platform {platform.value} from {where(platform)} does not apply to {engine}: dspark plans {engine} "
            f"only for {', '.join(spec.platforms)}",
            hint=f"use --platform {spec.platforms[0]} with {engine}"
            + (f", or --engine {others[0]} for its {platform.value} build" if others else ""),
        )
    for knob, accepted in spec.knob_values.items():
        setting = values[knob]
        if setting.layer in _WRITTEN and setting.value not in accepted:
            raise SettingsError(
                f"{knob} {setting.value!r} from {where(setting)} is not a value {engine} takes",
                hint=f"{engine} takes {', '.join(accepted)} ({how_to_set(knob, engine)})",
            )


def _check_combinations(values: dict[str, Setting[Any]]) -> None:
    nodes, rank = values["nnodes"], values["node_rank"]
    if rank.value >= nodes.value:
        raise SettingsError(
            f"node_rank {rank.value} from {where(rank)} is out of range for {nodes.value} node(s) "
            f"(ranks 0 to {nodes.value - 1})",
            hint=f"nnodes comes from {where(nodes)}",
        )
    gpus = values["tensor_parallel_size"].value * values["pipeline_parallel_size"].value
    if gpus % nodes.value:
        raise SettingsError(
            f"tensor x pipeline parallel = {gpus} GPUs cannot be split evenly over {nodes.value} nodes",
            hint=(f"tensor_parallel_size from {where(values['tensor_parallel_size'])}, nnodes from {where(nodes)}"),
        )


def _single_node_unused(values: dict[str, Setting[Any]]) -> list[str]:
    """The address of node 0 set for a single-node launch, which no engine dials: said, not silently dropped."""
    if values["nnodes"].value > 1:
        return []
    return [f"{name} from {where(values[name])} is not used: a single-node launch dials no node 0"
            for name in ("master_addr", "master_port")
            if values[name].value is not None and values[name].layer in ("flag", "env", "recipe")]


def _stray_env(env: Mapping[str, str]) -> list[str]:
    """DSPARK_* variables dspark does not read: most likely a misspelt setting, which would be silently ignored."""
    known = set(ENV_NAMES) | OTHER_DSPARK_ENV
    # Compare without the prefix, and by setting name too: DSPARK_MAX_NUM_SEQS -> MAX_NUM_SEQS,
    # DSPARK_TENSOR_PARALLEL_SIZE -> DSPARK_TP.
    by_stem = {k.env.removeprefix("DSPARK_"): k.env for k in KNOBS} | {k.name.upper(): k.env for k in KNOBS}
    out = []
    for name in sorted(env):
        if name.startswith("DSPARK_") and name not in known:
            close = closest(name.removeprefix("DSPARK_"), by_stem)
            guess = f"; did you mean {by_stem[close]}?" if close else ""
            out.append(f"{name} is not a dspark setting and is ignored{guess}")
    return out
