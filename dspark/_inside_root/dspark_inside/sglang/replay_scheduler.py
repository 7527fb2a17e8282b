"""`python -m dspark_inside.sglang.replay_scheduler`: a workload through the installed SGLang's own Scheduler, no model.

shapes.ReplayRequest (or a list) -> ReplayAnswer (or a list, from one engine import). SGLang is imported only when
a request is replayed (dspark's tests import this module without it); the engine-neutral half is replay.py.

What is SGLang's own code here: the Scheduler class itself, made with object.__new__ and given the state its
__init__ would give it, except for what __init__ gets from the model worker (init_model_worker: the weights,
the KV tensors, the attention backends, CUDA graphs). Its pools are SGLang's classes sized to dspark's plan:
ReqToTokenPool (HybridReqToTokenPool with its MambaPool and slot allocator for hybrid GDN/Mamba models, each
state slot one element wide), the token-to-KV allocator (TokenToKVPoolAllocator, or PagedTokenToKVPoolAllocator
for pages > 1) of max_total_num_tokens, and the tree cache create_tree_cache picks for them in this release
(UnifiedRadixCache with its FULL component, and MAMBA for hybrids). Each step is the Scheduler's own
get_next_batch_to_run (SchedulePolicy.calc_priority, PrefillAdder admission with the new-token ratio, chunked
prefill, the min-free-slots delayer DFlash turns on, update_running_batch's check_decode_mem / retract_decode,
ScheduleBatch.prepare_for_extend / prepare_for_decode and, with speculation, the EAGLE / DFLASH decode
over-allocation), then its SchedulerBatchResultProcessor on a made-up forward result (the output tokens,
finish checks, release_kv_cache / checkpoint into the radix cache). Figures are SGLang's: the prefix hits
and prompt tokens each prefill batch's PrefillStats reports (what sglang:cache_hit_rate is computed from),
SchedulerPoolStatsObserver's max pool usage (sglang:token_usage) after each step, the retractions
update_running_batch reports.

What dspark does: the forward pass (a made-up token per request per decode step; with speculation the
accepted length of each verify step, 1 + accepted drafts from a fixed pattern whose mean is the advisor's
accepted-token rate), the event loop around the Scheduler's methods (event_loop_normal's order: requests
arrive, get_next_batch_to_run, the result processed; non-overlapped: overlap scheduling only delays
result processing by one step), the clock (each step costs the advisor's step cost for what the batch
holds) and the arrivals on it. Metrics, IPC, the tokenizer, grammars, LoRA, disaggregation, HiCache, the
output streamer and the draft model's own state are not built: stubs that do nothing stand in for them.

request (shapes.ReplayRequest): engine: {context_len, page_size, chunked_prefill_size, max_prefill_tokens,
    schedule_policy (null: SGLang's default), disable_radix_cache, overlap_schedule (what the pools are sized for:
    tracking slots), speculative: null | {algorithm, num_steps, eagle_topk, num_draft_tokens}, mamba: null |
    {strategy}}; plans: {"<seats>": {max_total_tokens, max_running_requests, max_mamba_cache_size}}; trace.
answer: shapes.ReplayAnswer; kv: {max_total_tokens, page_size, tree_cache, allocator, req_to_token_pool,
mamba_slots}; preemptions are retractions, the KV fractions SGLang's token_usage; each pass also has
cached_tokens (each request's Req.cached_tokens).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import sys
import time
import types
from array import array
from typing import Any

from dspark_inside import protocol
from dspark_inside import replay as shared
from dspark_inside.shapes import ReplayAnswer, ReplayRequest
from dspark_inside.step_cost import step_seconds

_TOKEN = 1  # the made-up sampled and draft token: its value only feeds the radix keys past the prompt


_STOOD_IN: list[str] = []
_PREPARED: list[bool] = []  # once per process


def _noop(*_a: Any, **_k: Any) -> None:
    """What a stubbed collaborator does: nothing."""


def _prepare() -> None:
    """The witness's torchvision shim, and a stand-in for setproctitle where it is missing (the scheduler module
    imports it to name its process; nothing here reads it); once per process."""
    if _STOOD_IN or _PREPARED:
        return
    _PREPARED.append(True)
    # The witness's shims (torchvision has no CPU build on the package index; SGLang imports it for image
    # preprocessing only).
    from dspark_inside.sglang import witness  # noqa: PLC0415

    if importlib.util.find_spec("torchvision") is None:
        _STOOD_IN.append("torchvision")
    witness.shim_torchvision()
    if importlib.util.find_spec("setproctitle") is None:
        stand_in = types.ModuleType("setproctitle")
        stand_in.setproctitle = _noop  # type: ignore[attr-defined]
        stand_in.getproctitle = lambda: ""  # type: ignore[attr-defined]
        sys.modules["setproctitle"] = stand_in
        _STOOD_IN.append("setproctitle")


def _unpinned(torch: Any) -> None:
    """Tensor.pin_memory as the identity on a host without an accelerator (it raises there): SGLang pins the
    host copies of its batch masks before moving them to the device, a transfer hint with no effect on a
    figure."""
    if torch.cuda.is_available() or getattr(torch.Tensor.pin_memory, "_dspark", False):
        return

    def pin_memory(self: Any, *_a: Any, **_k: Any) -> Any:
        return self

    pin_memory._dspark = True  # type: ignore[attr-defined]
    torch.Tensor.pin_memory = pin_memory
    _STOOD_IN.append("torch.Tensor.pin_memory")


def _host_index_writes() -> None:
    """assign_req_to_token_pool (a Triton kernel, launched for the speculative decode over-allocation) as the
    same copy in torch: each request's new KV indices written into its req_to_token row."""
    from sglang.srt.mem_cache import allocation  # noqa: PLC0415

    if getattr(allocation.assign_req_to_token_pool_func, "_dspark", False):
        return

    def assign(req_pool_indices: Any, req_to_token: Any, start_offset: Any, end_offset: Any, out_cache_loc: Any,
               batch_size: int) -> None:
        starts, ends = start_offset.tolist(), end_offset.tolist()
        rows = req_pool_indices.tolist()
        offset = 0
        for i in range(batch_size):
            n = ends[i] - starts[i]
            if n > 0:
                req_to_token[rows[i], starts[i]:ends[i]] = out_cache_loc[offset:offset + n].to(req_to_token.dtype)
                offset += n

    assign._dspark = True  # type: ignore[attr-defined]
    allocation.assign_req_to_token_pool_func = assign
    _STOOD_IN.append("allocation.assign_req_to_token_pool_func (a Triton kernel)")


