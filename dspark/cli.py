"""Command line: parse, call one core function, map exceptions to exit codes (docs/exit-codes.md)."""

from __future__ import annotations

import gc
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import click

from dspark import __version__
from dspark.core.errors import DsparkError, ExitCode
from dspark.engines import DEFAULT_ENGINE, ENGINE_NAMES

# Numbers on the command line are bounded before any command sees them: 400 or 5,000 digits are exit 2 naming the
# option and the bound, never Python's int-from-str limit, a float that overflowed to inf, or a run that never ends.
NUMBER_DIGITS = 40  # no count, length, rate or duration has more
NUMBER_BOUND = 10**12  # far above any real value of these options, far below what float arithmetic would lose


class _Bounded(click.ParamType):  # type: ignore[type-arg]  # generic in the installed click, not in every release the floor allows
    """click's int or float, with at most NUMBER_DIGITS digits and a magnitude of at most NUMBER_BOUND; "inf" and
    "nan" stay what float() makes of them (the commands say where they are allowed)."""

    def __init__(self, kind: type[int] | type[float]) -> None:
        self.kind = kind
        self.name = "integer" if kind is int else "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            number: int | float = value
        else:
            text = str(value).strip()
            digits = sum(c.isdigit() for c in text)
            if digits > NUMBER_DIGITS:
                self.fail(f"a number of {digits:,} digits; at most {NUMBER_BOUND:,} in magnitude is accepted",
                          param, ctx)
            try:
                number = self.kind(text)
            except ValueError:
                self.fail(f"{text[:40]!r} is not a valid {self.name}", param, ctx)
        if isinstance(number, float) and not math.isfinite(number):
            return number
        if abs(number) > NUMBER_BOUND:
            self.fail(f"{number:g} is beyond the bound: at most {NUMBER_BOUND:,} in magnitude", param, ctx)
        return number


WHOLE = _Bounded(int)
REAL = _Bounded(float)


def _cut_long_words(text: str) -> str:
    """A click message with any over-long word (a value or path of thousands of characters) cut to its start."""
    import re  # noqa: PLC0415 - only an error message needs it

    return re.sub(r"\S{200,}", lambda m: f"{m.group()[:60]}… ({len(m.group()):,} characters)", text)

def _emit_error(code: str, message: str, hint: str | None, exit_code: int, *, as_json: bool) -> None:
    """The error for people on stderr; with --json also exactly one JSON object on stdout."""
    click.echo(f"error: {message}" + (f"\n  hint: {hint}" if hint else ""), err=True)
    if as_json:
        error = {"code": code, "message": message, "hint": hint}
        click.echo(json.dumps({"error": error, "exit_code": exit_code}))


def _print_traceback() -> None:
    """The current exception's traceback on stderr (--debug); the module loads only then."""
    import traceback  # noqa: PLC0415

    traceback.print_exc()


@contextmanager
def error_boundary(debug: bool, *, as_json: bool = False) -> Iterator[None]:
    """The single place where exceptions become messages and exit codes; tracebacks only with --debug."""
    try:
        yield
    except DsparkError as exc:
        if debug:
            _print_traceback()
        _emit_error(exc.code, exc.message, exc.hint, int(exc.exit_code), as_json=as_json)
        raise SystemExit(int(exc.exit_code)) from None
    except KeyboardInterrupt:
        _emit_error("interrupted", "interrupted", None, int(ExitCode.INTERRUPTED), as_json=as_json)
        raise SystemExit(int(ExitCode.INTERRUPTED)) from None
    except click.exceptions.Exit:
        raise
    except click.ClickException:
        raise
    except Exception as exc:  # noqa: BLE001 - the boundary: anything unexpected is an internal error
        if debug:
            _print_traceback()
        _emit_error("internal_error", f"internal error: {type(exc).__name__}: {exc}",
                    None if debug else "run with --debug for the traceback", int(ExitCode.INTERNAL), as_json=as_json)
        raise SystemExit(int(ExitCode.INTERNAL)) from None


