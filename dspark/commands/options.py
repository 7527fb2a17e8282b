"""Every command's options, declared once: how click reads each, and the request field its value fills.

An Option names its group (`to`: the request or call it feeds) and field; `split` turns click's values into
{group: {field: value}}, which the CLI hands to the core as the request objects. Options two commands share (the
workload, the decision rule) are declared once here; where the commands' defaults or wording differ, each command
takes the one declaration `but` with its own. The knob options are generated from the settings table
(dspark.config.knobs), with the variable beside each help. Light: click and the knob table, no command's core.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import click

from dspark.config.knobs import KNOBS

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

# Numbers on the command line are bounded before any command sees them: 400 or 5,000 digits are exit 2 naming the
# option and the bound, never Python's int-from-str limit, a float that overflowed to inf, or a run that never ends.
NUMBER_DIGITS = 40  # no count, length, rate or duration has more
NUMBER_BOUND = 10**12  # far above any real value of these options, far below what float arithmetic would lose


class _Bounded(click.ParamType):  # type: ignore[type-arg]  # generic in the installed click, not in every release
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


class Option(NamedTuple):
    """One command-line parameter: its flags, type, default and help, and where its value goes.

    to: the group it feeds (a request type or the core's keyword arguments: see each command's builder in dspark.cli);
    field: the name there (default: `dest`); convert: value -> field value, run when the request is built (inside
    the error boundary, so a click.BadParameter it raises is exit 2 naming the option); env: the variable that
    sets the same value, shown beside the help; argument: a positional argument (flags[0] is its metavar).
    A NamedTuple, not a frozen dataclass: as immutable, and its class is about five times cheaper to create, which
    every command pays at start-up.
    """

    flags: tuple[str, ...]
    dest: str
    to: str
    help: str | None = None
    type: Any = None
    default: Any = None
    metavar: str | None = None
    is_flag: bool = False
    multiple: bool = False
    required: bool = False
    show_default: bool = False
    env: str | None = None
    field: str | None = None
    convert: Callable[[Any], Any] | None = None
    argument: bool = False

    @property
    def target(self) -> str:
        """The field this option fills in its group."""
        return self.field or self.dest

    def but(self, **changes: Any) -> Option:
        """This declaration with one command's own default, help or extra flags."""
        return self._replace(**changes)

    def decorator(self) -> Decorator:
        """The click decorator that adds this parameter."""
        if self.argument:
            return click.argument(self.dest, required=self.required, metavar=self.flags[0])
        extra: dict[str, Any] = {}
        if self.type is not None:
            extra["type"] = self.type
        if self.default is not None:
            extra["default"] = self.default
        if self.show_default:
            extra["show_default"] = True
        if self.required:
            extra["required"] = True
        if self.multiple:
            extra["multiple"] = True
        if self.is_flag and "/" not in self.flags[0]:
            extra["is_flag"] = True
        shown = f"{self.help} [env: {self.env}]" if self.env and self.help else self.help
        return click.option(*self.flags, self.dest, metavar=self.metavar, help=shown, **extra)


def apply(options: Sequence[Option]) -> Decorator:
    """Add `options` to a click command, in --help order."""
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option.decorator()(func)
        return func

    return decorate


def split(options: Sequence[Option], params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """click's values by destination -> {group: {field: value}}; every option's value lands in exactly one place."""
    out: dict[str, dict[str, Any]] = {}
    for option in options:
        value = params[option.dest]
        out.setdefault(option.to, {})[option.target] = option.convert(value) if option.convert else value
    return out


def _tokens(flag: str, *, positive: bool = False) -> Callable[[object], int | None]:
    """A token count flag (also 32k, 256K); click.BadParameter (exit 2) names the flag."""
    def convert(raw: object) -> int | None:
        if raw is None:
            return None
        from dspark.core.units import parse_count  # noqa: PLC0415

        try:
            value = parse_count(str(raw))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=flag) from None
        if value <= 0 and positive:
            raise click.BadParameter("must be a positive number of tokens", param_hint=flag)
        return value

    return convert


def _or_zero(convert: Callable[[object], int | None]) -> Callable[[object], int]:
    return lambda raw: convert(raw) or 0


