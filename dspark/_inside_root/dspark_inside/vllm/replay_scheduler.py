"""`python -m dspark_inside.vllm.replay_scheduler`: a workload through the installed vLLM's own Scheduler, no model.

shapes.ReplayRequest (or a list) -> ReplayAnswer (or a list, from one engine import). vLLM is imported only when
a request is replayed (dspark's tests import this module without it); the engine-neutral half is replay.py.

The Scheduler and its KVCacheManager are vLLM's own, built on the KVCacheConfig the engine's planner makes of
dspark's plan (vllm.kv_plan, the witness's planning), set up as EngineCore sets them up
(num_gpu_blocks, block size, the block sizes resolve_kv_cache_block_sizes gives, the request block hasher),
with the plan's seats, batched-token budget, chunked prefill, prefix caching, mamba cache mode and
speculative method, under every release dspark models (0.25.0, 0.26.0, 0.32.0, 0.33.0: cpu_platform and
arch_config are what 0.25 and 0.26 need of it). Each step is schedule() -> a made-up ModelRunnerOutput ->
update_from_output(): a request whose prompt is computed samples one token per step, or with speculation 1 +
accepted of its scheduled draft tokens (a fixed pattern whose mean is the accepted-token rate), and every running
request is handed drafts as the model runner would (update_draft_token_ids). Steps advance a virtual clock by the
step cost of what they hold; arrivals follow that clock, and an idle engine steps with the first of them alone
(_Pass._arrive).

The scheduler class is the one the engine builds (EngineCore.__init__: vllm_config.scheduler_config.
get_scheduler_cls()): AsyncScheduler where the plan's platform turns async scheduling on (CUDA by default in
0.32 and 0.33; CpuPlatform.check_and_update_config turns it off), driven as EngineCore.step_with_batch_queue
drives it: the next batch is scheduled before the last one's output is in (max_concurrent_batches in flight),
so a finished request holds its seat and blocks one batch longer and each running request allocates one token
ahead, and drafts are placeholders the AsyncScheduler sets itself (no update_draft_token_ids). Without it,
EngineCore.step: schedule, execute, update, one batch at a time.

request (shapes.ReplayRequest): plan: the planner request (kv_plan); engine: {max_model_len, block_size
    (cache_config.block_size as planned for the target), max_num_batched_tokens, enable_chunked_prefill,
    enable_prefix_caching, mamba_cache_mode, speculative: null | {method, num_speculative_tokens, mtp_layers},
    async_scheduling, max_concurrent_batches (the plan's; default off, 1), scheduler: extra SchedulerConfig
    fields (optional)}. answer: shapes.ReplayAnswer; kv: {num_blocks, block_size, hash_block_size, groups}; each
pass also has preempted_queries and preempted_hits.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import importlib
import inspect
import math
import os
import sys
import time
from types import SimpleNamespace
from typing import Any

from dspark_inside import protocol
from dspark_inside import replay as shared
from dspark_inside.shapes import ReplayAnswer, ReplayRequest
from dspark_inside.step_cost import cpu_seconds, step_seconds
from dspark_inside.vllm import kv_plan

_TOKEN = 1  # the made-up sampled and draft token: its value only feeds block hashes past the prompt


def _default(f: Any) -> Any:
    """A dataclass field's default (pydantic FieldInfo defaults included); MISSING when it has none."""
    if f.default is not dataclasses.MISSING:
        value = f.default
        return value.get_default(call_default_factory=True) if hasattr(value, "get_default") else value
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _bare(cls: Any, values: dict[str, Any]) -> Any:
    """An instance of an engine config class without its __post_init__ (no model to read): defaults, then values.

    The class's own methods and properties then answer from these fields (use_eagle(), uses_mrope, ...).
    """
    obj = object.__new__(cls)
    for f in dataclasses.fields(cls):
        value = _default(f)
        if value is not dataclasses.MISSING:
            object.__setattr__(obj, f.name, value)
    for key, value in values.items():
        object.__setattr__(obj, key, value)
    return obj


def _kwargs(cls: Any, values: dict[str, Any]) -> dict[str, Any]:
    """The values this release's constructor takes (InitVars included); the rest are left out."""
    names = set(inspect.signature(cls).parameters)
    return {k: v for k, v in values.items() if k in names}


