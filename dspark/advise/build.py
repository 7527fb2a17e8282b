"""The advice for a deployment: validate at each seat count, calibrate on measured results, predict, recommend.

The edge of the advisor: it reads the prompts and calibration files and runs validate; the model it feeds
(model.py, calibrate.py, inputs.py, advice.py) stays pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark.advise.advice import Advice, predict, recommend
from dspark.advise.calibrate import Calibration, Deployment, Measured, fit, fit_warnings, points_from_json
from dspark.advise.inputs import ModelInputs, describe_costs, model_inputs
from dspark.advise.kv_usage import counting_for
from dspark.advise.model import StepCosts, Workload
from dspark.advise.replay import ReplayResult
from dspark.bench.decision import make_rule, parse_seats
from dspark.core.errors import DsparkError, InputError
from dspark.core.files import CALIBRATION, shown_path
from dspark.core.jsonfile import read_json_file
from dspark.hardware.profiles import bandwidth_gbps_for
from dspark.planning.validate import ValidateRequest, ValidationReport, validate

if TYPE_CHECKING:
    from dspark.bench.load import LoadOptions


@dataclass(frozen=True)
class AdviseOptions:
    """The workload, the seat counts to predict, the calibration files and the decision rule's spellings."""

    seats: str
    clients: int = 32
    requests: int | None = None  # default: 100, or the prompts file's count
    input_len: int = 2048
    output_len: int = 512
    prefix_hit_rate: float = 0.0
    prompts_file: Path | None = None
    calibrate: tuple[str, ...] = ()
    accepted_tokens: float | None = None
    primary: str = "wall_time"
    adopt_at: str = "10%"
    max_regression: str = "10%"
    secondaries: str | None = None
    plot: Path | None = None
    # The workload replayed through the engine's own scheduler (dspark.advise.replay); --prompts is --workload.
    request_rate: float | None = None  # open loop (inf: every request at once, in file order); None: --clients
    burstiness: float = 1.0
    warm: bool = False  # re-send every request after the first pass ends
    shared_prefix: int = 0  # synthetic prompts share this many leading tokens
    simulator: str = "auto"  # auto: the engine's scheduler when installed, else dspark's model; engine; dspark
    seed: int = 0


def _prompt_tokens(prompt: object) -> int:
    """Token ids count as themselves; text at about 4 characters per token."""
    if isinstance(prompt, str):
        return max(1, round(len(prompt) / 4))
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
        return max(1, round(sum(len(str(m.get("content", ""))) for m in prompt) / 4))
    return len(prompt) if isinstance(prompt, list) else 1


def workload_of(opts: AdviseOptions, max_batched: int) -> tuple[Workload, list[str]]:
    """The workload from the flags, or from a prompts file's lengths; notes on what was estimated."""
    notes: list[str] = []
    input_len, requests, output_len = opts.input_len, opts.requests, opts.output_len
    if opts.prompts_file is not None:
        from dspark.bench.prompts import read_jsonl  # noqa: PLC0415

        lines = read_jsonl(opts.prompts_file)
        input_len = round(sum(_prompt_tokens(line.prompt) for line in lines) / len(lines))
        requests = requests or len(lines)
        output_len = max(1, round(sum(line.max_tokens or opts.output_len for line in lines) / len(lines)))
        notes.append(f"prompt length {input_len} tokens: the mean over {opts.prompts_file} (text at ~4 characters "
                     f"per token); {output_len} output tokens, the mean of its max_tokens (default --output-len)")
    for name, value in (("--clients", opts.clients), ("--input-len", input_len), ("--output-len", opts.output_len),
                        ("--requests", requests or 1)):
        if value < 1:
            raise InputError(f"{name} must be positive, got {value}")
    if not 0 <= opts.prefix_hit_rate < 1:
        raise InputError(f"--prefix-hit-rate must be within [0, 1), got {opts.prefix_hit_rate}")
    if not 0 <= opts.shared_prefix < input_len:
        raise InputError(f"--shared-prefix must be at least 0 and shorter than the prompts ({input_len} tokens), "
                         f"got {opts.shared_prefix}")
    return Workload(clients=opts.clients, requests=requests or 100, input_len=input_len, output_len=output_len,
                    prefix_hit_rate=opts.prefix_hit_rate, max_num_batched_tokens=max_batched), notes