JSON = Option(("--json",), "as_json", "call", "Print exactly one JSON object on stdout.", is_flag=True)
EXPLAIN = Option(("--explain",), "explain", "call", "Show each setting's value and where it came from.", is_flag=True)

# The plan options validate, start, advise, sweep and render share: each knob's own flag (the settings table, in
# its --help order), then what a plan needs besides the settings (planning.validate.ValidateRequest).
KNOB_OPTIONS: tuple[Option, ...] = tuple(
    Option((k.flag,), k.name, "knobs", k.help, metavar=k.metavar, env=k.env,
           type=click.Choice(k.choices) if k.choices else None)
    for k in sorted(KNOBS, key=lambda k: k.rank) if k.flag is not None
)
PLAN: tuple[Option, ...] = (
    Option(("[RECIPE]",), "recipe", "validate", argument=True),
    *KNOB_OPTIONS,
    Option(("--typical-context",), "typical_context", "validate",
           "Seats for requests of about this length (plus --prefix-cache-reserve) too.", metavar="TOKENS",
           convert=_tokens("--typical-context", positive=True)),
    Option(("--prefix-cache-reserve",), "prefix_cache_reserve", "validate", "Pool tokens kept for cached prefixes.",
           metavar="TOKENS", convert=_or_zero(_tokens("--prefix-cache-reserve"))),
    Option(("--peer-hardware",), "peer_hardware", "validate",
           "Saved probe of another node (dspark probe --json); repeat per node.", metavar="FILE", multiple=True,
           convert=tuple),
    Option(("--engine-version",), "engine_version", "validate",
           "Plan for this engine version (DSPARK_ENGINE_VERSION; default: the installed engine's, else the newest "
           "modelled).", metavar="X.Y.Z"),
    Option(("--engine-python",), "engine_python", "validate",
           "Interpreter of the engine's virtualenv (DSPARK_ENGINE_PYTHON).", metavar="PYTHON"),
    JSON,
    EXPLAIN,
)

VALIDATE: tuple[Option, ...] = (
    *PLAN,
    Option(("--engine-check",), "engine_check", "validate",
           "Also run the installed engine's own KV planner on the same inputs (the witness).", is_flag=True),
)
START: tuple[Option, ...] = (
    *PLAN,
    Option(("--dry-run",), "dry_run", "start", "Print the plan (argv and environment, secrets redacted); do not start.",
           is_flag=True),
    Option(("--force",), "force", "start", "Start even when the verdict is fail.", is_flag=True),
    Option(("--watch",), "watch", "call", "Supervise the engine as a child: stream its log, check its KV pool.",
           is_flag=True),
)

# The workload advise predicts and bench sends, declared once; each command keeps its own default and wording.
INPUT_LEN = Option(("--input-len",), "input_len", "workload", type=WHOLE, show_default=True)
REQUESTS = Option(("--requests",), "requests", "workload", type=WHOLE)
PROMPTS = Option(("--prompts",), "prompts_file", "workload", type=click.Path(exists=True, dir_okay=False,
                                                                              path_type=Path))
REQUEST_RATE = Option(("--request-rate",), "request_rate", "workload", type=REAL, metavar="R")
BURSTINESS = Option(("--burstiness",), "burstiness", "workload", type=REAL, default=1.0, show_default=True)

# The decision rule sweep applies and advise recommends by (dspark.bench.decision.make_rule's spellings).
SECONDARY = Option(("--secondary",), "secondaries", "rule", metavar="M,M,...")
RULE: tuple[Option, ...] = (
    Option(("--primary",), "primary", "rule", "The metric the decision rule judges.", default="wall_time",
           show_default=True),
    Option(("--adopt-at",), "adopt_at", "rule", "Adopt only at this improvement of --primary.", default="10%",
           show_default=True),
    Option(("--max-regression",), "max_regression", "rule", "No secondary metric may worsen by more than this.",
           default="10%", show_default=True),
)
SEATS = Option(("--seats",), "seats", "call", required=True, metavar="N,N,...")