def _model_config(max_model_len: int) -> Any:
    """A ModelConfig holding what the scheduler reads of it: a text-only generative model of max_model_len."""
    from transformers import PretrainedConfig  # noqa: PLC0415
    from vllm.config import ModelConfig  # noqa: PLC0415

    hf = PretrainedConfig()
    model = _bare(ModelConfig, {"max_model_len": max_model_len, "hf_config": hf, "hf_text_config": hf,
                                "runner_type": "generate", "multimodal_config": None,
                                "skip_tokenizer_init": True})
    # supports_multimodal_inputs answers from this cache, keyed as _cached_supports_multimodal_inputs keys it.
    object.__setattr__(model, "_supports_multimodal_inputs_cache", {(False, "generate", None): False})
    arch_config(model)
    return model


def arch_config(model: Any) -> None:
    """The model_arch_config ModelConfig.__post_init__ sets (0.25 on), by the release's own get_model_arch_config.

    Its getters (architectures, get_num_experts, ...) read it; the scheduler's VllmConfig.use_v2_model_runner
    asks is_moe where Triton is active (0.25, 0.26: before its Triton check, on any host).
    """
    build = getattr(model, "get_model_arch_config", None)
    if build is not None and getattr(model, "model_arch_config", None) is None:
        object.__setattr__(model, "model_arch_config", build())


def _speculative_config(spec: dict[str, Any] | None) -> Any:
    """The SpeculativeConfig fields the scheduler and VllmConfig's lookahead properties read (method, tokens)."""
    if not spec:
        return None
    from vllm.config import SpeculativeConfig  # noqa: PLC0415

    draft_hf = SimpleNamespace(num_nextn_predict_layers=int(spec.get("mtp_layers") or 1), model_type="")
    return _bare(SpeculativeConfig, {
        "method": spec["method"], "num_speculative_tokens": int(spec["num_speculative_tokens"]),
        "draft_model_config": SimpleNamespace(hf_config=draft_hf), "num_speculative_tokens_per_batch_size": None,
    })