def _replayed(request: ValidateRequest, opts: AdviseOptions, first: ValidationReport, load: Workload,
              ran: Sequence[tuple[int, ValidationReport]], inputs: ModelInputs, costs: StepCosts
              ) -> tuple[ReplayResult | None, list[str]]:
    """The workload through the installed engine's own scheduler, or None and why (then dspark's model runs)."""
    from dspark.advise.replay import (  # noqa: PLC0415
        ReplayError,
        ReplayFailedError,
        failed_release_error,
        simulate_with_engine,
        step_cost,
    )
    from dspark.advise.workload import (  # noqa: PLC0415
        accepted_pattern,
        arrivals_of,
        check_lengths,
        load_workload,
        synthetic,
    )
    from dspark.bench.prompts import take  # noqa: PLC0415
    from dspark.core.errors import EngineNotInstalledError  # noqa: PLC0415
    from dspark.engines import engine_spec  # noqa: PLC0415
    from dspark.engines.interpreter import find_engine_python  # noqa: PLC0415

    if opts.simulator == "dspark":
        _refuse_scheduler_options(opts, "--simulator dspark asks for dspark's own model")
        return None, ["dspark model: asked for (--simulator dspark)"]
    spec = engine_spec(first.serve.engine)
    try:
        python = find_engine_python(spec.adapter(), request.engine_python, request.env)
    except EngineNotInstalledError as exc:
        if opts.simulator == "engine":
            raise
        _refuse_scheduler_options(opts, f"{first.serve.engine} is not installed here ({exc})")
        return None, [f"dspark model: {first.serve.engine} is not installed here ({exc})"]
    model_dir = Path(first.serve.model)
    if opts.prompts_file is not None:
        reqs = load_workload(opts.prompts_file, opts.output_len, model_dir if model_dir.is_dir() else None)
        reqs = take(reqs, opts.requests) if opts.requests else reqs  # cycled, as bench sends the file
    else:
        vocab = first.architecture.vocab_size or 32000
        reqs = synthetic(load.requests, load.input_len, load.output_len, shared_prefix=opts.shared_prefix,
                         vocab_size=vocab, seed=opts.seed)
    cap = first.capacity
    check_lengths(reqs, cap.max_model_len, str(opts.prompts_file or "the synthetic workload"))
    arrivals = arrivals_of(len(reqs), opts.clients, opts.request_rate, opts.burstiness, opts.seed)
    k = inputs.shape.speculative_tokens
    try:
        result = simulate_with_engine(
            python, first.serve.engine, first.witness_request, cap.details, cap.max_model_len,
            len(first.architecture.mtp_layers), [n for n, _ in ran], reqs, arrivals, warm=opts.warm,
            pattern=accepted_pattern(inputs.shape.emitted_per_step, k), cost=step_cost(costs, inputs.shape),
            seat_details={n: r.capacity.details for n, r in ran})
    except ReplayFailedError as exc:  # the installed release ran and could not replay: never a silent fallback
        raise failed_release_error(exc, first.serve.engine, spec.modelled_versions) from None
    except ReplayError as exc:  # no scheduler for this plan, or the engine does not import in that interpreter
        if opts.simulator == "engine":
            raise EngineNotInstalledError(str(exc)) from None
        _refuse_scheduler_options(opts, f"the engine's scheduler could not be used ({exc})")
        return None, [f"dspark model: the engine's scheduler could not be used ({exc})"]
    cls, queue = result.kv.get("scheduler"), result.kv.get("batch_queue")
    how = (f" ({cls}" + (f", {queue} batches in flight" if isinstance(queue, int) and queue > 1 else "")
           + ", the class and loop the engine uses for this plan)") if cls else ""
    notes = [f"simulated by {result.simulator}{how} in {python} ({result.seconds:.1f} s, "
             f"{result.setup_seconds:.1f} s of it importing the engine): {len(reqs)} requests, {arrivals.description}"
             + (", then re-sent the same way (warm)" if opts.warm else "")
             + "; each step on the virtual clock costs the step cost above for what the scheduler put in it"
             + (f"; {inputs.shape.emitted_per_step - 1:g} of {k} drafts accepted per step, in a fixed pattern"
                if k else ""), *result.notes]
    planned = cap.engine_version
    if result.engine_version and planned and result.engine_version != planned:
        notes.append(f"warn: the plan is for {first.serve.engine} {planned}, the scheduler replayed is the installed "
                     f"{result.engine_version}'s")
    return result, notes


