"""Mixtral-8x7B under vLLM's dummy weights on the GPU: how its router spreads tokens over the experts, and what the
fused-MoE kernel costs per step by the experts it covers; no engine is started (not collected by pytest).

1. Routing (torch only, the device's own generator): vLLM's dummy loader seeds a fresh generator with 1234 for
   every parameter (vllm/model_executor/model_loader/weight_utils.py, initialize_single_dummy_weight:
   uniform(-1e-3, 1e-3)), so parameters of one shape are equal: every layer's router (8 x 4096) and every
   RMSNorm weight (4096) is the same tensor. With weights of 1e-3 the attention and expert outputs (~1e-5 and
   less) leave the residual stream at the token's embedding in every layer, and the router input is
   RMSNorm(embedding) x norm weight. This computes every vocabulary token's top-2 experts from those tensors
   (made as the loader makes them, and by the loader's own function where vLLM imports), each expert's share
   of tokens, and the expected share of experts T uniformly sampled tokens cover (the decode tokens of a
   temperature-1 request over the dummy model's near-uniform logits are uniform over the vocabulary).
2. Kernel (vLLM's fused_experts, Triton): one Mixtral layer's experts (bf16, 8 x 14,336 x 4,096) at T = 1-128
   tokens, routed (a) uniformly at random, (b) by the dummy router for random tokens, (c) all to experts 0 and 1:
   CUDA-event time per call, the experts touched, and the bytes a step reads over its time.

    PYTHONPATH=/tmp/vsite python3 tests/device/gpu_moe_routing.py --out $OUT [--deadline-s 170]

Writes OUT/moe-routing.json (and prints it).
"""

from __future__ import annotations

import argparse
import json
import math
import time
import traceback
from pathlib import Path
from typing import Any

HIDDEN, WIDTH, EXPERTS, TOP_K, VOCAB = 4096, 14336, 8, 2, 32000
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128)


def dummy(shape: tuple[int, ...], device: str, dtype: Any) -> Any:
    """A parameter as vLLM's dummy loader fills it: a fresh generator seeded 1234, uniform(-1e-3, 1e-3)."""
    import torch  # noqa: PLC0415

    t = torch.empty(shape, device=device, dtype=dtype)
    gen = torch.Generator(device=device)
    gen.manual_seed(1234)
    t.uniform_(-1e-3, 1e-3, generator=gen)
    return t


def vllm_dummy(shape: tuple[int, ...], device: str, dtype: Any) -> tuple[Any, str]:
    """The same parameter through vLLM's own initialiser where it imports (None and why where not)."""
    import torch  # noqa: PLC0415

    try:
        from vllm.model_executor.model_loader import weight_utils  # noqa: PLC0415
    except Exception as exc:
        return None, f"import: {type(exc).__name__}: {exc}"
    t = torch.nn.Parameter(torch.empty(shape, device=device, dtype=dtype), requires_grad=False)
    single = getattr(weight_utils, "initialize_single_dummy_weight", None)
    if single is not None:
        single(t.data)
        return t.data, "initialize_single_dummy_weight"
    whole = weight_utils.initialize_dummy_weights
    holder = torch.nn.Module()
    holder.p = t
    try:
        whole(holder)
    except TypeError:
        whole(holder, None)
    return t.data, "initialize_dummy_weights"