@contextmanager
def short_lived() -> Iterator[None]:
    """The cyclic garbage collector paused while a command plans and exits (validate; a start that execs).

    Such a command allocates some hundred thousand objects as it imports and plans, and frees few: every
    collection walks them all, a tenth of validate's CPU time spent finding nothing (docs/testing.md).
    Reference counting still frees what is dropped; the collector is back as it was when the block ends.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def run_core(ctx: click.Context, func: Callable[..., int | None], *args: Any, json_errors: bool = False,
             **kwargs: Any) -> None:
    """Call one core function inside the error boundary and exit with its code.

    `func` may be a closure that also builds its request, so a bad value found while building it is
    mapped like any other input error; `json_errors` makes a failure print one JSON object on stdout.
    """
    debug = bool(ctx.find_root().params.get("debug"))
    with error_boundary(debug, as_json=json_errors):
        code = func(*args, **kwargs)
    ctx.exit(int(code or 0))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dspark")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def cli(debug: bool) -> None:
    """Validate and launch vLLM / SGLang with the engine's own capacity arithmetic."""


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the snapshot as one JSON object.")
@click.option(
    "--hardware",
    metavar="FILE|PROFILE",
    help="A file saved by `dspark probe --json`, or a built-in profile (gb10x2, h200, ...; h200:8 for 8 GPUs).",
)
@click.option("--platform", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True,
              help="cpu: the host a CPU engine plans against (memory and the ISA flags it branches on); "
              "--json saves it for `--platform cpu --hardware FILE` on another machine.")
@click.pass_context
def probe(ctx: click.Context, as_json: bool, hardware: str | None, platform: str) -> None:
    """Show the GPUs and memory dspark plans against."""
    from dspark.commands.probe import probe as probe_core  # noqa: PLC0415 - keep CLI start-up light

    run_core(ctx, probe_core, hardware=hardware, as_json=as_json, platform=platform, json_errors=as_json)


@cli.group(invoke_without_command=True)
@click.pass_context
def recipes(ctx: click.Context) -> None:
    """List the shipped recipes, show one, or print the recipe JSON Schema (default: list)."""
    if ctx.invoked_subcommand is None:
        from dspark.commands.recipes import recipes_list  # noqa: PLC0415 - keep CLI start-up light

        run_core(ctx, recipes_list)


@recipes.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the list as one JSON object.")
@click.pass_context
def recipes_list_cmd(ctx: click.Context, as_json: bool) -> None:
    """List the shipped recipes (the default one is marked *)."""
    from dspark.commands.recipes import recipes_list  # noqa: PLC0415 - keep CLI start-up light

    run_core(ctx, recipes_list, as_json=as_json, json_errors=as_json)


@recipes.command("show")
@click.argument("name_or_path", metavar="NAME|FILE")
@click.option("--json", "as_json", is_flag=True, help="Print the validated recipe as one JSON object.")
@click.pass_context
def recipes_show_cmd(ctx: click.Context, name_or_path: str, as_json: bool) -> None:
    """Validate a recipe and print it: a shipped recipe by name, or a file."""
    from dspark.commands.recipes import recipes_show  # noqa: PLC0415 - keep CLI start-up light

    run_core(ctx, recipes_show, name_or_path, as_json=as_json, json_errors=as_json)


@recipes.command("schema")
@click.pass_context
def recipes_schema_cmd(ctx: click.Context) -> None:
    """Print the recipe JSON Schema, for editors (# yaml-language-server: $schema=FILE)."""
    from dspark.commands.recipes import recipes_schema  # noqa: PLC0415 - keep CLI start-up light

    run_core(ctx, recipes_schema)


def _env_help(knob: str, text: str) -> str:
    """An option's help with the environment variable that sets the same knob (from the settings table)."""
    from dspark.config.knobs import KNOBS  # noqa: PLC0415 - light: no pydantic, no recipes

    env = next(k.env for k in KNOBS if k.name == knob)
    return f"{text} [env: {env}]"