ADVISE: tuple[Option, ...] = (
    *PLAN,
    SEATS.but(to="advise", help="Seat counts to predict, baseline first."),
    Option(("--clients",), "clients", "advise", "Closed-loop clients.", type=WHOLE, default=32, show_default=True),
    REQUESTS.but(help="Requests in the workload (default: 100, or the prompts file's)."),
    INPUT_LEN.but(default=2048, help="Prompt tokens per request."),
    Option(("--output-len",), "output_len", "advise", "Output tokens per request.", type=WHOLE, default=512,
           show_default=True),
    Option(("--prefix-hit-rate",), "prefix_hit_rate", "advise", "Share of each prompt already in the prefix cache.",
           type=REAL, default=0.0, show_default=True),
    PROMPTS.but(flags=("--workload", "--prompts"),
                help="JSONL requests: {\"prompt\": token ids or text, \"max_tokens\": N} or {\"messages\": [...]}; "
                "text through the model's own tokenizer. --prompts is the same option."),
    REQUEST_RATE.but(help="Open loop: R requests per second (inf: all at once, in file order); default: --clients."),
    BURSTINESS.but(help="Gamma shape of the arrival intervals with --request-rate (1: Poisson)."),
    Option(("--warm",), "warm", "advise", "Re-send every request, in order, after the first pass (a warm re-run).",
           is_flag=True),
    Option(("--shared-prefix",), "shared_prefix", "advise",
           "Synthetic prompts share this many leading tokens (a system prompt).", type=WHOLE, default=0,
           show_default=True, metavar="TOKENS"),
    Option(("--simulator",), "simulator", "advise",
           "auto: the installed engine's own scheduler, else dspark's model; engine: require the former.",
           type=click.Choice(["auto", "engine", "dspark"]), default="auto", show_default=True),
    Option(("--calibrate",), "calibrate", "advise",
           "A `dspark bench --json` result or a sweep.json of this deployment; repeatable.", metavar="FILE",
           multiple=True),
    Option(("--accepted-tokens",), "accepted_tokens", "advise",
           "Tokens a seat keeps per decode step, 1 + accepted speculative tokens (default: estimated).", type=REAL,
           metavar="N"),
    *RULE,
    SECONDARY.but(help="Secondary metrics (as sweep; 'none')."),
    Option(("--plot",), "plot", "advise", "Also draw the predictions (PNG).",
           type=click.Path(dir_okay=False, path_type=Path)),
)

RENDER_K8S: tuple[Option, ...] = (
    *PLAN,
    Option(("--image",), "image", "render", "Container image holding dspark and the engine.", required=True,
           metavar="IMAGE"),
    Option(("--name",), "name", "render", "Name of the objects (default: from the served model or recipe).",
           metavar="NAME"),
    Option(("--replicas",), "replicas", "render", "Engine replicas (LWS groups or pods).", type=WHOLE, default=1,
           show_default=True),
    Option(("--hf-secret",), "hf_secret", "render",
           "Secret holding the Hugging Face token (key 'token' unless given); never inlined.", default="hf-token",
           show_default=True, metavar="SECRET[:KEY]"),
    Option(("--ready-delay",), "ready_delay", "render",
           "Seconds before the first readiness probe (default: estimated from the weights per node).", type=WHOLE,
           metavar="SECONDS"),
    Option(("--shm-size",), "shm_size", "render",
           "Size of the pod's shared-memory volume (default: the engine's figure per GPU).", metavar="SIZE"),
    Option(("--secret-name",), "secret_name", "render",
           "Secret holding the recipe's and engine flags' other secrets (default: NAME-secrets).", metavar="SECRET"),
    Option(("--model-pvc",), "model_pvc", "render",
           "PersistentVolumeClaim holding the model directory (or, for a hub name, the HF cache).", metavar="CLAIM"),
    Option(("--model-host-path",), "model_host_path", "render",
           "Directory on each node holding the model (or the HF cache); default: the model's own path.",
           metavar="DIR"),
    Option(("--gpu-product",), "gpu_product", "render",
           "nvidia.com/gpu.product node selector (default: the plan's GPU, e.g. NVIDIA-H200; '' for none).",
           metavar="LABEL"),
)