class Replay:
    """vLLM's Scheduler on the plan's KVCacheConfig, rebuilt per seat count; the planner runs once."""

    def __init__(self, req: dict[str, Any]) -> None:
        self.req = req
        self.engine = req["engine"]
        from vllm.v1.core import kv_cache_utils  # noqa: PLC0415
        from vllm.v1.core.sched import async_scheduler, scheduler  # noqa: PLC0415, F401 - imported before workers fork
        from vllm.v1.request import Request  # noqa: PLC0415, F401

        self.utils = kv_cache_utils
        self.pattern = [int(a) for a in req.get("accepted_pattern") or [0]]
        # EngineCore's batch queue (VllmConfig.max_concurrent_batches, as planned): 1 is EngineCore.step.
        self.batch_queue = max(1, int(self.engine.get("max_concurrent_batches") or 1))

    def kv_config(self, seats: int) -> Any:
        """The scheduler's KVCacheConfig of the plan at `seats` (planned as the engine plans it at start-up)."""
        planned = kv_plan.plan({**self.req["plan"], "max_num_seqs": seats}, "the scheduler replay")
        gen = getattr(self.utils, "generate_scheduler_kv_cache_config", None)
        if gen is None:
            with contextlib.suppress(ImportError, AttributeError):
                gen = importlib.import_module("vllm.v1.core.kv_cache_planning").generate_scheduler_kv_cache_config
        return gen(planned.kv_configs) if gen is not None else planned.kv_config

    def vllm_config(self, seats: int) -> Any:
        """A VllmConfig with the plan's scheduler, cache, model length and speculative settings."""
        from vllm.config import CacheConfig, SchedulerConfig, VllmConfig  # noqa: PLC0415

        e = self.engine
        with contextlib.redirect_stdout(sys.stderr):
            config = VllmConfig()  # the host platform's hooks run on these defaults, not on the plan's values
        sched_values = {
            "max_model_len": e["max_model_len"], "is_encoder_decoder": False, "max_num_seqs": seats,
            "max_num_batched_tokens": e["max_num_batched_tokens"],
            "enable_chunked_prefill": e["enable_chunked_prefill"],
            "async_scheduling": bool(e.get("async_scheduling")),
            **(e.get("scheduler") or {}),
        }
        config.scheduler_config = SchedulerConfig(**_kwargs(SchedulerConfig, sched_values))
        cache_values = {"block_size": e["block_size"], "enable_prefix_caching": e["enable_prefix_caching"],
                        "mamba_cache_mode": e.get("mamba_cache_mode") or "none"}
        config.cache_config = CacheConfig(**_kwargs(CacheConfig, cache_values))
        config.model_config = _model_config(e["max_model_len"])
        config.speculative_config = _speculative_config(e.get("speculative"))
        return config

    def scheduler(self, seats: int) -> tuple[Any, Any, dict[str, Any]]:
        """A fresh Scheduler (empty prefix cache) and the request block hasher, set up as EngineCore does."""
        from vllm.v1.structured_output import StructuredOutputManager  # noqa: PLC0415

        config = self.vllm_config(seats)
        # The class EngineCore.__init__ builds: vllm_config.scheduler_config.get_scheduler_cls() (AsyncScheduler
        # when async_scheduling is on, else Scheduler).
        scheduler_cls = config.scheduler_config.get_scheduler_cls()
        kv = self.kv_config(seats)
        cache = config.cache_config
        cache.num_gpu_blocks = kv.num_blocks
        participating = [g.kv_cache_spec.block_size for g in kv.kv_cache_groups
                         if getattr(g.kv_cache_spec, "prefix_cacheable", True)]
        if kv.kv_cache_groups:
            cache.block_size = min(participating or [g.kv_cache_spec.block_size for g in kv.kv_cache_groups])
        resolve = getattr(self.utils, "resolve_kv_cache_block_sizes", None)
        block, hash_block = resolve(kv, config) if resolve is not None else (cache.block_size, cache.block_size)
        if hasattr(kv, "hash_block_size"):
            kv.hash_block_size = hash_block
        alignment = getattr(self.utils, "resolve_cache_hit_alignment_tokens", None)
        if alignment is not None and hasattr(kv, "cache_hit_alignment_tokens"):
            kv.cache_hit_alignment_tokens = alignment(kv, config, block, hash_block)
        with contextlib.redirect_stdout(sys.stderr):
            sched = scheduler_cls(vllm_config=config, kv_cache_config=kv,
                              structured_output_manager=StructuredOutputManager(config), block_size=block,
                              hash_block_size=hash_block, log_stats=True)
        hasher = None
        if cache.enable_prefix_caching:
            from vllm.utils.hashing import get_hash_fn_by_name  # noqa: PLC0415

            fn = get_hash_fn_by_name(cache.prefix_caching_hash_algo)
            self.utils.init_none_hash(fn)
            hasher = self.utils.get_request_block_hasher(hash_block, fn)
        info = {"scheduler": scheduler_cls.__name__, "batch_queue": self.batch_queue,
                "num_blocks": int(kv.num_blocks), "block_size": int(block), "hash_block_size": int(hash_block),
                "groups": [{"spec": type(g.kv_cache_spec).__name__, "block_size": int(g.kv_cache_spec.block_size),
                            "layers": len(g.layer_names)} for g in kv.kv_cache_groups]}
        return sched, hasher, info

    def run(self, seats: int) -> dict[str, Any]:
        """The cold pass, then the warm one when asked, on one scheduler (the warm pass finds the cold's cache)."""
        sched, hasher, info = self.scheduler(seats)
        cold = _Pass(self, sched, hasher, "c").run()
        warm = _Pass(self, sched, hasher, "w").run() if self.req.get("warm") else None
        return {"seats": seats, "cold": cold, "warm": warm, "kv": info}