# (knob, metavar, help) of the options that set a knob: each flag is the knob's own (dspark.config.knobs), and
# --help shows its variable beside it.
_KNOB_FLAGS: tuple[tuple[str, str | None, str], ...] = (
    ("model", "DIR|REPO", "Model directory (config.json; weights optional) or cached HF repo id."),
    ("hardware", "FILE|PROFILE",
     "Plan against a saved probe or a profile (gb10, gb10x2, rtx5090, h100-80gb, h200, b200; h200:8 = 8 GPUs); "
     "with --platform cpu, a CPU host saved by `dspark probe --platform cpu --json`."),
    ("kv_cache_memory_bytes", "SIZE",
     "KV pin per GPU: 28GB, 28GiB, 1073741824 (vLLM --kv-cache-memory-bytes; SGLang: the tokens it buys, "
     "as --max-total-tokens)."),
    ("max_num_seqs", "N", "Seats (vLLM --max-num-seqs, SGLang --max-running-requests)."),
    ("max_model_len", "TOKENS", "Context window (also 32k, 256K)."),
    ("kv_cache_dtype", "DTYPE", "KV-cache dtype: auto, fp8, bfloat16, ..."),
    ("tensor_parallel_size", "N", "Tensor-parallel size."),
    ("nnodes", "N", "Nodes the engine spans."),
    ("node_rank", "R", "This node's rank in a multi-node launch."),
    ("master_addr", "ADDR", "Address of node 0 (multi-node)."),
    ("master_port", "PORT", "Port of node 0 (multi-node)."),
    ("port", "PORT", "Port the server listens on."),
)


def _knob_flag(knob: str) -> str:
    from dspark.config.knobs import BY_NAME  # noqa: PLC0415 - light: no pydantic, no recipes

    flag = BY_NAME[knob].flag
    if flag is None:
        raise AssertionError(f"knob {knob} has no dspark flag")
    return flag