def routing(device: str) -> dict[str, Any]:
    import torch  # noqa: PLC0415

    bf16 = torch.bfloat16
    emb = dummy((VOCAB, HIDDEN), device, bf16)
    norm = dummy((HIDDEN,), device, bf16)
    gate = dummy((EXPERTS, HIDDEN), device, bf16)
    out: dict[str, Any] = {}
    for name, shape, ours in (("embedding", (VOCAB, HIDDEN), emb), ("norm", (HIDDEN,), norm),
                              ("gate", (EXPERTS, HIDDEN), gate)):
        theirs, how = vllm_dummy(shape, device, bf16)
        out[f"vllm_init_{name}"] = how if theirs is None else f"{how}: equal {bool(torch.equal(theirs, ours))}"
    x = emb.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    x = x.to(bf16) * norm  # vLLM's RMSNorm: normalise in fp32, scale by the weight in the model's dtype
    logits = x @ gate.t()
    probs = torch.softmax(logits.float(), dim=-1)
    top = torch.topk(probs, TOP_K, dim=-1).indices  # (VOCAB, 2)
    counts = torch.bincount(top.flatten(), minlength=EXPERTS).double()
    share = (counts / VOCAB).tolist()  # each expert's share of tokens (sums to top-k)
    out["expert_share"] = share
    out["logit_std_by_expert"] = logits.float().std(0).tolist()
    out["gate_row_norms"] = gate.float().norm(dim=1).tolist()
    gen = torch.Generator(device=device)
    gen.manual_seed(7)
    coverage = {}
    for t in TOKENS:
        ids = torch.randint(0, VOCAB, (4000, t), device=device, generator=gen)
        hit = torch.zeros(4000, EXPERTS, device=device)
        hit.scatter_(1, top[ids].reshape(4000, -1), 1.0)
        coverage[t] = {"sampled": hit.sum(1).mean().item() / EXPERTS,
                       "from_shares": sum(1 - (1 - p) ** t for p in share) / EXPERTS,
                       "uniform": 1 - (1 - TOP_K / EXPERTS) ** t}
    out["coverage"] = coverage
    pairs = torch.bincount(top[:, 0] * EXPERTS + top[:, 1], minlength=EXPERTS * EXPERTS)
    out["top2_pairs"] = pairs.reshape(EXPERTS, EXPERTS).tolist()
    out["_top"] = top  # for the kernel's routed case (dropped before writing)
    return out


def kernel(device: str, top: Any, deadline: float) -> dict[str, Any]:
    import torch  # noqa: PLC0415

    try:
        from vllm.model_executor.layers.fused_moe import fused_experts  # noqa: PLC0415
    except ImportError:
        from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts  # noqa: PLC0415
    bf16 = torch.bfloat16
    w1 = torch.randn(EXPERTS, 2 * WIDTH, HIDDEN, device=device, dtype=bf16) * 1e-3
    w2 = torch.randn(EXPERTS, HIDDEN, WIDTH, device=device, dtype=bf16) * 1e-3
    expert_bytes = 3 * HIDDEN * WIDTH * 2
    gen = torch.Generator(device=device)
    gen.manual_seed(11)
    rows: list[dict[str, Any]] = []
    for t in TOKENS:
        x = torch.randn(t, HIDDEN, device=device, dtype=bf16, generator=gen) * 1e-3
        uniform = torch.stack([torch.randperm(EXPERTS, device=device, generator=gen)[:TOP_K] for _ in range(t)])
        routed = top[torch.randint(0, VOCAB, (t,), device=device, generator=gen)]
        same = torch.tensor([[0, 1]] * t, device=device)
        for case, ids in (("uniform", uniform), ("dummy_router", routed), ("two_experts", same)):
            if time.monotonic() > deadline:
                rows.append({"tokens": t, "case": case, "skipped": "deadline"})
                continue
            topk_ids = ids.to(torch.int32).contiguous()
            weights = torch.full((t, TOP_K), 0.5, device=device, dtype=torch.float32)
            try:
                for _ in range(3):
                    fused_experts(x, w1, w2, weights, topk_ids)
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                reps = 30
                start.record()
                for _ in range(reps):
                    fused_experts(x, w1, w2, weights, topk_ids)
                end.record()
                torch.cuda.synchronize()
            except Exception:
                rows.append({"tokens": t, "case": case, "error": traceback.format_exc()[-1500:]})
                continue
            seconds = start.elapsed_time(end) / 1e3 / reps
            touched = int(torch.unique(topk_ids).numel())
            rows.append({"tokens": t, "case": case, "experts_touched": touched, "seconds": seconds,
                         "bytes_per_s": touched * expert_bytes / seconds})
            print(json.dumps(rows[-1]), flush=True)
    return {"expert_bytes": expert_bytes, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline-s", type=float, default=170.0)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    deadline = time.monotonic() + args.deadline_s
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {}
    top = None
    try:
        r = routing(args.device)
        top = r.pop("_top")
        result["routing"] = r
    except Exception:
        result["routing_error"] = traceback.format_exc()
    (out_dir / "moe-routing.json").write_text(json.dumps(result, indent=1))  # the routing, should the kernel hang
    if top is not None and args.device == "cuda":
        try:
            result["kernel"] = kernel(args.device, top, deadline)
        except Exception:
            result["kernel_error"] = traceback.format_exc()
    text = json.dumps(result, indent=1, default=lambda v: None if isinstance(v, float) and math.isnan(v) else v)
    (out_dir / "moe-routing.json").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