def _refuse_scheduler_options(opts: AdviseOptions, why: str) -> None:
    """--warm, --request-rate and --shared-prefix need the engine's scheduler: refused, never ignored, without it."""
    asked = [name for name, on in (("--warm", opts.warm), ("--request-rate", opts.request_rate is not None),
                                   ("--shared-prefix", opts.shared_prefix > 0)) if on]
    if asked:
        raise InputError(f"{', '.join(asked)} need(s) the engine's own scheduler (prefix cache, eviction, open-loop "
                         f"arrivals), which cannot run: {why}; dspark's own model has none of them",
                         hint="install the engine (or set DSPARK_ENGINE_PYTHON to its python) and drop "
                              "--simulator dspark, or leave out " + ", ".join(asked))


def first_plan(request: ValidateRequest, seats: str) -> tuple[int, ValidationReport]:
    """The baseline seat count of `seats` ('8,16') and validate's report at it (advise and sweep --explain)."""
    first = parse_seats(seats)[0]
    return first, validate(dataclasses.replace(request, flags={**request.flags, "max_num_seqs": first}))


def _reports(request: ValidateRequest, seats: Sequence[int]) -> list[ValidationReport]:
    """validate at each seat count, as `dspark start --max-num-seqs N` would plan it."""
    return [validate(dataclasses.replace(request, flags={**request.flags, "max_num_seqs": n})) for n in seats]


def _recipe_points(report: ValidationReport) -> tuple[list[Measured], tuple[float, str] | None, list[str]]:
    """Step-time and prefill observations of the recipe, when planning for the hardware they were measured on."""
    recipe = report.recipe
    if recipe is None or not recipe.observations:
        return [], None, []
    if recipe.hardware is None or report.hardware.hostname != f"profile:{recipe.hardware}":
        return [], None, [f"the recipe's measurements are not used: they were taken on {recipe.hardware}, "
                          f"this plan is for {report.hardware.description}"]
    steps = [Measured(seats=o.seats, source=f"recipe observation: {o.source}", step_s=o.value / 1e3)
             for o in recipe.observations if o.metric == "decode_step_ms" and o.seats]
    prefill = next(((o.value / 1e3, f"recipe observation: {o.source}") for o in recipe.observations
                    if o.metric == "prefill_ms_per_token"), None)
    return steps, prefill, []


def _deployment(report: ValidationReport) -> Deployment:
    """The engine and the names the plan's model may be served under (its served name, its path, the path's tail)."""
    model = report.serve.model
    names = {model, model.rstrip("/").rsplit("/", 1)[-1]}
    if report.serve.served_model_name:
        names.add(report.serve.served_model_name)
    return Deployment(engine=report.serve.engine, model_names=frozenset(n for n in names if n))


def _calibration_points(files: Sequence[str], max_batched: int, plan: Deployment | None = None) -> list[Measured]:
    points: list[Measured] = []
    for name in files:
        path = Path(name)
        try:
            data = read_json_file(path, CALIBRATION)  # a regular file within its limit: no FIFO hang, no 50 GB
        except InputError as exc:
            problem = exc.message.removeprefix(f"{shown_path(path)}: ")
            raise InputError(f"--calibrate {shown_path(name)}: cannot read it as JSON ({problem})",
                             hint=exc.hint) from None
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise InputError(f"--calibrate {name}: cannot read it as JSON ({type(exc).__name__}: {exc})") from None
        if not isinstance(data, dict):
            raise InputError(f"--calibrate {name}: not a `dspark bench --json` or sweep.json object")
        try:
            points += points_from_json(data, name, max_num_batched_tokens=max_batched, plan=plan)
        except (ValueError, TypeError, KeyError) as exc:
            raise InputError(f"--calibrate {name}: {exc}") from None
    return points


