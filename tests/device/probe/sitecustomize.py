"""Exact-byte probe of vLLM's KV budget terms, loaded by Python at start when this folder is on PYTHONPATH.

Active only when DSPARK_PROBE_OUT names a file. When vllm.v1.worker.gpu_worker is imported (in the engine-core
process), it wraps Worker.determine_available_memory and writes, as JSON, the terms the worker itself computes
(requested memory, weights, torch peak increase, non-torch increase, CUDA-graph estimate, available KV bytes)
plus where the torch peak came from (the forward pass or the sampler) and each CUDA-graph profiling sample.
The engine's log prints the same terms rounded to 0.01 GiB; this keeps the bytes. Nothing else changes.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import types
from typing import Any

_OUT = os.environ.get("DSPARK_PROBE_OUT", "")
_TARGET = "vllm.v1.worker.gpu_worker"


def _held_by_model(model: Any) -> dict[str, Any]:
    """What the loaded model holds in bytes: parameters, buffers (the largest named), so `weights` splits."""
    if model is None:
        return {}
    seen: set[int] = set()

    def size(t: Any) -> int:
        if t is None or not getattr(t, "is_cuda", False) or t.data_ptr() in seen:
            return 0
        seen.add(t.data_ptr())
        return int(t.numel() * t.element_size())

    params = sum(size(p) for p in model.parameters())
    buffers = sorted(((name, size(b), str(b.dtype), list(b.shape)) for name, b in model.named_buffers()),
                     key=lambda item: -item[1])
    return {"model_param_bytes": params, "model_buffer_bytes": sum(b[1] for b in buffers),
            "model_buffers_largest": [b for b in buffers[:12] if b[1] > 0]}


def _patch(module: types.ModuleType) -> None:
    """Wrap Worker.determine_available_memory to record its terms."""
    worker_cls = module.Worker  # type: ignore[attr-defined]
    original = worker_cls.determine_available_memory

    def determine_available_memory(self: Any) -> int:
        import torch  # noqa: PLC0415 - only in the engine process, once the worker exists

        runner = self.model_runner
        dev = self.device
        marks: dict[str, Any] = {"graph_samples": []}
        # The V1 GPU model runner's methods; a runner without them is left alone (the worker's terms still come).
        sampler = getattr(runner, "_dummy_sampler_run", None)
        profile_run = getattr(runner, "profile_run", None)
        capture = getattr(runner, "_warmup_and_capture", None)

        def profile_run_probe() -> None:
            assert profile_run is not None
            marks["profile_start_allocated"] = torch.cuda.memory_allocated(dev)
            marks["profile_start_peak"] = torch.cuda.max_memory_allocated(dev)
            profile_run()

        def sampler_probe(hidden_states: Any) -> Any:
            marks["forward_peak"] = torch.cuda.max_memory_allocated(dev)
            marks["sampler_start_allocated"] = torch.cuda.memory_allocated(dev)
            assert sampler is not None
            out = sampler(hidden_states)
            marks["sampler_peak"] = torch.cuda.max_memory_allocated(dev)
            return out

        def capture_probe(desc: Any, *args: Any, **kwargs: Any) -> Any:
            before = torch.cuda.mem_get_info(dev)[0]
            assert capture is not None
            out = capture(desc, *args, **kwargs)
            torch.cuda.synchronize(dev)
            mode = kwargs.get("cudagraph_runtime_mode")
            marks["graph_samples"].append(
                {"num_tokens": getattr(desc, "num_tokens", None), "mode": str(mode),
                 "bytes": before - torch.cuda.mem_get_info(dev)[0]})
            return out

        wrapped = {"profile_run": (profile_run, profile_run_probe), "_dummy_sampler_run": (sampler, sampler_probe),
                   "_warmup_and_capture": (capture, capture_probe)}
        for attr, (orig, probe) in wrapped.items():
            if orig is not None:
                setattr(runner, attr, probe)
        try:
            available = original(self)
        finally:
            for attr, (orig, _) in wrapped.items():
                if orig is not None:
                    setattr(runner, attr, orig)
        snap = self.init_snapshot
        held = _held_by_model(getattr(runner, "model", None))
        cc = self.vllm_config.compilation_config
        sc = self.vllm_config.scheduler_config
        record = {
            "init_total": snap.total_memory, "init_free": snap.free_memory, "init_cuda": snap.cuda_memory,
            "init_torch": snap.torch_memory, "init_non_torch": snap.non_torch_memory,
            "requested": self.requested_memory,
            "weights": int(runner.model_memory_usage),
            "torch_peak_increase": getattr(self, "peak_activation_memory", None),
            "non_torch_increase": getattr(self, "non_torch_memory", None),
            "cudagraph_estimate": getattr(self, "cudagraph_memory_estimate", None),
            "available_kv": getattr(self, "available_kv_cache_memory_bytes", available),
            "returned": available,
            "cudagraph_mode": str(cc.cudagraph_mode),
            "cudagraph_capture_sizes": list(cc.cudagraph_capture_sizes or []),
            "max_num_seqs": sc.max_num_seqs, "max_num_batched_tokens": sc.max_num_batched_tokens,
            "gpu_memory_utilization": self.cache_config.gpu_memory_utilization,
            **held,
            **marks,
        }
        with open(_OUT, "w") as fh:
            json.dump(record, fh, indent=1)
        return available

    worker_cls.determine_available_memory = determine_available_memory


class _Finder(importlib.abc.MetaPathFinder):
    """Patches the worker module right after it executes."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: types.ModuleType) -> None:
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


if _OUT:
    sys.meta_path.insert(0, _Finder())