def engine_version() -> str:
    """The installed SGLang's version."""
    from sglang.version import __version__  # noqa: PLC0415

    return str(__version__)


class _Reporter:
    """The metrics reporter's fields the scheduling and result paths read and write, metrics off; its methods
    (report_prefill_stats, update_spec_metrics, ...) do nothing."""

    enable_metrics = current_scheduler_metrics_enabled = is_stats_logging_rank = False
    metrics_collector = stats = scheduler_stage_metrics = None

    def __init__(self) -> None:
        self.num_retracted_reqs = self.num_generated_tokens = self.forward_ct_decode = 0
        self.spec_total_num_accept_tokens = self.spec_total_num_forward_ct = 0
        self.last_gen_throughput = self.recent_cache_hit_rate = 0.0

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _noop


class Replay:
    """SGLang's Scheduler on the plan's pools, rebuilt per seat count; SGLang is imported once."""

    def __init__(self, req: dict[str, Any]) -> None:
        self.req = req
        self.engine = req["engine"]
        self.plans = {int(k): v for k, v in (req.get("plans") or {}).items()}
        self.pattern = [int(a) for a in req.get("accepted_pattern") or [0]]
        _prepare()
        import torch  # noqa: PLC0415

        torch.set_num_threads(1)  # tiny tensors only; one thread each, and safe to fork
        _unpinned(torch)
        _host_index_writes()
        from sglang.srt.managers import scheduler  # noqa: PLC0415, F401 - imported before workers fork
        from sglang.srt.mem_cache import unified_radix_cache  # noqa: PLC0415, F401

        logging.disable(logging.WARNING)  # retractions log a warning each; they are counted instead

    def plan(self, seats: int) -> dict[str, Any]:
        """dspark's pool at `seats`: max_total_tokens, max_running_requests, max_mamba_cache_size."""
        if seats not in self.plans:
            raise ValueError(f"no plan for {seats} seats (plans for {sorted(self.plans)})")
        return dict(self.plans[seats])

    def server_args(self, seats: int) -> Any:
        """ServerArgs with the plan's resolved settings, published as the scheduler publishes them.

        model_path "dummy" is SGLang's own no-model path: resolution takes the settings as given (they are the
        ones dspark resolved for the target). The attention backend is torch_native so that the allocator's
        index writes take their torch path on this host (no Triton kernel runs); it decides no figure.
        """
        from sglang.srt import runtime_context  # noqa: PLC0415
        from sglang.srt.server_args import ServerArgs  # noqa: PLC0415

        e, p = self.engine, self.plan(seats)
        spec = e.get("speculative") or {}
        mamba = e.get("mamba") or {}
        values: dict[str, Any] = {
            "model_path": "dummy", "device": "cpu", "attention_backend": "torch_native",
            "page_size": int(e["page_size"]), "context_length": int(e["context_len"]),
            "max_running_requests": int(p["max_running_requests"]), "max_total_tokens": int(p["max_total_tokens"]),
            "chunked_prefill_size": int(e["chunked_prefill_size"]),
            "disable_radix_cache": bool(e.get("disable_radix_cache")), "disable_overlap_schedule": True,
            "skip_tokenizer_init": True,
        }
        if e.get("max_prefill_tokens"):
            values["max_prefill_tokens"] = int(e["max_prefill_tokens"])
        if e.get("schedule_policy"):
            values["schedule_policy"] = e["schedule_policy"]
        if e.get("enable_mixed_chunk"):
            values["enable_mixed_chunk"] = True
        if spec:
            values.update(speculative_algorithm=spec["algorithm"], speculative_num_steps=spec.get("num_steps"),
                          speculative_eagle_topk=spec.get("eagle_topk"),
                          speculative_num_draft_tokens=spec.get("num_draft_tokens"))
        if mamba:
            values["mamba_radix_cache_strategy"] = mamba.get("strategy") or "no_buffer"
            if p.get("max_mamba_cache_size"):
                values["max_mamba_cache_size"] = int(p["max_mamba_cache_size"])
        sa = ServerArgs(**values)
        if mamba:
            # What mamba_cache_chunk_size would read from the model's config (SGLang's own fixtures seed it so,
            # for a model they do not load): its mamba_chunk_size, else the FLA kernels' chunk, at least a page.
            sa._mamba_cache_chunk_size = max(int(mamba.get("chunk_size") or _fla_chunk_size()), int(e["page_size"]))
        runtime_context.publish(sa, role="scheduler", ranks=runtime_context.SpawnRanks(world_rank=0, gpu_id=0))
        # What init_model_worker overrides once the worker reports its seats.
        runtime_context.get_context().override("scheduler.pp_max_micro_batch_size_default",
                                               pp_max_micro_batch_size=max(int(p["max_running_requests"]), 1))
        return sa

    def pools(self, seats: int) -> tuple[Any, Any, Any, dict[str, Any]]:
        """(req_to_token_pool, allocator, tree cache, what they are) at `seats`, as kv_cache_configurator and
        create_tree_cache build them for this plan; state slots hold one element each (no model runs)."""
        import torch  # noqa: PLC0415
        from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len  # noqa: PLC0415
        from sglang.srt.mem_cache.allocator import (  # noqa: PLC0415
            PagedTokenToKVPoolAllocator,
            TokenToKVPoolAllocator,
        )
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: PLC0415
        from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool, ReqToTokenPool  # noqa: PLC0415
        from sglang.srt.mem_cache.unified_cache.components import ComponentType  # noqa: PLC0415
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache  # noqa: PLC0415
        from sglang.srt.runtime_context import get_exec, get_spec, max_speculative_num_draft_tokens  # noqa: PLC0415

        e, p = self.engine, self.plan(seats)
        page, tokens, mrr = int(e["page_size"]), int(p["max_total_tokens"]), int(p["max_running_requests"])
        row = int(e["context_len"]) + get_req_to_token_extra_context_len()
        mamba = e.get("mamba")
        if mamba:
            size = int(p.get("max_mamba_cache_size") or 0)
            if size <= 0:
                raise ValueError("a hybrid plan without Mamba state slots (max_mamba_cache_size)")
            req_pool: Any = HybridReqToTokenPool(
                size=mrr, mamba_size=size, mamba_spec_state_size=mrr, max_context_len=row, device="cpu",
                enable_memory_saver=False, cache_params=_one_element_state(), mamba_layer_ids=[0],
                enable_mamba_extra_buffer=get_exec().mamba.enable_mamba_extra_buffer,
                enable_mamba_extra_buffer_lazy=get_exec().mamba.enable_mamba_extra_buffer_lazy,
                speculative_num_draft_tokens=max_speculative_num_draft_tokens(),
                speculative_eagle_topk=get_spec().speculative_eagle_topk,
                enable_overlap_schedule=bool(e.get("overlap_schedule", True)))
        else:
            req_pool = ReqToTokenPool(size=mrr, max_context_len=row, device="cpu", enable_memory_saver=False)
        kv = types.SimpleNamespace()  # the KV tensors: none (the allocator only hands out their indices)
        if page == 1:
            allocator: Any = TokenToKVPoolAllocator(tokens, dtype=torch.bfloat16, device="cpu", kvcache=kv,
                                                    need_sort=False)
        else:
            allocator = PagedTokenToKVPoolAllocator(tokens, page_size=page, dtype=torch.bfloat16, device="cpu",
                                                    kvcache=kv, need_sort=False)
        components = (ComponentType.FULL, ComponentType.MAMBA) if mamba else (ComponentType.FULL,)
        spec = e.get("speculative") or {}
        params = CacheInitParams(
            disable=bool(e.get("disable_radix_cache")), req_to_token_pool=req_pool,
            token_to_kv_pool_allocator=allocator, page_size=page,
            is_eagle=str(spec.get("algorithm") or "").upper() in ("EAGLE", "EAGLE3", "NEXTN"),
            enable_mamba_extra_buffer=get_exec().mamba.enable_mamba_extra_buffer,
            enable_mamba_extra_buffer_lazy=get_exec().mamba.enable_mamba_extra_buffer_lazy,
            chunked_prefill_size=int(e["chunked_prefill_size"]), tree_components=components)
        tree = UnifiedRadixCache(params)
        info = {"max_total_tokens": tokens, "page_size": page, "tree_cache": type(tree).__name__,
                "tree_components": [c.name for c in components], "allocator": type(allocator).__name__,
                "req_to_token_pool": type(req_pool).__name__, "max_running_requests": mrr,
                "mamba_slots": int(p.get("max_mamba_cache_size") or 0) if mamba else None}
        return req_pool, allocator, tree, info

    def scheduler(self, seats: int) -> tuple[Any, Any, dict[str, Any]]:
        """A Scheduler without its model worker, on fresh pools (empty radix cache), and its result processor."""
        from sglang.srt.managers.scheduler import Scheduler  # noqa: PLC0415
        from sglang.srt.runtime_context import get_schedule  # noqa: PLC0415

        sa = self.server_args(seats)
        pools = self.pools(seats)
        s = object.__new__(Scheduler)
        schedule = get_schedule()
        _published_fields(s, sa, schedule, int(self.engine["page_size"]))
        slots = _worker_fields(s, self.plan(seats), self.engine, schedule, pools[:3])
        # SGLang's own initialisers, where they need no model.
        s.init_running_status()
        _chunked_prefill(s, schedule)
        s.dynamic_chunk_sizer = None
        s.init_schedule_policy()
        s.init_mamba_truncation_align()
        s.init_beam_coordinator()
        s.init_pool_stats_observer()
        _stand_ins(s)
        info = {**pools[3], "min_free_slots": slots, "schedule_policy": s.schedule_policy}
        return s, _result_processor(s), info

    def run(self, seats: int) -> dict[str, Any]:
        """The cold pass, then the warm one when asked, on one scheduler (the warm pass finds the cold's cache)."""
        sched, processor, info = self.scheduler(seats)
        cold = _Pass(self, sched, processor, "c").run()
        warm = _Pass(self, sched, processor, "w").run() if self.req.get("warm") else None
        return {"seats": seats, "cold": cold, "warm": warm, "kv": info}