def _plan_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options shared by validate and start: each maps to one setting (flag > env > recipe > default)."""
    options = [
        click.argument("recipe", required=False, metavar="[RECIPE]"),
        click.option("--engine", type=click.Choice(ENGINE_NAMES),
                     help=_env_help("engine", f"Engine (default: the recipe's, else {DEFAULT_ENGINE}).")),
        click.option("--platform", type=click.Choice(["cuda", "cpu"]),
                     help=_env_help("platform", "cuda (default) or cpu (vLLM's CPU build).")),
        *(click.option(_knob_flag(knob), knob, metavar=metavar, help=_env_help(knob, text))
          for knob, metavar, text in _KNOB_FLAGS),
        click.option("--typical-context", metavar="TOKENS",
                     help="Seats for requests of about this length (plus --prefix-cache-reserve) too."),
        click.option("--prefix-cache-reserve", metavar="TOKENS", help="Pool tokens kept for cached prefixes."),
        click.option("--peer-hardware", multiple=True, metavar="FILE",
                     help="Saved probe of another node (dspark probe --json); repeat per node."),
        click.option("--engine-version", metavar="X.Y.Z",
                     help="Plan for this engine version (DSPARK_ENGINE_VERSION; default: the installed engine's, "
                     "else the newest modelled)."),
        click.option("--engine-python", metavar="PYTHON",
                     help="Interpreter of the engine's virtualenv (DSPARK_ENGINE_PYTHON)."),
        click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout."),
        click.option("--explain", is_flag=True, help="Show each setting's value and where it came from."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


_KNOB_OPTIONS = ("model", "engine", "platform", "hardware", "kv_cache_memory_bytes", "max_num_seqs", "max_model_len",
                 "kv_cache_dtype", "tensor_parallel_size", "nnodes", "node_rank", "master_addr", "master_port", "port")


def _validate_request(ctx: click.Context, recipe: str | None, params: dict[str, Any]) -> Any:
    from dspark.planning.validate import ValidateRequest  # noqa: PLC0415 - keep CLI start-up light

    engine_flags = tuple((ctx.find_root().obj or {}).get("engine_flags", ()))
    flags = {k: params[k] for k in _KNOB_OPTIONS if params.get(k) is not None}
    return ValidateRequest(flags=flags, recipe=recipe, engine_flags=engine_flags, env=dict(os.environ),
                           peer_hardware=tuple(params.get("peer_hardware") or ()),
                           typical_context=_tokens(params.get("typical_context"), "--typical-context"),
                           prefix_cache_reserve=_tokens(params.get("prefix_cache_reserve"),
                                                        "--prefix-cache-reserve") or 0,
                           engine_version=params.get("engine_version"), engine_python=params.get("engine_python"),
                           engine_check=bool(params.get("engine_check")))


def _tokens(raw: object, flag: str) -> int | None:
    """A token count flag (also 32k, 256K); click.BadParameter (exit 2) names the flag."""
    if raw is None:
        return None
    from dspark.core.units import parse_count  # noqa: PLC0415

    try:
        value = parse_count(str(raw))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None
    if value <= 0 and flag == "--typical-context":
        raise click.BadParameter("must be a positive number of tokens", param_hint=flag)
    return value


@cli.command(epilog="RECIPE: a shipped recipe name or a file [env: DSPARK_RECIPE]. Engine flags go after --: "
             "dspark validate --model DIR -- --max-model-len 4096")
@_plan_options
@click.option("--engine-check", is_flag=True,
              help="Also run the installed engine's own KV planner on the same inputs (the witness).")
@click.pass_context
def validate(ctx: click.Context, /, recipe: str | None, as_json: bool, explain: bool, **params: Any) -> None:
    """Predict the engine's KV pool, full contexts, graph capture size and safe seats, and judge the fit.

    With no RECIPE and no --model, validates the default recipe against this machine's GPUs (or, with none,
    the built-in 2x GB10 profile). Exit 0 fits, 1 does not fit, 2 bad input, 3 internal error.
    """
    with short_lived():
        from dspark.commands.validate import run_validate  # noqa: PLC0415 - keep CLI start-up light

        run_core(ctx, lambda: run_validate(_validate_request(ctx, recipe, params), as_json=as_json,
                                           explain=explain), json_errors=as_json)


@cli.command(epilog="RECIPE: a shipped recipe name or a file [env: DSPARK_RECIPE]. Engine flags go after --, "
             "e.g.: dspark start --max-num-seqs 12 -- --enforce-eager")
@_plan_options
@click.option("--dry-run", is_flag=True, help="Print the plan (argv and environment, secrets redacted); do not start.")
@click.option("--force", is_flag=True, help="Start even when the verdict is fail.")
@click.option("--watch", is_flag=True, help="Supervise the engine as a child: stream its log, check its KV pool.")
@click.pass_context
def start(ctx: click.Context, /, recipe: str | None, as_json: bool, explain: bool, dry_run: bool, force: bool,
          watch: bool, **params: Any) -> None:
    """Validate, check the argv with the installed engine's own parser, print the plan, then exec the engine."""
    # --watch stays to supervise the engine for hours: the collector stays on for it.
    pause: AbstractContextManager[None] = nullcontext() if watch else short_lived()
    with pause:
        from dspark.commands.validate import start_command  # noqa: PLC0415 - keep CLI start-up light
        from dspark.planning.start import StartRequest  # noqa: PLC0415

        def start_core() -> int:
            request = StartRequest(validate=_validate_request(ctx, recipe, params), force=force,
                                   engine_python=params.get("engine_python"), dry_run=dry_run)
            return start_command(request, as_json=as_json, explain=explain, watch=watch)

        run_core(ctx, start_core, json_errors=as_json)


@cli.command(epilog="Example: dspark advise flash-next-vllm --seats 6,8,16 --clients 32 --input-len 2048 "
             "--output-len 512 --calibrate sweep-results/sweep.json")