def build_advice(request: ValidateRequest, opts: AdviseOptions) -> Advice:
    """Validate at each seat count, fit the costs to the measured points, predict each, and recommend."""
    seat_list = parse_seats(opts.seats)
    rule = make_rule(opts.primary, opts.adopt_at, opts.max_regression, opts.secondaries)
    reports = _reports(request, seat_list)
    first = reports[0]
    s = first.settings
    cap = first.capacity
    batched = cap.details.get("max_num_batched_tokens") or cap.details.get("chunked_prefill_size")
    max_batched = int(batched) if isinstance(batched, int) and batched > 0 else 8192
    load, notes = workload_of(opts, max_batched)
    steps, prefill, recipe_notes = _recipe_points(first)
    spec = int(s.num_speculative_tokens.value or (first.recipe.speculative.num_speculative_tokens
                                                 if first.recipe and first.recipe.speculative else 0))
    gpu = min(first.hardware.gpus, key=lambda g: g.free_bytes) if first.hardware.gpus else None
    ran, capped = _seats_run(seat_list, reports, first.serve.engine)
    # Each seat count captures its own graphs, all from one grid: the largest count's sizes cover every smaller
    # count's decode steps (at most seats × query length tokens, within its own largest size) the same way.
    widest = max((r.capacity for _, r in ran), key=lambda c: c.cudagraph_max_capture_size)
    inputs: ModelInputs = model_inputs(
        first.architecture, first.weights, cap, gpu, platform=str(s.platform.value or "cuda"),
        graph_sizes=widest.cudagraph_capture_sizes,
        tp=int(s.tensor_parallel_size.value), speculative_tokens=spec, emitted_per_step=opts.accepted_tokens,
        observed_prefill_s=prefill, kv_cache_dtype=str(s.kv_cache_dtype.value or "auto"))
    points = steps + _calibration_points(opts.calibrate, max_batched, _deployment(first))
    calibration: Calibration | None = None
    costs = inputs.prior
    warnings: list[str] = []
    if points:
        pinned = ("prefill_per_token_s",) if prefill is not None else ()
        calibration = fit(inputs.prior, inputs.shape, points, pinned)
        costs = calibration.costs
        peak = (gpu.bandwidth_gbps or bandwidth_gbps_for(gpu.name)) if gpu is not None else None
        warnings = fit_warnings(calibration, peak * 1e9 if peak else None, gpu.name if gpu is not None else "device")
    pools = [(n, r.capacity.kv_pool_tokens) for n, r in ran]
    countings = {n: counting_for(r.capacity) for n, r in ran}
    predictions = predict(costs, inputs.shape, load, pools, request.prefix_cache_reserve, countings,
                          asked={r.capacity.max_num_seqs: n for n, r in zip(seat_list, reports, strict=True)
                                 if r.capacity.max_num_seqs != n})
    replay, replay_notes = _replayed(request, opts, first, load, ran, inputs, costs)
    if replay is not None:
        from dspark.advise.replay import with_replay  # noqa: PLC0415

        predictions = [with_replay(p, seat, replay.simulator, replay.kv_usage_metric)
                       if (seat := replay.at(p.seats)) else p for p in predictions]
    else:
        why = replay_notes[0]
        predictions = [dataclasses.replace(p, simulator=why) for p in predictions]
        replay_notes.append("dspark model: its own continuous batching, with no prefix cache, no eviction and no "
                            "preemption: prefix hits are the --prefix-hit-rate input, clients are closed-loop")
    fitted = calibration.fitted if calibration else ()
    lines = describe_costs(costs, fitted, inputs.sources, calibration.points if calibration else 0)
    assumptions = [
        "step time (dspark.perf.step) = max(weights read, GEMM FLOPs ÷ rate at the step's padded token count) + "
        "max(KV and state read, attention FLOPs ÷ attention rate) + activations ÷ bandwidth + kernels × latency "
        "+ sampler [+ all-reduces]; the engine's CPU per step (and, without a CUDA graph, each kernel's launch) "
        "adds to it, or runs beside it with async scheduling: max(GPU, CPU + launches)",
        f"tokens a seat keeps per step: {inputs.shape.emitted_per_step:g} ({inputs.sources['emitted_per_step']}); "
        f"each verifies {inputs.shape.query_len}",
        f"chunked prefill within {max_batched:,} batched tokens per step; "
        + (f"{load.clients} closed-loop clients send {load.requests} requests" if replay is None
           or opts.request_rate is None else "requests arrive open-loop (see the simulator's line)")
        + "; TTFT includes the wait for a seat",
        countings[ran[0][0]].rule,
        *capped,
        *([f"KV peak counts each request's {load.prefix_hit_rate:.0%} cached prefix as its own; a prefix shared by "
           "running requests is held once by the engine, so with one shared prefix the peak is lower"]
          if load.prefix_hit_rate > 0 else []),
        *replay_notes, *inputs.assumptions, *notes, *recipe_notes,
        *([] if points else ["uncalibrated: every cost term is a prior; pass --calibrate with a bench or sweep "
                             "result from this deployment"]),
    ]
    context = {
        "engine": first.serve.engine, "engine_version": cap.engine_version,
        "recipe": first.recipe.name if first.recipe else None, "model": first.architecture.source,
        "hardware": first.hardware.description, "verdicts": {str(n): r.verdict for n, r in zip(seat_list, reports,
                                                                                              strict=True)},
    }
    return Advice(workload=load, shape=inputs.shape, costs=costs, cost_lines=tuple(lines), calibration=calibration,
                  predictions=tuple(predictions), recommendation=recommend(predictions, rule,
                                                                           request.prefix_cache_reserve),
                  assumptions=tuple(assumptions), context=context, warnings=tuple(warnings))