def _published_fields(s: Any, sa: Any, schedule: Any, page_size: int) -> None:
    """What Scheduler.__init__ reads from the published args before it builds the model worker."""
    from sglang.srt.disaggregation.utils import DisaggregationMode  # noqa: PLC0415
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: PLC0415

    s.server_args = sa
    s.forward_ct = 0
    s.processed_tokens_counter = 0
    s.schedule_policy = schedule.schedule_policy
    s.enable_priority_scheduling = schedule.enable_priority_scheduling
    s.schedule_low_priority_values_first = schedule.schedule_low_priority_values_first
    s.priority_scheduling_preemption_threshold = schedule.priority_scheduling_preemption_threshold
    s.abort_on_priority_when_disabled = schedule.abort_on_priority_when_disabled
    s.enable_lora = False
    s.enable_overlap = s.enable_overlap_mlx = False
    s.spec_algorithm = SpeculativeAlgorithm.from_string(sa.speculative_algorithm)
    s.page_size = page_size
    s.enable_hierarchical_cache = s.enable_lmcache = s.enable_hicache_storage = False
    s.enable_unified_cache_external_linker = s.enable_hisparse = s.enable_unified_memory = False
    s.max_new_tokens_limit = None
    s.disaggregation_mode = DisaggregationMode.NULL
    s.dllm_config = None
    s.scheduler_stage_metrics = None
    s.metrics_reporter = _Reporter()
    s.metrics_collector = None
    s.require_mlp_sync = False
    s.truncation_align_size = None


