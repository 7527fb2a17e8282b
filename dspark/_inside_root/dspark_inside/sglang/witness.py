"""`python -m dspark_inside.sglang.witness`: SGLang's own KV-pool sizing, in-process, with no GPU (the witness).

shapes.SglangSizingCase (or a list) -> WitnessAnswer (or a list); also run in the argv check's process at
`start`. The sizing itself (run_case) is also the sizing tool's (sglang.sizing: the tests and the version matrix).

Per case it builds ``ServerArgs`` (the engine's whole resolution pipeline: mem_fraction_static, chunked
prefill, CUDA-graph sizes, speculative defaults), publishes it, builds ``ModelConfig.from_server_args`` on a
config-only model directory, makes a ``ModelRunner`` with ``object.__new__`` and runs the release's
``_resolve_memory_pool_config`` (``KVCacheConfigurator``'s from 0.5.16, the ModelRunner mixin's before). Any
release from 0.5.10 on: what differs per release is found by what the release has, not by its number (its
``override_platform`` or, without one, its platform probes rebound; ``SpawnRanks`` or not, the WORLD group's
home, the arguments of ``resolve_layer_indices``, the sizing path: sglang.compat), so one module
serves ``dspark start`` and the matrix. A release with no sizing function it knows is refused by name.

Stubbed, and nothing else: the GPU memory readings (``torch.cuda.mem_get_info``: free before and
after the weights, dspark's readings), the collectives (``all_reduce`` is the identity: every rank alike;
the float32 tensor SGLang reduces through is kept), nvidia-smi's ``memory.total`` (MiB), the platform (CUDA,
the given compute capability) and the WORLD group handle (0.5.10-0.5.18: stand-in process groups).
``torchvision`` has no CPU build on the package index, and SGLang imports it at module level only for
multimodal preprocessing: shim modules stand in for it; likewise ``sgl_kernel`` where a release imports it at
module level on any host (0.5.10; no kernel runs while sizing, and each answer lists what stood in). The
process must not go on to serve: it only sizes.

A case's argv goes through SGLang's own parser (ServerArgs.add_cli_args, ServerArgs.from_cli_args) with
``--device cuda`` appended.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import subprocess
import sys
import traceback
import types
from collections.abc import Mapping
from typing import Any

from dspark_inside import checks, protocol
from dspark_inside.sglang import compat
from dspark_inside.shapes import SglangSizingCase, WitnessAnswer

_TORCHVISION = ("torchvision", "torchvision.transforms", "torchvision.transforms.functional",
                "torchvision.transforms.v2", "torchvision.transforms.v2.functional", "torchvision.io",
                "torchvision.ops")


class _Any(type):
    """A class whose every attribute is another such class (InterpolationMode.BICUBIC and the like)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any(name, (), {})