# The load bench and sweep send (dspark.bench.load.LoadOptions), and their progress bar.
LOAD: tuple[Option, ...] = (
    Option(("--endpoint",), "endpoint", "load", "/v1/completions or /v1/chat/completions.",
           type=click.Choice(["completions", "chat"]), default="completions", show_default=True),
    Option(("--served-model",), "served_model", "load",
           "Model name to request (default: the first one /v1/models lists).", metavar="NAME", field="model"),
    PROMPTS.but(help="JSONL of real prompts: {\"prompt\": text or token ids} or {\"messages\": [...]}, each with an "
                "optional \"max_tokens\" (else --max-tokens): the file `dspark advise --workload` takes."),
    INPUT_LEN.but(default=256, help="Synthetic prompt length in tokens (without --prompts)."),
    Option(("--prompt-kind",), "prompt_kind", "load",
           "Synthetic prompts as token ids (servers without a tokenizer) or text; auto: ids for completions, text "
           "for chat.", type=click.Choice(["auto", "ids", "text"]), default="auto", show_default=True),
    Option(("--vocab-size",), "vocab_size", "load", "Synthetic token ids are drawn from [10, N).", type=WHOLE,
           default=500, show_default=True),
    REQUESTS.but(flags=("--requests", "-n"), default=64, show_default=True, help="Requests per repetition."),
    Option(("--concurrency", "-c"), "concurrency", "load",
           "Concurrent clients, each streaming one request at a time (with --request-rate: the most requests in "
           "flight).", type=WHOLE, default=8, show_default=True),
    REQUEST_RATE.but(help="Open loop: R requests per second, Poisson arrivals (see --burstiness); default: closed "
                     "loop."),
    BURSTINESS.but(help="Gamma shape of the arrival intervals with --request-rate (1: Poisson; lower: burstier)."),
    Option(("--max-tokens",), "max_tokens", "load", "Output tokens per request.", type=WHOLE, default=128,
           show_default=True),
    Option(("--ignore-eos/--no-ignore-eos",), "ignore_eos", "load",
           "Decode exactly --max-tokens per request (vLLM/SGLang extension).", default=True, show_default=True,
           is_flag=True),
    Option(("--reps",), "reps", "load", "Repetitions.", type=WHOLE, default=1, show_default=True),
    Option(("--warm-rerun",), "warm_rerun", "load",
           "Send the last repetition's prompts again; report that pass's prefix-cache hit rate and wall time.",
           is_flag=True),
    Option(("--no-metrics",), "no_metrics", "load", "Do not read the engine's /metrics.", is_flag=True,
           field="read_metrics", convert=operator.not_),
    Option(("--metrics-url",), "metrics_url", "load", "Where /metrics is (default: the server's /metrics).",
           metavar="URL"),
    Option(("--sample-interval",), "sample_interval_s", "load",
           "The longest gap in seconds between /metrics samples during a pass: sampling starts every 0.2 s and "
           "widens to a tenth of the time elapsed, up to this (each scrape costs the engine's API server CPU time: "
           "vLLM renders /metrics on its event loop).", type=REAL, default=5.0, show_default=True),
    Option(("--timeout",), "timeout_s", "load", "Seconds one request may take.", type=REAL, default=600.0,
           show_default=True),
    Option(("--seed",), "seed", "load", "Seed of the synthetic prompts.", type=WHOLE, default=0, show_default=True),
    Option(("--client-processes",), "client_processes", "load",
           "Processes the clients run in; 0: one per 64 streams, at most one per CPU.", type=WHOLE, default=0,
           show_default=True),
    Option(("--no-progress",), "no_progress", "call", "No progress bar.", is_flag=True, field="progress",
           convert=operator.not_),
)