def _worker_fields(s: Any, plan: dict[str, Any], engine: dict[str, Any], schedule: Any,
                   pools: tuple[Any, Any, Any]) -> int | None:
    """What init_model_worker and the KV-cache build give the Scheduler, with the plan's pool in place of the
    model's; the min-free-slots threshold (None: off)."""
    from sglang.srt.managers.min_free_slots_delayer import (  # noqa: PLC0415
        MinFreeSlotsDelayer,
        resolve_min_free_slots,
    )

    mrr, tokens, context = int(plan["max_running_requests"]), int(plan["max_total_tokens"]), int(engine["context_len"])
    s.model_config = types.SimpleNamespace(
        vocab_size=1 << 20, is_encoder_decoder=False, is_multimodal=False, context_len=context,
        hf_text_config=types.SimpleNamespace(), self_opened_think_start_ids=None, think_end_ids=None)
    s.tp_worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(attn_backend=object(),
                                                                           prefill_aware_swa=False))
    s.draft_worker = s.model_worker = None
    s.max_total_num_tokens, s.max_running_requests = tokens, mrr
    s.max_prefill_tokens = schedule.max_prefill_tokens
    s.max_queued_requests = schedule.max_queued_requests
    s.max_req_len = min(context - 1, tokens - 1)  # TpModelWorker.get_worker_info
    s.max_req_input_len = s.max_req_len - 5
    slots = resolve_min_free_slots(schedule.min_free_slots_delay, mrr,
                                   is_dflash_family=s.spec_algorithm.is_dflash_family())
    s.min_free_slots_delayer = MinFreeSlotsDelayer(min_free_slots=slots) if slots is not None else None
    s.req_to_token_pool, s.token_to_kv_pool_allocator, s.tree_cache = pools
    s.is_hybrid_swa, s.is_hybrid_ssm = False, bool(engine.get("mamba"))
    s.sliding_window_size = s.full_tokens_per_layer = s.swa_tokens_per_layer = None
    s.kv_shard_widening = 1
    s.disable_radix_cache = bool(engine.get("disable_radix_cache"))
    s.hisparse_coordinator = s.decode_offload_manager = None
    s.future_map = None
    return int(slots) if slots is not None else None