def _seats_run(asked: Sequence[int], reports: Sequence[ValidationReport],
               engine: str) -> tuple[list[tuple[int, ValidationReport]], list[str]]:
    """The seat counts the engine runs for those asked (it caps some), each once, and a sentence per cap."""
    ran: list[tuple[int, ValidationReport]] = []
    notes: list[str] = []
    for n, report in zip(asked, reports, strict=True):
        runs = report.capacity.max_num_seqs
        if runs != n:
            again = " (already predicted)" if any(m == runs for m, _ in ran) else ""
            notes.append(f"{n} seats asked: {engine} runs at most {runs} here (validate: seats-capped-by-engine), "
                         f"so {runs} is what is predicted{again}")
        if all(m != runs for m, _ in ran):
            ran.append((runs, report))
    return ran, notes


def sweep_prediction(request: ValidateRequest, seats: str, load: LoadOptions, primary: str, adopt_at: str,
                     max_regression: str, secondaries: str | None) -> dict[str, Any]:
    """The advice for a sweep's seats and load, made before its runs (its JSON), or {"error": why not}.

    The load is the bench's: its clients or open-loop arrivals, its prompts file or synthetic lengths, and its
    warm re-run, so with the engine installed each seat count is the engine's own scheduler replaying what the
    sweep is about to send (`simulator` says which ran), and every sweep checks that replay against /metrics.
    """
    opts = AdviseOptions(seats=seats, clients=load.concurrency, requests=load.requests, input_len=load.input_len,
                         output_len=load.max_tokens, prompts_file=load.prompts_file, primary=primary,
                         adopt_at=adopt_at, max_regression=max_regression, secondaries=secondaries,
                         request_rate=load.request_rate, burstiness=load.burstiness, warm=load.warm_rerun,
                         seed=load.seed)
    try:
        advice = build_advice(request, opts).to_json()
    except (DsparkError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    notes = [f"the sweep's load: {load.reps} rep(s) of {load.requests} requests, each predicted as the first pass "
             "(a rep's synthetic prompts are new to the prefix cache)"
             + ("; the warm pass is the re-run of the last rep's prompts" if load.warm_rerun else "")]
    if load.request_rate is not None:
        notes.append(f"open loop: the bench keeps at most {load.concurrency} requests in flight, the replay sends "
                     "each at its arrival time whatever is in flight")
    advice["assumptions"] = [*advice.get("assumptions", []), *notes]
    return advice