@_plan_options
@click.option("--seats", required=True, metavar="N,N,...", help="Seat counts to predict, baseline first.")
@click.option("--clients", type=WHOLE, default=32, show_default=True, help="Closed-loop clients.")
@click.option("--requests", type=WHOLE, help="Requests in the workload (default: 100, or the prompts file's).")
@click.option("--input-len", type=WHOLE, default=2048, show_default=True, help="Prompt tokens per request.")
@click.option("--output-len", type=WHOLE, default=512, show_default=True, help="Output tokens per request.")
@click.option("--prefix-hit-rate", type=REAL, default=0.0, show_default=True,
              help="Share of each prompt already in the prefix cache.")
@click.option("--workload", "--prompts", "prompts_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSONL requests: {\"prompt\": token ids or text, \"max_tokens\": N} or {\"messages\": [...]}; "
                   "text through the model's own tokenizer. --prompts is the same option.")
@click.option("--request-rate", type=REAL, metavar="R",
              help="Open loop: R requests per second (inf: all at once, in file order); default: --clients.")
@click.option("--burstiness", type=REAL, default=1.0, show_default=True,
              help="Gamma shape of the arrival intervals with --request-rate (1: Poisson).")
@click.option("--warm", is_flag=True, help="Re-send every request, in order, after the first pass (a warm re-run).")
@click.option("--shared-prefix", type=WHOLE, default=0, show_default=True, metavar="TOKENS",
              help="Synthetic prompts share this many leading tokens (a system prompt).")
@click.option("--simulator", type=click.Choice(["auto", "engine", "dspark"]), default="auto", show_default=True,
              help="auto: the installed engine's own scheduler, else dspark's model; engine: require the former.")
@click.option("--calibrate", multiple=True, metavar="FILE",
              help="A `dspark bench --json` result or a sweep.json of this deployment; repeatable.")
@click.option("--accepted-tokens", type=REAL, metavar="N",
              help="Tokens a seat keeps per decode step, 1 + accepted speculative tokens (default: estimated).")
@click.option("--primary", default="wall_time", show_default=True, help="The metric the decision rule judges.")
@click.option("--adopt-at", default="10%", show_default=True, help="Adopt only at this improvement of --primary.")
@click.option("--max-regression", default="10%", show_default=True,
              help="No secondary metric may worsen by more than this.")
@click.option("--secondary", "secondaries", metavar="M,M,...", help="Secondary metrics (as sweep; 'none').")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Also draw the predictions (PNG).")
@click.pass_context
def advise(ctx: click.Context, /, recipe: str | None, as_json: bool, explain: bool, seats: str, **params: Any) -> None:
    """Predict aggregate and per-stream decode, TTFT and KV use at each seat count; recommend one by the sweep's rule.

    Exit 0 with a recommendation, 1 when no seat count can be recommended, 2 for bad input.
    """
    from dspark.advise.build import AdviseOptions  # noqa: PLC0415 - keep CLI start-up light
    from dspark.commands.advise import run_advise  # noqa: PLC0415

    own = ("clients", "requests", "input_len", "output_len", "prefix_hit_rate", "prompts_file", "calibrate",
           "request_rate", "burstiness", "warm", "shared_prefix", "simulator",
           "accepted_tokens", "primary", "adopt_at", "max_regression", "secondaries", "plot")
    opts = AdviseOptions(seats=seats, **{k: params.pop(k) for k in own})
    if params.get("max_num_seqs") is not None:
        raise click.UsageError("advise predicts the seats itself: use --seats, not --max-num-seqs")
    run_core(ctx, lambda: run_advise(_validate_request(ctx, recipe, params), opts, as_json=as_json,
                                     explain=explain), json_errors=as_json)


@cli.group()
def render() -> None:
    """Print deployment files for a validated plan."""