def _stand_ins(s: Any) -> None:
    """Do-nothing stand-ins for what serves the outside world or needs the model's runner; aborts are kept."""
    s.grammar_manager = types.SimpleNamespace(has_waiting_grammars=lambda: False, __len__=lambda: 0)
    s.dp_attn_adapter = types.SimpleNamespace(maybe_prepare_mlp_sync_batch=lambda b, need_sync=False: b,
                                              maybe_convert_decode_to_extend=lambda b: b)
    s.ngram_embedding_manager = types.SimpleNamespace(prepare_for_forward=lambda b, chunked_req=None: b)
    s.load_inquirer = types.SimpleNamespace(_get_num_pending_tokens=lambda chunk_deduct=0: 0)
    aborted: list[str] = []
    s.send_abort_output = lambda _abort, req: aborted.append(req.rid)
    s.dspark_aborted = aborted


def _result_processor(s: Any) -> Any:
    """SGLang's SchedulerBatchResultProcessor over the scheduler's pools; output streaming does nothing."""
    from sglang.srt.managers.scheduler_components.batch_result_processor import (  # noqa: PLC0415
        SchedulerBatchResultProcessor,
    )

    return SchedulerBatchResultProcessor(
        is_generation=True, disaggregation_mode=s.disaggregation_mode, enable_overlap=False,
        enable_overlap_mlx=False, model_config=s.model_config, token_to_kv_pool_allocator=s.token_to_kv_pool_allocator,
        tree_cache=s.tree_cache, hisparse_coordinator=None, req_to_token_pool=s.req_to_token_pool,
        decode_offload_manager=None, metrics_collector=None, metrics_reporter=s.metrics_reporter, draft_worker=None,
        model_worker=types.SimpleNamespace(on_verify_complete_cpu=_noop), logprob_result_processor=None,
        output_streamer=types.SimpleNamespace(stream_output=_noop), beam_coordinator=s.beam_coordinator,
        abort_request=_noop)