# vllm bench serve's and guidellm's workload options (dspark.bench.datasets, dspark.bench.rates): fields of the
# load both bench and sweep send.
PARITY_LOAD: tuple[Option, ...] = (
    Option(("--output-len",), "output_len", "load",
           "Output tokens per request (as vllm bench serve's --random-output-len; default: --max-tokens); with "
           "--dataset, every request's, instead of the reply's length.", type=WHOLE, metavar="N"),
    Option(("--range-ratio",), "range_ratio", "load",
           "Synthetic lengths uniform in [L·(1−R), L·(1+R)] around --input-len and --output-len, R in [0, 1) "
           "(vllm bench serve's --random-range-ratio; the same draws for the same --seed where numpy is "
           "installed).", type=REAL, default=0.0, show_default=True, metavar="R"),
    Option(("--dataset",), "dataset", "load",
           "Requests from a local dataset: ShareGPT-style JSON (the first human turn is the prompt, the reply's "
           "length the output length) or JSONL ({\"prompt\"} or {\"messages\"} lines).",
           type=click.Path(dir_okay=False, path_type=Path), metavar="FILE"),
    Option(("--tokenizer",), "tokenizer", "load",
           "Model directory (or tokenizer.json) whose tokenizer measures --dataset's lengths and filters them as "
           "vLLM's bench does; without it text is sent as is and the server's usage counts the tokens.",
           type=click.Path(exists=True, path_type=Path), metavar="DIR"),
    Option(("--goodput",), "goodput", "load",
           "An SLO, NAME:MS with NAME ttft, tpot or e2el (repeatable, or 'ttft:500,tpot:50'): the goodput, "
           "requests/s meeting every SLO, as vllm bench serve --goodput computes it.", multiple=True,
           metavar="NAME:MS"),
)

BENCH: tuple[Option, ...] = (
    Option(("--url",), "url", "call", "The server, http://HOST:PORT (OpenAI-compatible).", required=True,
           metavar="URL"),
    *LOAD,
    JSON,
    Option(("--out",), "out_file", "call", "Also write the JSON here (atomically).",
           type=click.Path(dir_okay=False, path_type=Path)),
    Option(("--seats",), "seats", "call",
           "The server's seats (max_num_seqs / --max-running-requests), recorded in the JSON for `dspark advise "
           "--calibrate`; needed when its /metrics cannot be read (e.g. behind a proxy).", type=WHOLE, metavar="N"),
    *PARITY_LOAD,
    Option(("--profile",), "profile", "call",
           "single: one bench; sweep: guidellm's request-rate sweep (a synchronous run, a throughput run, then "
           "--sweep-points rates between).", type=click.Choice(["single", "sweep"]), default="single",
           show_default=True),
    Option(("--sweep-points",), "sweep_points", "call", "Rates between the sweep's two ends.", type=WHOLE,
           default=5, show_default=True, metavar="N"),
)

SWEEP: tuple[Option, ...] = (
    *PLAN,
    SEATS.but(help="Seat counts to run, baseline first."),
    *LOAD,
    *PARITY_LOAD,
    *RULE,
    SECONDARY.but(help="Secondary metrics (default: aggregate, per-stream decode, TTFT, wall, warm wall; 'none')."),
    Option(("--out-dir",), "out_dir", "call", "Where sweep.json, sweep.md, sweep.png and the engine logs go.",
           type=click.Path(file_okay=False, path_type=Path), default=Path("sweep-results"), show_default=True),
    Option(("--health-timeout",), "health_timeout", "call", "Seconds an engine may take to answer /health.",
           type=REAL, default=900.0, show_default=True, field="health_timeout_s"),
    Option(("--stop-timeout",), "stop_timeout", "call", "Seconds after SIGTERM before SIGKILL.", type=REAL,
           default=30.0, show_default=True, field="stop_timeout_s"),
    Option(("--peer",), "peer", "call",
           "Host of the next node (rank 1, 2, ...) of a native multi-node plan: the sweep runs its `dspark start "
           "--node-rank R` over ssh at each seat count; repeat per rank.", metavar="HOST", multiple=True,
           field="peers", convert=tuple),
    Option(("--peer-ssh-config",), "peer_ssh_config", "call", "ssh_config file for reaching the peers (ssh -F).",
           type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="FILE"),
    Option(("--peer-ssh-option",), "peer_ssh_option", "call", "An ssh -o option for the peers; repeatable.",
           metavar="NAME=VALUE", multiple=True, field="peer_ssh_options", convert=tuple),
    Option(("--peer-dspark",), "peer_dspark", "call", "The dspark command on the peers.", default="dspark",
           show_default=True, metavar="COMMAND"),
    Option(("--peer-env",), "peer_env", "call",
           "NAME=VALUE set for the peers' `dspark start` (e.g. DSPARK_ENGINE_PYTHON); repeatable.",
           metavar="NAME=VALUE", multiple=True, convert=tuple),
)