class _Pass:
    """One pass of the workload through a scheduler, on a virtual clock starting at 0."""

    def __init__(self, replay: Replay, sched: Any, hasher: Any, tag: str) -> None:
        self.replay, self.sched, self.hasher, self.tag = replay, sched, hasher, tag
        self.items = replay.req["requests"]
        self.cost = replay.req["step_cost"]
        self.spec = int((replay.engine.get("speculative") or {}).get("num_speculative_tokens") or 0)
        n = len(self.items)
        self.arrival = [math.nan] * n
        self.first = [math.nan] * n
        self.seen = [math.nan] * n  # when its client has the first token
        self.finish = [math.nan] * n
        self.outputs = [0] * n
        self.index = {f"{tag}{i}": i for i in range(n)}
        self.decode_steps: dict[str, int] = {}
        self.reqs: dict[str, Any] = {}
        self.arrivals = shared.Arrivals(replay.req["arrivals"], n, self.cost)
        self.now = self.prefill_time = self.usage_time = self.peak = self.pairs = 0.0
        # the batch queue's last schedule(): when, and the CPU path of the step it made (the next one waits for it)
        self.last_cut = self.last_cpu = 0.0
        self.steps = self.running_peak = self.done = 0
        self.counts = {"queries": 0, "hits": 0, "preempted_queries": 0, "preempted_hits": 0}

    def _request(self, i: int) -> Any:
        from vllm import SamplingParams  # noqa: PLC0415
        from vllm.v1.request import Request  # noqa: PLC0415

        item = self.items[i]
        params = SamplingParams(max_tokens=int(item["max_tokens"]), ignore_eos=True)
        rid = f"{self.tag}{i}"
        # When its client sent it (a request that came during a step, or waited for the engine's next look at
        # its queue, is added later): what TTFT is measured from, and the priority order's arrival time.
        sent = self.arrivals.due_at.get(i, self.now)
        request = Request(rid, list(item["prompt"]), params, None, arrival_time=sent, block_hasher=self.hasher)
        self.arrival[i] = sent
        self.reqs[rid] = request
        return request

    def _output(self, so: Any) -> tuple[list[str], Any]:
        """The model runner's output: sampled tokens for requests whose prompt is computed, none mid-prefill."""
        from vllm.v1.outputs import ModelRunnerOutput  # noqa: PLC0415

        ids = [r.req_id for r in so.scheduled_new_reqs] + list(so.scheduled_cached_reqs.req_ids)
        sampled: list[list[int]] = []
        spec_tokens = so.scheduled_spec_decode_tokens
        pattern = self.replay.pattern
        for rid in ids:
            request = self.sched.requests[rid]
            # _update_after_schedule's own flag (its placeholders counted with async scheduling); the same test
            # where a release lacks it.
            chunk = getattr(request, "is_prefill_chunk", None)
            if chunk is None:
                chunk = request.num_computed_tokens < request.num_tokens
            if chunk:
                sampled.append([])  # a prompt chunk: the runner discards what it samples
                continue
            drafts = len(spec_tokens.get(rid, ()))
            if drafts:
                k = self.decode_steps.get(rid, 0)
                self.decode_steps[rid] = k + 1
                sampled.append([_TOKEN] * (1 + min(drafts, pattern[k % len(pattern)])))
            else:
                sampled.append([_TOKEN])
        return ids, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                      sampled_token_ids=sampled)

    def _shape(self, so: Any) -> tuple[int, float, int]:
        """(decoding rows, context tokens the step reads, prompt tokens computed) of a scheduled step."""
        rows, context, prefill = 0, 0.0, 0
        self.pairs = 0.0  # the chunks' (query, key) pairs, for the step cost's prompt attention
        for rid, n in so.num_scheduled_tokens.items():
            request = self.sched.requests[rid]
            before = request.num_computed_tokens - n  # _update_after_schedule advanced it already
            context += before
            if before + 1 >= request.num_tokens:  # the last sampled token (and drafts): a decode row
                rows += 1
            else:
                prefill += n  # a prompt chunk, or a preempted request computing its tokens again
                self.pairs += n * (before + n / 2)
        return rows, context, prefill

    def _record(self, outputs: dict[int, Any], taken: float | None = None) -> None:
        """Count the engine's own figures of a step: prefix-cache stats, first and last tokens, finishes.

        taken: when the engine core took the step's output, if later than its end: with a batch queue it takes it
        only once the next batch is scheduled and launched (EngineCore.step_with_batch_queue fills the queue
        before it blocks), so a first token waits for that launch, and reaches its client as much later (the
        advisor's model, dspark.advise.model._Pipeline).
        """
        late = 0.0 if taken is None else max(0.0, taken - self.now)
        streamed = finished = 0
        firsts: list[int] = []
        for eco in outputs.values():
            stats = eco.scheduler_stats
            if stats is not None and stats.prefix_cache_stats is not None:
                for key in self.counts:
                    self.counts[key] += int(getattr(stats.prefix_cache_stats, key, 0))
            for o in eco.outputs:
                i = self.index[o.request_id]
                if o.new_token_ids:
                    streamed += 1
                    self.outputs[i] += len(o.new_token_ids)
                    if math.isnan(self.first[i]):
                        self.first[i] = self.now + late
                        firsts.append(i)
                if o.finish_reason is not None:
                    self.finish[i] = self.now
                    self.done += 1
                    finished += 1
        # The step's tokens reach their clients through the API server; a finished request's client sends its next.
        if streamed or finished:
            seen = self.arrivals.stepped(self.now, streamed, finished)
            for i in firsts:
                self.seen[i] = seen + late

    def _schedule(self) -> tuple[Any, list[str], Any, float, int]:
        """schedule() and, at once, the output the runner will give it: (output, ids, runner output, dt, prefill)."""
        so = self.sched.schedule()
        ids, out = self._output(so)
        rows, context, prefill = self._shape(so)
        self.last_cpu = cpu_seconds(self.cost, rows, prefill) if ids else 0.0
        return so, ids, out, step_seconds(self.cost, rows, context, prefill, self.pairs) if ids else 0.0, prefill

    def _finish(self, batch: tuple[Any, list[str], Any, float, int], pool: Any, *, clock: bool = True) -> None:
        """The batch has run: the clock moves by its cost, then update_from_output() and, synchronous, drafts."""
        from vllm.v1.outputs import DraftTokenIds  # noqa: PLC0415

        so, ids, out, dt, prefill = batch
        if clock and ids:
            self.now += dt
            self.prefill_time += prefill * self.cost["prefill_per_token_s"]
            self.steps += 1
            self.running_peak = max(self.running_peak, len(ids))
        # With a batch queue the batch scheduled last (after this one, if any) has been launched by now.
        taken = self.last_cut + self.last_cpu if self.replay.batch_queue > 1 else None
        self._record(self.sched.update_from_output(so, out), taken)
        if self.spec and ids and self.replay.batch_queue == 1:
            # EngineCore.post_step: the drafter proposes for every request it ran (the scheduler skips prompt
            # chunks); with async scheduling the AsyncScheduler's placeholders stand for the drafts instead.
            self.sched.update_draft_token_ids(DraftTokenIds(ids, [[_TOKEN] * self.spec for _ in ids]))
        usage = pool.get_usage()
        self.peak = max(self.peak, usage)
        if clock and ids:
            self.usage_time += usage * dt

    def _step(self, pool: Any) -> None:
        """EngineCore.step: schedule() -> made-up output -> update_from_output() -> drafts, on the clock."""
        batch = self._schedule()
        if not batch[1]:
            raise RuntimeError(f"the scheduler scheduled nothing at step {self.steps} with requests waiting "
                               "(a prompt longer than the pool can hold?)")
        self._finish(batch, pool)

    def _arrive(self, idle: bool, at: float | None = None) -> None:
        """Add every request whose arrival time has come; an idle engine wakes on the first and steps with it.

        EngineCore._process_input_queue (0.25 to 0.33): with no work it blocks on its input queue for one
        request, then takes what else is queued, and steps. Requests a client sends at once reach that queue
        one by one through the API server (each parsed, processed and sent on its own), so the first step holds
        the first alone and the others are in by the next (the 0.32 CPU engine, 16 uneven prompts on a pool they
        outgrow, sent one each 20 ms apart: its warm-pass hits to the token on 8 draws; all 16 in the first
        step gave up to 7 blocks more). Arrivals marked queued (a paused engine) are all in the first step.
        With an intake time (the step cost's intake_s: the engine core's wake-up; a GPU plan), the idle engine
        was woken that long after the first arrival and takes whatever reached it by then, as the advisor's model
        does. While the engine runs, whatever arrived during a step is in the next one, or by `at`: when the
        batch queue's next schedule() runs (after the last one's CPU path).
        """
        for i in self.arrivals.due(self.now if at is None else at):
            self.sched.add_request(self._request(i))
            if idle and not self.arrivals.queued and not self.arrivals.intake:
                break

    def _run_sync(self, pool: Any) -> None:
        sched = self.sched
        while self.done < len(self.items):
            self._arrive(idle=not sched.has_unfinished_requests())
            if sched.has_unfinished_requests():
                self._step(pool)
            elif self.arrivals.pending:
                self.now = self.arrivals.next_at() + self.arrivals.intake  # idle until the next arrival
            else:
                break

    def _run_batch_queue(self, pool: Any) -> None:
        """EngineCore.step_with_batch_queue: fill the queue first, then take the oldest batch's output."""
        sched, depth = self.sched, self.replay.batch_queue
        queue: collections.deque[tuple[Any, list[str], Any, float, int]] = collections.deque()
        empty = 0
        while self.done < len(self.items):
            # step k is scheduled once step k - depth has returned (now) and step k - 1 has been launched (the
            # last schedule's time + its CPU path): what reached the engine by then is in it
            cut = max(self.now, self.last_cut + self.last_cpu) if queue else self.now
            self._arrive(idle=not sched.has_unfinished_requests() and not queue, at=cut)  # EngineCore.has_work
            if sched.has_requests():
                self.last_cut = cut
                batch = self._schedule()
                queue.appendleft(batch)
                empty = 0 if batch[1] else empty + 1
                if empty > 2 * depth + 1:
                    raise RuntimeError(f"the scheduler scheduled nothing at step {self.steps} with requests "
                                       "waiting (a prompt longer than the pool can hold?)")
                if len(queue) < depth and (batch[1] or sched.has_requests()):
                    continue
            elif not queue:
                if self.arrivals.pending:
                    self.now = self.arrivals.next_at() + self.arrivals.intake  # idle until the next arrival
                    self.last_cut, self.last_cpu = self.now, 0.0
                    continue
                break
            self._finish(queue.pop(), pool)
        while queue:  # batches scheduled past the last finish: run for nothing, off the pass's clock
            self._finish(queue.pop(), pool, clock=False)

    def run(self) -> dict[str, Any]:
        """Send, schedule and finish every request; the figures of the pass."""
        start, cpu = time.monotonic(), time.process_time()
        pool = self.sched.kv_cache_manager.block_pool
        if self.replay.batch_queue > 1:
            self._run_batch_queue(pool)
        else:
            self._run_sync(pool)
        preemptions = sum(int(getattr(r, "num_preemptions", 0)) for r in self.reqs.values())
        now = self.now
        return {
            "requests": len(self.items), "steps": self.steps, "wall_time_s": now, "prefill_time_s": self.prefill_time,
            "prefix_cache_queries": self.counts["queries"], "prefix_cache_hits": self.counts["hits"],
            "preempted_queries": self.counts["preempted_queries"], "preempted_hits": self.counts["preempted_hits"],
            "preemptions": preemptions, "kv_peak_fraction": self.peak,
            "kv_mean_fraction": self.usage_time / now if now > 0 else 0.0, "running_peak": self.running_peak,
            "arrival_s": self.arrival, "first_token_s": self.first, "finish_s": self.finish,
            "first_token_hop_s": self.arrivals.hop, "first_token_seen_s": self.seen,
            "output_tokens": self.outputs, "seconds": round(time.monotonic() - start, 3),
            "cpu_seconds": round(time.process_time() - cpu, 3), "process": os.getpid(),
        }