def _chunked_prefill(s: Any, schedule: Any) -> None:
    """Scheduler.init_chunked_prefill's fields (it also asks the model's implementation, which is not loaded)."""
    size = schedule.chunked_prefill_size
    s.chunked_prefill_size = size if size is not None and size > 0 else None
    s.prefill_decode_interval = schedule.prefill_decode_interval or 0
    s._prefill_decode_interval_remaining = 0
    s.prefill_decode_interval_min_bs = schedule.prefill_decode_interval_min_bs
    s.chunked_req = None
    s._pending_chunked_abort_req = None
    s.is_mixed_chunk = s.chunked_prefill_size is not None and schedule.enable_mixed_chunk


def _fla_chunk_size() -> int:
    """The FLA kernels' chunk (mamba_cache_chunk_size's default for a config without mamba_chunk_size)."""
    try:
        from sglang.kernels.ops.attention.fla.chunk_delta_h import CHUNK_SIZE  # noqa: PLC0415
    except ImportError:
        return 64  # what mamba_cache_chunk_size falls back to
    return int(CHUNK_SIZE)


def _one_element_state() -> Any:
    """Mamba2 cache parameters of one layer whose conv and SSM states are a few elements: the pool's slots are
    allocated and tracked by SGLang's MambaPool, their contents are never read."""
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape  # noqa: PLC0415

    shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=1, n_groups=1, num_heads=1, head_dim=1,
                                    state_size=1, conv_kernel=2)
    return Mamba2CacheParams(shape=shape, layers=[0])