@render.command("k8s", epilog="Example: dspark render k8s flash-next-vllm --image REGISTRY/dspark-vllm:TAG | "
                "kubectl apply -f -")
@_plan_options
@click.option("--image", required=True, metavar="IMAGE", help="Container image holding dspark and the engine.")
@click.option("--name", metavar="NAME", help="Name of the objects (default: from the served model or recipe).")
@click.option("--replicas", type=WHOLE, default=1, show_default=True, help="Engine replicas (LWS groups or pods).")
@click.option("--hf-secret", default="hf-token", show_default=True, metavar="SECRET[:KEY]",
              help="Secret holding the Hugging Face token (key 'token' unless given); never inlined.")
@click.option("--ready-delay", type=WHOLE, metavar="SECONDS",
              help="Seconds before the first readiness probe (default: estimated from the weights per node).")
@click.option("--shm-size", metavar="SIZE",
              help="Size of the pod's shared-memory volume (default: the engine's figure per GPU).")
@click.pass_context
def render_k8s(ctx: click.Context, /, recipe: str | None, as_json: bool, explain: bool, image: str, name: str | None,
               replicas: int, hf_secret: str, ready_delay: int | None, shm_size: str | None, **params: Any) -> None:
    """A LeaderWorkerSet (plans across nodes) or a Deployment, and a Service; every pod runs `dspark start`.

    Exit 0 with the manifests on stdout (YAML; --json: one v1 List), 1 when the plan does not fit, 2 bad input.
    """
    from dspark.commands.render import run_render_k8s  # noqa: PLC0415 - keep CLI start-up light
    from dspark.core.units import parse_size  # noqa: PLC0415
    from dspark.deploy.kubernetes import DEFAULT_HF_SECRET_KEY, RenderOptions  # noqa: PLC0415

    secret, _, key = hf_secret.partition(":")

    def render_core() -> int:
        request = _validate_request(ctx, recipe, params)
        try:
            shm = parse_size(shm_size) if shm_size else None
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--shm-size") from None
        options = RenderOptions(image=image, name=name, replicas=replicas, hf_secret=secret,
                                hf_secret_key=key or DEFAULT_HF_SECRET_KEY, ready_delay_s=ready_delay, shm_bytes=shm,
                                engine_flags=request.engine_flags)
        return run_render_k8s(request, options, as_json=as_json, explain=explain)

    run_core(ctx, render_core, json_errors=as_json)