def cpu_platform(platforms: Any, modules: dict[str, Any]) -> str:
    """Make vLLM's CPU platform the current one; how it came to be (for the answer).

    0.32 and 0.33 pick it from VLLM_TARGET_DEVICE=cpu (cpu_platform_plugin). 0.25 and 0.26 read that variable
    only when built: they take the host's platform (a GPU host's CUDA, else UnspecifiedPlatform, on which
    VllmConfig() stops at "Failed to infer device type"), and `import vllm` resolves it already
    (utils.torch_utils asks is_pin_memory_available). There the CPU platform replaces it in the lazy
    current_platform's own store (platforms._current_platform) and in every module imported so far that bound
    the old one by name (`from vllm.platforms import current_platform`); modules imported later get the new one.
    modules: sys.modules.
    """
    current = platforms.current_platform
    if getattr(current, "device_type", None) == "cpu":
        return "cpu"
    from vllm.platforms.cpu import CpuPlatform  # noqa: PLC0415

    cpu = CpuPlatform()
    platforms._current_platform = cpu  # what platforms.__getattr__ hands out
    for module in list(modules.values()):  # each module's own names: no lazy __getattr__ is woken
        if module is not platforms and getattr(module, "__dict__", {}).get("current_platform") is current:
            module.current_platform = cpu
    return f"cpu (in place of {type(current).__name__})"


def _setup(req: dict[str, Any], answer: dict[str, Any]) -> Replay:
    """The engine's version, the CPU platform, then the set-up replay."""
    answer["engine_version"] = kv_plan.engine_version()
    answer["platform"] = cpu_platform(importlib.import_module("vllm.platforms"), sys.modules)
    return Replay(req)


def _done(r: Replay, answer: dict[str, Any]) -> None:
    """The scheduler class and batches in flight of a successful answer."""
    answer["scheduler"] = answer["kv"]["scheduler"] if answer["kv"] else None
    answer["batch_queue"] = r.batch_queue


def replay(req: ReplayRequest) -> ReplayAnswer:
    """Every seat count of the request; errors (an engine refusal included) come back as text."""
    # The replay runs no kernel: vLLM's CPU platform answers its config hooks on any host, and no GPU is touched
    # (0.33 on a host without a device it knows stops at "Failed to infer device type" without it).
    return shared.replay(req, {"VLLM_TARGET_DEVICE": "cpu"}, _setup, _done)


if __name__ == "__main__":
    raise SystemExit(protocol.serve(protocol.each(replay)))