class _Pass:
    """One pass of the workload through the scheduler, on a virtual clock starting at 0."""

    def __init__(self, replay: Replay, sched: Any, processor: Any, tag: str) -> None:
        self.replay, self.sched, self.processor, self.tag = replay, sched, processor, tag
        self.items = replay.req["requests"]
        self.cost = replay.req["step_cost"]
        spec = replay.engine.get("speculative") or {}
        self.stride = int(spec.get("num_draft_tokens") or 0)
        self.dflash = str(spec.get("algorithm") or "").upper() == "DFLASH"
        n = len(self.items)
        self.arrival = [math.nan] * n
        self.first = [math.nan] * n
        self.seen = [math.nan] * n  # when its client has the first token
        self.finish = [math.nan] * n
        self.outputs = [0] * n
        self.cached = [0] * n
        self.live: dict[int, Any] = {}
        self.decode_steps: dict[str, int] = {}
        self.arrivals = shared.Arrivals(replay.req["arrivals"], n, self.cost)
        self.now = self.prefill_time = self.usage_time = self.peak = 0.0
        self.steps = self.running_peak = self.done = self.retracted = 0
        self.hits = self.queries = 0
        self.trace: list[list[Any]] | None = [] if replay.req.get("trace") else None

    def _request(self, i: int) -> Any:
        """Req as _handle_generate_request makes it for token ids (no tokenizer: SamplingParams normalised
        without one), its max_new_tokens capped as init_req_max_new_tokens caps it."""
        from sglang.srt.managers.schedule_batch import Req  # noqa: PLC0415
        from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: PLC0415

        item = self.items[i]
        params = SamplingParams(max_new_tokens=int(item["max_tokens"]), ignore_eos=True)
        params.normalize(None)
        req = Req(f"{self.tag}{i}", "", array("q", item["prompt"]), params)
        self.sched.init_req_max_new_tokens(req)
        self.arrival[i] = self.now
        self.live[i] = req
        return req

    def _result(self, batch: Any) -> Any:
        """The model's output for a batch: one token per request, or with speculation a verify step's accepted run."""
        import torch  # noqa: PLC0415
        from sglang.srt.managers.utils import GenerationBatchResult  # noqa: PLC0415

        bs = len(batch.reqs)
        if not batch.forward_mode.is_decode() or not self.stride:
            return GenerationBatchResult(next_token_ids=torch.full((bs,), _TOKEN, dtype=torch.int64))
        pattern = self.replay.pattern
        lens = []
        for req in batch.reqs:
            k = self.decode_steps.get(req.rid, 0)
            self.decode_steps[req.rid] = k + 1
            lens.append(1 + min(pattern[k % len(pattern)], self.stride - 1))
        return GenerationBatchResult(
            next_token_ids=torch.full((bs * self.stride,), _TOKEN, dtype=torch.int64),
            accept_lens=torch.tensor(lens, dtype=torch.int64), speculative_num_draft_tokens=self.stride)

    def _shape(self, batch: Any) -> tuple[int, float, int, float]:
        """(decoding rows, context tokens the step reads, prompt tokens computed, the prompt chunks' (query, key)
        pairs) of a scheduled batch."""
        if batch.forward_mode.is_decode():
            return len(batch.reqs), float(sum(r.kv.kv_committed_len for r in batch.reqs)), 0, 0.0
        prefill = int(batch.extend_num_tokens or 0)
        context = float(sum(batch.prefix_lens or ()))
        decoding = {id(r) for r in batch.decoding_reqs or ()}  # mixed chunked prefill's decode rows
        # Each chunk of n tokens after a prefix of p attends to n·(p + n/2) keys: a batch of several prompts is
        # not one prompt of their summed length (which step_cost assumes when it is not told).
        pairs = math.fsum(n * (p + n / 2) for r, p, n in zip(batch.reqs, batch.prefix_lens or (),
                                                             batch.extend_lens or (), strict=False)
                          if id(r) not in decoding)
        rows = len(decoding)
        return rows, context, prefill - rows, pairs

    def _draft_state(self, batch: Any) -> None:
        """What the DFLASH worker leaves on a batch it prefilled: its draft input, relayed per request by index
        (future_indices, as spec-v2 relays it), whose prepare_for_decode is SGLang's own over-allocation for the
        next verify block; its tensors are never read here."""
        if not self.dflash or batch.spec_info is not None:
            return
        import torch  # noqa: PLC0415
        from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2  # noqa: PLC0415

        info = DFlashDraftInputV2.create_idle_input("cpu")
        info.future_indices = torch.arange(len(batch.reqs), dtype=torch.int64)
        info.nxt_kv_lens_cpu = torch.tensor([r.kv.kv_allocated_len for r in batch.reqs], dtype=torch.int32)
        info.nxt_kv_lens_sum = int(info.nxt_kv_lens_cpu.sum())
        batch.spec_info = info

    def _record(self) -> None:
        """First tokens and finishes after a step; they reach their clients through the API server, and a
        closed-loop client sends its next request once it has its last token."""
        streamed = finished = 0
        firsts: list[int] = []
        for i, req in list(self.live.items()):
            if req.output_ids:
                streamed += 1  # every seat past its prompt streams a token a step
                if math.isnan(self.first[i]):
                    self.first[i] = self.now
                    firsts.append(i)
            if req.finished():
                self.finish[i] = self.now
                self.outputs[i] = len(req.output_ids_through_stop)
                self.cached[i] = int(req.cached_tokens)
                self.done += 1
                finished += 1
                del self.live[i]
        if streamed or finished:
            seen = self.arrivals.stepped(self.now, streamed, finished)
            for i in firsts:
                self.seen[i] = seen

    def _step(self) -> bool:
        """get_next_batch_to_run -> made-up forward -> the batch result processor, on the clock; False: idle."""
        s = self.sched
        plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
        s.running_batch = plan.running_batch
        batch = plan.batch_to_run
        self.retracted += s.metrics_reporter.num_retracted_reqs
        s.metrics_reporter.num_retracted_reqs = 0
        if s.dspark_aborted:
            raise RuntimeError(f"SGLang aborted request(s) {s.dspark_aborted[:3]}: the pool cannot hold them")
        if batch is None:
            s.last_batch = None
            return False
        s.forward_ct += 1
        batch.forward_iter = s.forward_ct
        rows, context, prefill, pairs = self._shape(batch)
        if batch.forward_mode.is_extend() and batch.prefill_stats is not None:
            st = batch.prefill_stats  # as the metrics reporter turns it into sglang:cache_hit_rate
            hits = st.log_hit_tokens - st.reprocessed_log_hit_tokens
            self.hits += hits
            self.queries += st.log_input_tokens - st.reprocessed_log_input_tokens + hits
        if batch.extend_num_tokens:
            s.processed_tokens_counter += batch.extend_num_tokens
        if self.trace is not None and batch.forward_mode.is_extend():
            self.trace.append([[r.rid, int(r.prefix_len), int(r.extend_end)] for r in batch.reqs])
        dt = step_seconds(self.cost, rows, context, prefill, pairs)
        self.now += dt
        self.prefill_time += prefill * self.cost["prefill_per_token_s"]
        self.steps += 1
        self.running_peak = max(self.running_peak, len(batch.reqs))
        result = self._result(batch)
        if batch.forward_mode.is_decode():
            self.processor.process_batch_result_decode(batch, result)
        else:
            self.processor.process_batch_result_prefill(batch, result)
        self._draft_state(batch)
        s.last_batch = batch
        usage = s.pool_stats_observer.get_pool_stats().get_max_pool_usage()
        self.peak = max(self.peak, usage)
        self.usage_time += usage * dt
        self._record()
        return True

    def run(self) -> dict[str, Any]:
        """Send, schedule and finish every request; the figures of the pass."""
        start, cpu = time.monotonic(), time.process_time()
        s = self.sched
        while self.done < len(self.items):
            for i in self.arrivals.due(self.now):
                s._add_request_to_queue(self._request(i))
            if self._step():
                continue
            if self.arrivals.pending:
                # idle until the next arrival, and the engine's wake-up (intake_s) after it
                self.now = max(self.now, self.arrivals.next_at() + self.arrivals.intake)
            elif self.live:
                raise RuntimeError(f"the scheduler scheduled nothing at step {self.steps} with "
                                   f"{len(s.waiting_queue)} request(s) waiting (a prompt longer than the pool?)")
            else:
                break
        now = self.now
        return {
            "requests": len(self.items), "steps": self.steps, "wall_time_s": now, "prefill_time_s": self.prefill_time,
            "prefix_cache_queries": self.queries, "prefix_cache_hits": self.hits, "preemptions": self.retracted,
            "kv_peak_fraction": self.peak, "kv_mean_fraction": self.usage_time / now if now > 0 else 0.0,
            "running_peak": self.running_peak, "arrival_s": self.arrival, "first_token_s": self.first,
            "first_token_hop_s": self.arrivals.hop, "first_token_seen_s": self.seen,
            "finish_s": self.finish, "output_tokens": self.outputs, "cached_tokens": self.cached,
            "seconds": round(time.monotonic() - start, 3),
            "cpu_seconds": round(time.process_time() - cpu, 3), "process": os.getpid(),
            **({"trace": self.trace} if self.trace is not None else {}),
        }


def _setup(req: dict[str, Any], answer: dict[str, Any]) -> Replay:
    """The set-up replay, then the engine's version and what stands in for a missing piece."""
    r = Replay(req)
    answer["engine_version"] = engine_version()
    answer["stood_in"] = list(_STOOD_IN)
    return r


def replay(req: ReplayRequest) -> ReplayAnswer:
    """Every seat count of the request; errors (an engine refusal included) come back as text."""
    # Nothing here reads a model; a lookup that tried would wait on the network for minutes.
    return shared.replay(req, {"HF_HUB_OFFLINE": "1"}, _setup)


if __name__ == "__main__":
    raise SystemExit(protocol.serve(protocol.each(replay)))