PROBE: tuple[Option, ...] = (
    Option(("--json",), "as_json", "call", "Print the snapshot as one JSON object.", is_flag=True),
    Option(("--hardware",), "hardware", "call",
           "A file saved by `dspark probe --json`, or a built-in profile (gb10x2, h200, ...; h200:8 for 8 GPUs).",
           metavar="FILE|PROFILE"),
    Option(("--platform",), "platform", "call",
           "cpu: the host a CPU engine plans against (memory and the ISA flags it branches on); --json saves it for "
           "`--platform cpu --hardware FILE` on another machine.", type=click.Choice(["cuda", "cpu"]),
           default="cuda", show_default=True),
)
TOP: tuple[Option, ...] = (
    Option(("URL",), "url", "args", argument=True, required=True),
    Option(("--interval",), "interval", "call",
           "Seconds between two reads of /metrics (the window rates and percentiles cover).", type=REAL,
           default=2.0, show_default=True, metavar="SECONDS"),
    Option(("--seats",), "seats", "call", "The server's seat count, to show seats used of N.", type=WHOLE,
           metavar="N"),
    Option(("--once",), "once", "call", "Read twice, print one view and exit.", is_flag=True),
    Option(("--json",), "as_json", "call", "One view as one JSON object (implies --once).", is_flag=True),
)
PROFILE: tuple[Option, ...] = (
    Option(("URL",), "url", "args", argument=True, required=True),
    Option(("--model",), "model", "call", "Model name to request (default: the server's first)."),
    Option(("--json",), "as_json", "call", "Print the profile as one JSON object.", is_flag=True),
    Option(("--out",), "out_file", "call", "Also write the profile JSON here (for advise --calibrate).",
           type=click.Path(dir_okay=False, path_type=Path)),
)
RECIPES_LIST: tuple[Option, ...] = (
    Option(("--json",), "as_json", "call", "Print the list as one JSON object.", is_flag=True),
)
RECIPES_SHOW: tuple[Option, ...] = (
    Option(("NAME|FILE",), "name_or_path", "args", argument=True, required=True),
    Option(("--json",), "as_json", "call", "Print the validated recipe as one JSON object.", is_flag=True),
)
OBSERVATIONS_LIST: tuple[Option, ...] = (
    Option(("--json",), "as_json", "call", "Print the recorded boots as one JSON object.", is_flag=True),
)
OBSERVATIONS_SHOW: tuple[Option, ...] = (
    Option(("KEY",), "key", "args", argument=True, required=True),
    Option(("--json",), "as_json", "call", "Print the record as one JSON object.", is_flag=True),
)
OBSERVATIONS_CLEAR: tuple[Option, ...] = (
    Option(("[KEY]",), "key", "args", argument=True),
    Option(("--json",), "as_json", "call", "Print how many records went as one JSON object.", is_flag=True),
)

# Each command path's declarations, for the CLI and the test that holds the click commands to them.
COMMANDS: dict[tuple[str, ...], tuple[Option, ...]] = {
    ("validate",): VALIDATE,
    ("start",): START,
    ("advise",): ADVISE,
    ("bench",): BENCH,
    ("sweep",): SWEEP,
    ("probe",): PROBE,
    ("top",): TOP,
    ("profile",): PROFILE,
    ("render", "k8s"): RENDER_K8S,
    ("recipes", "list"): RECIPES_LIST,
    ("recipes", "show"): RECIPES_SHOW,
    ("recipes", "schema"): (),
    ("observations", "list"): OBSERVATIONS_LIST,
    ("observations", "show"): OBSERVATIONS_SHOW,
    ("observations", "clear"): OBSERVATIONS_CLEAR,
}