def shim_torchvision() -> None:
    """Stand-ins for torchvision in sys.modules (imported by SGLang for image transforms only); idempotent."""
    import transformers  # noqa: F401, PLC0415 - decides torchvision is absent before the shim exists

    def getattr_(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Any(attr, (), {})

    for name in _TORCHVISION:
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = []
            mod.__getattr__ = getattr_  # type: ignore[method-assign]
            sys.modules[name] = mod
    _let_image_processors_register()


def _let_image_processors_register() -> None:
    """transformers without torchvision makes AutoImageProcessor a placeholder whose every use raises;
    SGLang 0.5.19-0.5.20 register their multimodal processors with it at import time: let register pass."""
    from transformers.utils import import_utils  # noqa: PLC0415

    dummy = getattr(import_utils, "DummyObject", None)
    if dummy is None or getattr(dummy, "_dspark_patched", False):
        return
    original = dummy.__getattribute__

    def getattribute(cls: Any, key: str) -> Any:
        if key == "register":
            return lambda *_a, **_k: None
        return original(cls, key)

    dummy.__getattribute__ = getattribute
    dummy._dspark_patched = True


class Device:
    """The stubbed GPU: capacity (MiB), free bytes now, compute capability, unified memory (GB10-like)."""

    def __init__(self) -> None:
        self.gpu_mib = 81559
        self.free = 0
        self.capability = (9, 0)
        self.integrated = False  # nvidia-smi says [N/A]; free memory is the host's MemAvailable


DEVICE = Device()


def _install_stubs() -> None:
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    def props(*_a: Any, **_k: Any) -> Any:
        return types.SimpleNamespace(is_integrated=DEVICE.integrated, total_memory=DEVICE.gpu_mib << 20, name="stub",
                                     major=DEVICE.capability[0], minor=DEVICE.capability[1],
                                     multi_processor_count=132)

    torch.cuda.device_count = lambda: 8
    torch.cuda.current_device = lambda: 0
    torch.cuda.empty_cache = lambda: None
    torch.cuda.get_device_properties = props
    torch.cuda.mem_get_info = lambda *_a, **_k: (DEVICE.free, DEVICE.gpu_mib << 20)
    torch.cuda.get_device_capability = lambda *_a, **_k: DEVICE.capability
    dist.all_reduce = lambda tensor, *_a, **_k: None  # every rank reports the same: MIN is the identity

    real_run = subprocess.run

    def run(cmd: Any, *a: Any, **k: Any) -> Any:
        if isinstance(cmd, list) and cmd and cmd[0] == "nvidia-smi":
            if "--query-gpu=memory.total" in cmd:
                total = "[N/A]" if DEVICE.integrated else str(DEVICE.gpu_mib)
                return subprocess.CompletedProcess(cmd, 0, stdout=f"{total}\n", stderr="")
            major, minor = DEVICE.capability
            return subprocess.CompletedProcess(cmd, 0, stdout=f"{major}.{minor}\n", stderr="")
        return real_run(cmd, *a, **k)

    subprocess.run = run  # type: ignore[assignment]

    import psutil  # noqa: PLC0415

    real_vm = psutil.virtual_memory

    def virtual_memory() -> Any:
        return types.SimpleNamespace(available=DEVICE.free) if DEVICE.integrated else real_vm()

    psutil.virtual_memory = virtual_memory


@contextlib.contextmanager
def _platform_override(runtime_context: Any, all_probes: bool = False) -> Any:
    """CUDA of DEVICE's capability for the release: its override_platform, or its probes rebound (0.5.18 and
    older: see sglang.compat; the rebinding stays for the rest of this sizing-only process).

    all_probes (a case's "all_probes", the version matrix's): rebind every probe on 0.5.19 on too, whose
    override_platform leaves the probes' own bindings alone. run_case answers CUDA for the one binding known to
    matter (``sglang.srt.utils.is_cuda``, read by ``cuda_graph_config.default_prefill_backend``); the matrix runs
    both ways to show no other binding moves a figure."""
    platform = compat
    if not platform.needs_legacy_platform(runtime_context):
        if all_probes:
            platform.install(lambda: platform.cuda_facts(*DEVICE.capability))
        with runtime_context.override_platform(**_platform_facts()):
            yield
        return
    platform.install(lambda: platform.cuda_facts(*DEVICE.capability))
    yield


def _platform_facts() -> dict[str, Any]:
    """The facts of a CUDA device of DEVICE's capability, limited to those this release's platform knows."""
    from sglang.srt import runtime_context  # noqa: PLC0415

    known = set(getattr(runtime_context, "_PLATFORM_PROBES", {}))
    known |= set(getattr(runtime_context, "_PLATFORM_VALUES", {}))
    return {k: v for k, v in _all_platform_facts().items() if not known or k in known}


def _all_platform_facts() -> dict[str, Any]:
    major, minor = DEVICE.capability
    return {
        "is_cuda": True, "is_hip": False, "is_npu": False, "is_xpu": False, "is_musa": False, "is_mps": False,
        "is_sm90": major == 9, "is_sm100": major == 10, "is_sm100_or_sm110": major in (10, 11),
        "is_sm110": major == 11, "is_sm120": major == 12, "is_blackwell": major >= 10,
        "is_hopper_with_cuda_12_3": major == 9, "has_amx": False, "has_flashinfer": False,
        "device_sm": major * 10 + minor, "device_capability": (major, minor),
    }


def _publish(runtime_context: Any, sa: Any) -> None:
    """Publish the server args as the scheduler does, and make rank 0 of TP x PP the parallel state its
    readers see (the process groups are never built)."""
    tp, pp = sa.tp_size, sa.pp_size
    parallel: Any = runtime_context.get_parallel() if hasattr(runtime_context, "get_parallel") else None
    if hasattr(parallel, "clear_stamp"):  # 0.5.21 on: ranks are stamped at publish
        parallel.clear_stamp()
    if hasattr(runtime_context, "SpawnRanks"):
        runtime_context.publish(sa, role="scheduler", ranks=runtime_context.SpawnRanks(world_rank=0, gpu_id=0))
    elif hasattr(runtime_context, "publish"):  # 0.5.17-0.5.20: the runner carries its parallel state
        runtime_context.publish(sa, role="scheduler")
    else:  # 0.5.10-0.5.16: the server args are published through the global setter
        from sglang.srt.server_args import set_global_server_args_for_scheduler  # noqa: PLC0415

        set_global_server_args_for_scheduler(sa)
    if hasattr(parallel, "stamp_derived_widths") and hasattr(runtime_context, "derive_parallel_widths"):
        # 0.5.19-0.5.20: widths are stamped when the process groups are built; stamp what they would be.
        parallel.stamp_derived_widths(**runtime_context.derive_parallel_widths(
            tp_size=tp, attn_cp_size=1, attn_dp_size=1, moe_ep_size=1, moe_dp_size=1, dcp_size=1,
            dcp_enabled=False))
    world = types.SimpleNamespace(cpu_group=None, world_size=tp * pp, dspark_stand_in=True)
    from sglang.srt.distributed import parallel_state  # noqa: PLC0415

    if parallel is not None and hasattr(parallel, "override_permanently"):
        parallel.override_permanently(world_group=world)
    elif parallel is not None and isinstance(getattr(parallel, "_overrides", None), dict):
        # 0.5.15-0.5.18: sizes are read from the process groups unless forced (its test hook's dict).
        fields = getattr(runtime_context, "_PARALLEL_FIELDS", ())
        parallel._overrides.update(compat.parallel_values(fields, tp, pp, world))
    if not hasattr(parallel, "override_permanently"):
        # 0.5.10-0.5.18: some readers (dp_attention's, the model configs') ask parallel_state's groups directly.
        compat.stub_groups(parallel_state, tp, pp)
    current = getattr(parallel_state, "_WORLD", world)
    if current is None or getattr(current, "dspark_stand_in", False):  # 0.5.19-0.5.20 read it from there
        parallel_state._WORLD = world


def _published(runtime_context: Any, sa: Any, bag: str, field: str) -> Any:
    """A published config leaf: its bag (get_<bag>(), 0.5.17 on), else the server args themselves."""
    getter = getattr(runtime_context, f"get_{bag}", None)
    return getattr(getter() if getter is not None else sa, field)


_RESOLVED = ("mem_fraction_static", "chunked_prefill_size", "page_size", "speculative_algorithm",
             "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
             "mamba_radix_cache_strategy", "disable_overlap_schedule", "kv_cache_dtype", "attention_backend")


def _resolved_fields(sa: Any) -> dict[str, Any]:
    """What ServerArgs resolved: resolve_once/resolved_dict from 0.5.19 on, __post_init__ before (already run)."""
    if hasattr(sa, "resolve_once"):
        sa.resolve_once()
        resolved, by = sa.resolved_dict(), "resolve_once"
    else:
        resolved, by = dict(vars(sa)), "__post_init__"
    out = {k: resolved.get(k) for k in _RESOLVED}
    out["resolved_by"] = by
    out["resolved_max_running_requests"] = resolved.get("max_running_requests")
    graphs = resolved.get("cuda_graph_config")
    decode = (graphs["decode"] if isinstance(graphs, dict) else getattr(graphs, "decode", None)) if graphs else None
    prefill = (graphs["prefill"] if isinstance(graphs, dict) else getattr(graphs, "prefill", None)) if graphs else None
    if prefill is not None:  # its capture sizes are part of the default fraction's reserve (8 MiB each)
        phase = prefill if isinstance(prefill, dict) else vars(prefill)
        out["prefill_graph_backend"] = str(getattr(phase.get("backend"), "value", phase.get("backend"))).lower()
        out["prefill_graph_bs_count"] = len(phase.get("bs") or [])
    backend: Any
    if decode is None:  # 0.5.10-0.5.14: flat flags
        backend = "disabled" if resolved.get("disable_cuda_graph") else "full"
        max_bs, bs = resolved.get("cuda_graph_max_bs"), resolved.get("cuda_graph_bs")
    else:
        fields = decode if isinstance(decode, dict) else vars(decode)
        backend, max_bs, bs = fields.get("backend"), fields.get("max_bs"), fields.get("bs")
    backend = str(getattr(backend, "value", backend)).lower()
    out.update(decode_graph_backend=backend, decode_graph_max_bs=max_bs, decode_graph_bs=list(bs or []))
    return out


class _RaisingParser(argparse.ArgumentParser):
    """SGLang's own parser, whose refusals come back as text (a release without a flag dspark gives says which)."""

    def error(self, message: str) -> Any:
        raise ValueError(f"this release's argument parser refused the argv: {message}")


class _ParallelState:
    """0.5.19-0.5.20's per-runner parallel state: one rank of TP x PP, no data or attention parallelism."""

    def __init__(self, tp: int, pp: int) -> None:
        self.tp_size, self.pp_size, self.attn_tp_size = tp, pp, tp

    def __getattr__(self, name: str) -> int:
        if name.endswith("_size"):
            return 1
        if name.endswith("_rank"):
            return 0
        raise AttributeError(name)


def run_case(case: Mapping[str, Any]) -> dict[str, Any]:  # noqa: PLR0915 - SGLang's start-up steps, in its order
    """Resolve one launch the way SGLang does and size its pools; errors come back as text, not raised."""
    runtime_context = None  # 0.5.15 on
    with contextlib.suppress(ImportError):
        from sglang.srt import runtime_context  # type: ignore[no-redef]  # noqa: PLC0415
    with contextlib.suppress(ImportError):  # 0.5.19 on; imported before the platform is overridden
        from sglang.srt.arg_groups.cuda_graph_hook import generate_decode_cuda_graph_batch_sizes  # noqa: F401, PLC0415
    from sglang.srt import utils as srt_utils  # noqa: PLC0415
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig  # noqa: PLC0415
    from sglang.srt.model_executor.model_runner import ModelRunner  # noqa: PLC0415
    from sglang.srt.server_args import ServerArgs  # noqa: PLC0415
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: PLC0415
    from sglang.srt.utils import common  # noqa: PLC0415

    DEVICE.gpu_mib = int(case["gpu_mib"])
    DEVICE.capability = tuple(case.get("capability", (9, 0)))
    DEVICE.free = int(case["free_before"])
    DEVICE.integrated = bool(case.get("integrated", False))
    import torch  # noqa: PLC0415

    # nvidia-smi's [N/A] sends SGLang to torch.cuda.mem_get_info's total, which asks is_available() first.
    torch.cuda.is_available = lambda: DEVICE.integrated
    out: dict[str, Any] = {"id": case["id"], "stood_in": list(_STOOD_IN)}
    stage = "server_args"
    with _platform_override(runtime_context, bool(case.get("all_probes", False))):
        # default_prefill_backend reads the package's re-export (sglang.srt.utils.is_cuda), which override_platform
        # leaves alone: without it the breakable prefill CUDA graph a CUDA host gets (and its reserve) stays off.
        common.is_cuda = srt_utils.is_cuda = lambda: True
        try:
            parser = _RaisingParser(prog="sglang serve")
            ServerArgs.add_cli_args(parser)
            stage = "argparse"
            ns = parser.parse_args([*case["argv"], "--device", "cuda"])
            stage = "server_args"
            sa = ServerArgs.from_cli_args(ns)
            out.update(_resolved_fields(sa))
            stage = "publish"
            tp = sa.tp_size
            _publish(runtime_context, sa)
            stage = "model_config"
            mc = ModelConfig.from_server_args(sa)
            out["context_len"] = mc.context_len
            stage = "model_runner"
            r = object.__new__(ModelRunner)
            path = compat.sizing_path(ModelRunner)  # raises, naming what the release lacks
            out["sizing_path"] = path
            r.server_args, r.model_config, r.gpu_id, r.is_draft_worker = sa, mc, 0, False
            r.device = _published(runtime_context, sa, "device", "device")
            r.memory_pool_config = r.req_to_token_pool = r.token_to_kv_pool_allocator = None
            r.draft_model_idx = r.draft_attention_backend = None
            r.spec_algorithm = SpeculativeAlgorithm.from_string(
                _published(runtime_context, sa, "spec", "speculative_algorithm"))
            r.page_size = _published(runtime_context, sa, "schedule", "page_size")
            r.is_hybrid_swa, r.is_hybrid_swa_compress = mc.is_hybrid_swa, mc.is_hybrid_swa_compress
            r.use_mla_backend = mc.attention_arch == AttentionArch.MLA
            if hasattr(r, "init_spec_aux_hidden_state"):
                r.init_spec_aux_hidden_state()
            r.model = types.SimpleNamespace()
            r.dtype = mc.dtype
            r.sliding_window_size = None
            if path == "configurator":
                _resolve_layers(r, mc)
            else:  # 0.5.10-0.5.15: what ModelRunner.__init__ and load_model set, for a non-pipelined main worker
                for name, value in compat.mixin_runner_fields(mc, sa).items():
                    setattr(r, name, value)
                runner_module = sys.modules[ModelRunner.__module__]
                if hasattr(runner_module, "_UNSET"):
                    for name in compat.sentinel_caches(inspect.getsource(ModelRunner.__init__)):
                        setattr(r, name, runner_module._UNSET)
            r.configure_kv_cache_dtype()
            r.forward_stream = None
            r.pp_group = types.SimpleNamespace(world_size=sa.pp_size)
            # Older releases read these off the runner rather than the published context.
            r.pp_size, r.tp_size, r.pp_rank, r.tp_rank = sa.pp_size, tp, 0, 0
            r.ps = _ParallelState(tp, sa.pp_size)
            r.max_running_requests = None
            # Free memory before the weights, as the engine measures it (float32 all-reduce when TP > 1).
            pre = common.get_available_gpu_memory(
                "cuda", 0, distributed=tp * sa.pp_size > 1, cpu_group=None)
            out["pre_model_load_gib"] = pre
            if path == "configurator":
                r.init_kv_cache_configurator()
                kvc = r.kv_cache_configurator
            else:
                kvc = r  # the mixin sizes on the runner itself
            spec_aux = getattr(r, "spec_aux_config", None)
            out["eagle_draft_num_layers"] = getattr(spec_aux, "eagle_draft_num_layers", None)
            if kvc.mambaish_config is not None:
                out["mamba_cache_per_req"] = int(kvc.mambaish_config.mamba2_cache_params.mamba_cache_per_req)
            out["cell_size"] = _cell_size(kvc)
            stage = "resolve_memory_pool_config"
            DEVICE.free = int(case["free_after"])
            cfg = kvc._resolve_memory_pool_config(pre)
            out.update(
                max_total_num_tokens=cfg.max_total_num_tokens,
                max_running_requests=cfg.max_running_requests,
                max_mamba_cache_size=_published(runtime_context, sa, "schedule", "max_mamba_cache_size"),
                mem_fraction_static_used=cfg.mem_fraction_static,
            )
            stage = "capture_bs"
            r.req_to_token_pool = types.SimpleNamespace(size=cfg.max_running_requests)
            # The decode graph runner is built only when its backend is not "disabled".
            captured = out["decode_graph_backend"] != "disabled"
            capture = _capture_sizes_function()
            out["capture_bs"] = list(capture(r)[0]) if captured and capture else []
            out["error"] = None
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever SGLang raises is the answer
            out["error"] = f"{type(exc).__name__}: {exc}"
            out["error_stage"] = stage
            out["traceback"] = traceback.format_exc()[-3000:]
    return out


def _resolve_layers(r: Any, mc: Any) -> None:
    """The layer range and kinds, as the release's layer_setup.resolve_layer_indices finds them (0.5.16 on)."""
    from sglang.srt.model_executor.model_runner_components.layer_setup import resolve_layer_indices  # noqa: PLC0415

    extra = ({"spec_algorithm": r.spec_algorithm}  # 0.5.19-0.5.20 ask for it
             if "spec_algorithm" in inspect.signature(resolve_layer_indices).parameters else {})
    r.layer_info = resolve_layer_indices(model=r.model, model_config=mc, is_draft_worker=False, **extra)


def _cell_size(kvc: Any) -> int | None:
    """Bytes of KV per token: the pool configurator's (0.5.13 on), else the mixin's get_cell_size_per_token."""
    try:
        from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator  # noqa: PLC0415
    except ImportError:
        mambaish = kvc.mambaish_config
        layers = len(mambaish.full_attention_layer_ids) if mambaish is not None else kvc.num_effective_layers
        return int(kvc.get_cell_size_per_token(layers))
    return int(create_memory_pool_configurator(kvc)._cell_size)


def _capture_sizes_function() -> Any:
    """get_batch_sizes_to_capture where the release keeps it (runner/ from 0.5.14, cuda_graph_runner before)."""
    for module in ("sglang.srt.model_executor.runner.base_cuda_graph_runner",
                   "sglang.srt.model_executor.cuda_graph_runner"):
        with contextlib.suppress(ImportError):
            return getattr(importlib.import_module(module), "get_batch_sizes_to_capture", None)
    return None


_READY: list[bool] = []
_STOOD_IN: list[str] = []
_KERNEL_PACKAGES = ("sgl_kernel",)  # SGLang's CUDA kernels: no CPU build on the package index


def prepare() -> None:
    """Shim and stubs, once per process, before the model runner is imported."""
    if _READY:
        return
    shim_torchvision()
    _install_stubs()
    # Imported before is_cuda flips. 0.5.10-0.5.12 import GPU kernels (sgl_kernel) at module level even on a
    # CPU host: stand-ins let them import (no kernel runs while sizing), and the answers say so.
    _STOOD_IN.extend(compat.import_with_stand_ins(
        "sglang.srt.model_executor.model_runner", _KERNEL_PACKAGES))
    _READY.append(True)


def _planner(request: SglangSizingCase) -> WitnessAnswer:
    """SGLang's pool for dspark's flags and memory readings."""
    prepare()  # first: importing the sglang package imports torchvision in 0.5.18 and older (the shim)
    from sglang.version import __version__  # noqa: PLC0415

    out = run_case({"id": "witness", **request})
    sizing = {"configurator": "KVCacheConfigurator._resolve_memory_pool_config",
              "mixin": "ModelRunner._resolve_memory_pool_config"}.get(out.get("sizing_path") or "", "(none found)")
    answer: WitnessAnswer = {"engine_version": str(__version__), "functions": [
        f"ServerArgs.{out.get('resolved_by', '(not reached)')}", "ModelConfig.from_server_args", sizing],
        "stood_in": out.get("stood_in", [])}
    if out.get("error"):
        return {**answer, "ok": False, "error": f"{out['error']} (at {out.get('error_stage')})"}
    pool, context = int(out["max_total_num_tokens"]), int(out["context_len"])
    return {**answer, "ok": True, "kv_pool_tokens": pool, "max_concurrency": pool / context,
            "max_model_len": context, "max_running_requests": out["max_running_requests"], "num_blocks": None}


def answer(request: SglangSizingCase) -> WitnessAnswer:
    """The witness's answer to one request; errors (an engine refusal included) come back as text."""
    return checks.witness("sglang", _planner, request)


if __name__ == "__main__":
    raise SystemExit(protocol.serve(protocol.each(answer)))