def _load_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The load options bench and sweep share (dspark.bench.load.LoadOptions)."""
    options = [
        click.option("--endpoint", type=click.Choice(["completions", "chat"]), default="completions",
                     show_default=True, help="/v1/completions or /v1/chat/completions."),
        click.option("--served-model", "served_model", metavar="NAME", help="Model name to request (default: the first "
                     "one /v1/models lists)."),
        click.option("--prompts", "prompts_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="JSONL of real prompts: {\"prompt\": text or token ids} or {\"messages\": [...]}, each "
                     "with an optional \"max_tokens\" (else --max-tokens): the file `dspark advise --workload` "
                     "takes."),
        click.option("--input-len", type=WHOLE, default=256, show_default=True,
                     help="Synthetic prompt length in tokens (without --prompts)."),
        click.option("--prompt-kind", type=click.Choice(["auto", "ids", "text"]), default="auto", show_default=True,
                     help="Synthetic prompts as token ids (servers without a tokenizer) or text; auto: ids for "
                     "completions, text for chat."),
        click.option("--vocab-size", type=WHOLE, default=500, show_default=True,
                     help="Synthetic token ids are drawn from [10, N)."),
        click.option("--requests", "-n", type=WHOLE, default=64, show_default=True, help="Requests per repetition."),
        click.option("--concurrency", "-c", type=WHOLE, default=8, show_default=True,
                     help="Concurrent clients, each streaming one request at a time (with --request-rate: the "
                     "most requests in flight)."),
        click.option("--request-rate", type=REAL, metavar="R",
                     help="Open loop: R requests per second, Poisson arrivals (see --burstiness); default: closed "
                     "loop."),
        click.option("--burstiness", type=REAL, default=1.0, show_default=True,
                     help="Gamma shape of the arrival intervals with --request-rate (1: Poisson; lower: burstier)."),
        click.option("--max-tokens", type=WHOLE, default=128, show_default=True, help="Output tokens per request."),
        click.option("--ignore-eos/--no-ignore-eos", default=True, show_default=True,
                     help="Decode exactly --max-tokens per request (vLLM/SGLang extension)."),
        click.option("--reps", type=WHOLE, default=1, show_default=True, help="Repetitions."),
        click.option("--warm-rerun", is_flag=True, help="Send the last repetition's prompts again; report that "
                     "pass's prefix-cache hit rate and wall time."),
        click.option("--no-metrics", is_flag=True, help="Do not read the engine's /metrics."),
        click.option("--metrics-url", metavar="URL", help="Where /metrics is (default: the server's /metrics)."),
        click.option("--sample-interval", "sample_interval_s", type=REAL, default=5.0, show_default=True,
                     help="Seconds between /metrics samples during a pass (each scrape costs the engine's API "
                     "server CPU time: vLLM renders /metrics on its event loop)."),
        click.option("--timeout", "timeout_s", type=REAL, default=600.0, show_default=True,
                     help="Seconds one request may take."),
        click.option("--seed", type=WHOLE, default=0, show_default=True, help="Seed of the synthetic prompts."),
        click.option("--client-processes", type=WHOLE, default=0, show_default=True,
                     help="Processes the clients run in; 0: one per 64 streams, at most one per CPU."),
        click.option("--no-progress", is_flag=True, help="No progress bar."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _load(params: dict[str, Any]) -> Any:
    from dspark.bench.load import LoadOptions  # noqa: PLC0415 - keep CLI start-up light

    return LoadOptions(
        endpoint=params.pop("endpoint"), model=params.pop("served_model"), prompts_file=params.pop("prompts_file"),
        input_len=params.pop("input_len"), prompt_kind=params.pop("prompt_kind"), vocab_size=params.pop("vocab_size"),
        requests=params.pop("requests"), concurrency=params.pop("concurrency"), max_tokens=params.pop("max_tokens"),
        ignore_eos=params.pop("ignore_eos"), reps=params.pop("reps"), warm_rerun=params.pop("warm_rerun"),
        read_metrics=not params.pop("no_metrics"), metrics_url=params.pop("metrics_url"),
        sample_interval_s=params.pop("sample_interval_s"), timeout_s=params.pop("timeout_s"), seed=params.pop("seed"),
        client_processes=params.pop("client_processes"), request_rate=params.pop("request_rate"),
        burstiness=params.pop("burstiness"),
    )


@cli.command()
@click.option("--url", required=True, metavar="URL", help="The server, http://HOST:PORT (OpenAI-compatible).")
@_load_options
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout.")
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the JSON here (atomically).")
@click.option("--seats", type=WHOLE, metavar="N",
              help="The server's seats (max_num_seqs / --max-running-requests), recorded in the JSON for `dspark "
              "advise --calibrate`; needed when its /metrics cannot be read (e.g. behind a proxy).")
@click.pass_context
def bench(ctx: click.Context, /, url: str, as_json: bool, out_file: Path | None, no_progress: bool,
          seats: int | None, **params: Any) -> None:
    """Stream requests at a running server: decode tok/s, TTFT, queueing, and the engine's /metrics.

    Exit 0 when every request succeeded, 1 when any failed (the results still print), 2 for bad input.
    """
    from dspark.commands.bench import bench as bench_core  # noqa: PLC0415 - keep CLI start-up light

    run_core(ctx, lambda: bench_core(_load(params), url=url, as_json=as_json, out_file=out_file,
                                     progress=not no_progress, seats=seats), json_errors=as_json)


@cli.command(epilog="Example: dspark sweep RECIPE --seats 8,16 --reps 3 --primary wall_time --adopt-at 10% "
             "--max-regression 10% --warm-rerun")
@_plan_options
@click.option("--seats", required=True, metavar="N,N,...", help="Seat counts to run, baseline first.")
@_load_options
@click.option("--primary", default="wall_time", show_default=True, help="The metric the decision rule judges.")
@click.option("--adopt-at", default="10%", show_default=True, help="Adopt only at this improvement of --primary.")
@click.option("--max-regression", default="10%", show_default=True,
              help="No secondary metric may worsen by more than this.")
@click.option("--secondary", "secondaries", metavar="M,M,...",
              help="Secondary metrics (default: aggregate, per-stream decode, TTFT, wall, warm wall; 'none').")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("sweep-results"),
              show_default=True, help="Where sweep.json, sweep.md, sweep.png and the engine logs go.")
@click.option("--health-timeout", type=REAL, default=900.0, show_default=True,
              help="Seconds an engine may take to answer /health.")
@click.option("--stop-timeout", type=REAL, default=30.0, show_default=True,
              help="Seconds after SIGTERM before SIGKILL.")
@click.pass_context
def sweep(ctx: click.Context, /, recipe: str | None, as_json: bool, explain: bool, seats: str, primary: str,
          adopt_at: str, max_regression: str, secondaries: str | None, out_dir: Path, health_timeout: float,
          stop_timeout: float, no_progress: bool, **params: Any) -> None:
    """Start the engine at each seat count, verify its launch, bench it, stop it; decide by a rule fixed first.

    Exit 0 when every setting ran clean (launch as planned, 0 errors, 0 preemptions), 1 otherwise.
    """
    from dspark.commands.sweep import sweep_command  # noqa: PLC0415 - keep CLI start-up light
    from dspark.planning.start import StartRequest  # noqa: PLC0415

    if params.get("max_num_seqs") is not None:
        raise click.UsageError("sweep sets the seats itself: use --seats, not --max-num-seqs")

    def sweep_core() -> int:
        load = _load(params)
        request = StartRequest(validate=_validate_request(ctx, recipe, params),
                               engine_python=params.get("engine_python"))
        return sweep_command(request, seats=seats, load=load, primary=primary, adopt_at=adopt_at,
                             max_regression=max_regression, secondaries=secondaries, out_dir=out_dir,
                             as_json=as_json, progress=not no_progress, health_timeout_s=health_timeout,
                             stop_timeout_s=stop_timeout, explain=explain)

    run_core(ctx, sweep_core, json_errors=as_json)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; click usage errors exit 2 (one JSON object on stdout with --json)."""
    args = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first `--` is the engine's own flags, kept verbatim (click would drop the `--`).
    engine_flags: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, engine_flags = args[:cut], args[cut + 1:]
    # --debug is a group option; accept it after the subcommand too (dspark validate --debug).
    if "--debug" in args:
        args = ["--debug", *(a for a in args if a != "--debug")]
    as_json = "--json" in args
    try:
        # Without standalone mode click returns ctx.exit()'s code instead of raising it: keep it.
        rc = cli.main(args=args, prog_name="dspark", standalone_mode=False, obj={"engine_flags": engine_flags})
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.message = _cut_long_words(exc.message)  # type: ignore[misc]  # click marks it Final; it is the text shown
        if as_json:
            _emit_error("usage_error", exc.format_message(), None, int(ExitCode.USAGE), as_json=True)
        else:
            exc.show()
        return int(ExitCode.USAGE)
    except click.exceptions.Abort:
        _emit_error("interrupted", "interrupted", None, int(ExitCode.INTERRUPTED), as_json=as_json)
        return int(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:  # Ctrl-C while click itself was parsing
        _emit_error("interrupted", "interrupted", None, int(ExitCode.INTERRUPTED), as_json=as_json)
        return int(ExitCode.INTERRUPTED)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else int(ExitCode.INTERNAL)
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
