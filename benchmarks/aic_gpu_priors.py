"""dspark's per-GPU step-cost priors from aiconfigurator-core's measured kernel tables (run here, not in CI).

Never imported by dspark; aiconfigurator is no dependency of it. Run in a scratch venv that has it:

    python3 -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator-core==0.12.0
    /tmp/aic/bin/python benchmarks/aic_gpu_priors.py            # prints the fits per GPU
    /tmp/aic/bin/python benchmarks/aic_gpu_priors.py --write    # and writes tests/perf/data/aic_rows.json

For each GPU (h200_sxm, h100_sxm, b200_sxm; rtx_pro_6000_server for the RTX 5090 question) and vLLM 0.24.0's
tables (systems/data/<gpu>/<op>/vllm/0.24.0/*.parquet) it derives the quantities dspark.perf.gpus holds, the way
dspark derived the H200's (dspark.perf.gpus, dspark.perf.moe, docs/advise.md "The model"):

- gemm_fraction: the BF16 torch-linear rate (2·m·n·k ÷ latency) of a Qwen3-8B decoder layer's four GEMM shapes
  (n, k) = (6144, 4096) QKV, (4096, 4096) O, (12288, 4096) gate-up (the table has no 24,576-wide one), (4096, 12288)
  down, at m = 1,024-4,096 rows, median, over the datasheet's dense peak; fp8_gemm_fraction the same for the
  per-tensor FP8 kernel (CutlassFP8ScaledMMLinearKernel) over the FP8 peak.
- gemm_half_tokens (T½): where the same shapes are compute-bound (their FLOPs at the large rate over 1.5× their
  weights' read at 0.8 of peak), the token count at which latency = 2·n·k·(m + T½) ÷ rate: per row
  latency · rate ÷ (2·n·k) − m, median over m = 128-1,024.
- gemm_unhidden (u): every BF16 shape of 64 MB-2 GB of weights at m = 8-128 rows while weight-bound (their FLOPs at
  the large rate under 0.8 of the one-row latency): (latency(m) − latency(1)) ÷ (2·m·n·k ÷ large rate), median.
- weight_read: the one-row GEMMs of 0.5-2 GB, weights ÷ latency over peak (a streaming read's fraction).
- attention_fraction: context attention (32 query heads, 8 KV heads, head dim 128, BF16, no window, batch 1-4),
  causal 2·2·heads·dim·isl²/2 FLOPs per sequence ÷ latency at isl 4,096-16,384, median, over the BF16 peak.
- kv_fraction: generation attention (the same heads), K and V of every context token (2·8·128·2 B) ÷ latency, over
  rows of 256 MB-4 GB of KV read (batch 8-256), median, over peak.
- the fused-MoE curves (dspark.perf.moe's method): BF16 experts on the GPU's default kernel, moe_tp 1, ep 1,
  balanced routing. Compute: rows of 4,096-16,384 tokens whose experts' weights read at peak take under a quarter
  of the latency, 6·T·k·h·N FLOPs ÷ latency ÷ (t ÷ (t + 48)), t = T·k ÷ E, median per shape, fitted to
  R(N) = R_max · N ÷ (N + N½) (least squares on log R); moe_rate_fraction = R_max over the GPU's dense large-GEMM
  rate. Reads: rows where every expert is touched (T·k ≥ 4·E) and the GEMMs at 0.63 of the dense rate take under
  0.3 of the latency, E·3·h·N·2 B ÷ latency, median per shape (shapes above peak left out), fitted to
  R(S) = R_max · S ÷ (S + S½), S one expert's bytes.

--write also extracts the rows tests/perf/test_aic_priors.py checks dspark's per-op costs against (a few GEMM
shapes at several token counts, decode attention reads, prefill attention, the fused-MoE layer of Qwen3-30B-A3B
and Mixtral-8x7B) with their provenance: package version, file, filters.
"""

from __future__ import annotations

import argparse
import json
import math
from importlib import metadata
from pathlib import Path
from typing import Any

import aiconfigurator_core  # type: ignore[import-not-found]  # the scratch venv's only
import numpy as np
import pandas as pd  # type: ignore[import-untyped]  # the scratch venv's, no stubs
from scipy.optimize import least_squares  # type: ignore[import-untyped]

DATA = Path(aiconfigurator_core.__file__).parent / "systems" / "data"
VERSION = "0.24.0"
OUT = Path(__file__).resolve().parents[1] / "tests" / "perf" / "data" / "aic_rows.json"

# dspark.perf.gpus' datasheet figures (peak bandwidth GB/s, dense BF16 and FP8 TFLOP/s), repeated here so that this
# script runs without dspark importable in the scratch venv; the test checks they match.
PEAKS = {"h200_sxm": (4800.0, 989.0, 1979.0), "h100_sxm": (3350.0, 989.0, 1979.0),
         "b200_sxm": (8000.0, 2250.0, 4500.0), "rtx_pro_6000_server": (1792.0, 503.8, 1007.6)}
# The kernels vLLM 0.24 runs by default on each GPU (the tables hold several): attention (prefill, decode) and the
# unquantized fused-MoE path.
ATTN = {"h200_sxm": ("vllm_flash_attn_fa3", "vllm_flash_attn_fa3"),
        "h100_sxm": ("vllm_flash_attn_fa3", "vllm_flash_attn_fa3"),
        "b200_sxm": ("vllm_flashinfer_trtllmprefill", "vllm_flashinfer_trtllmdecode"),
        "rtx_pro_6000_server": ("vllm_flash_attn_fa2", "vllm_flash_attn_fa2")}
MOE = {"h200_sxm": "vllm_unquantizedfusedmoe_triton_tritonexperts",
       "h100_sxm": "vllm_unquantizedfusedmoe_triton_tritonexperts",
       "b200_sxm": "vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts",
       "rtx_pro_6000_server": "vllm_unquantizedfusedmoe_flashinfer_cutlass_flashinferexperts"}
# Expert widths from which a GPU's default fused-MoE kernel runs a slower tactic (the B200's FlashInfer TRT-LLM BF16
# kernel: its 8,192-16,384-wide shapes read and compute at ~0.6 of the narrower ones' rates, and its Mixtral-shaped
# rows jump from 0.40 ms at 4-32 tokens to 0.71 at 48): fitted apart, as a factor on the curves.
MOE_WIDE = {"b200_sxm": 8192}
# Tokens per expert (tokens × top-k ÷ experts) up to which a GPU's default fused-MoE kernel runs its smallest token
# tile, reading the experts faster than above it (FlashInfer's TRT-LLM MoE picks its tile from the tokens per
# expert: the B200's rows step up in latency where it passes 8, e.g. Mixtral's from 32 tokens to 48, 5120×8192 top-1
# of 16 experts from 128 tokens to 256): the reads are fitted apart on each side of it.
MOE_SMALL_TILE = {"b200_sxm": 8}
SHAPES_8B = [(6144, 4096), (4096, 4096), (12288, 4096), (4096, 12288)]
HALF = 48.0  # dspark's tile-occupancy T½ in the MoE method (dspark.perf.moe)


def _path(gpu: str, op: str, table: str) -> Path:
    return DATA / gpu / op / "vllm" / VERSION / f"{table}.parquet"


def _rel(path: Path) -> str:
    return str(path.relative_to(DATA.parent.parent))


def _rms_log(pred: np.ndarray, obs: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.log(pred / obs) ** 2)))


def _saturating_fit(x: np.ndarray, y: np.ndarray, guess: tuple[float, float]) -> tuple[float, float, float]:
    """y = a · x ÷ (x + b), least squares on log y: (a, b, rms log error)."""
    def resid(p: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.log(p[0] * x / (x + p[1])) - np.log(y)
        return out
    fit = least_squares(resid, np.array(guess), bounds=([1e-9, 1e-9], [np.inf, np.inf]))
    a, b = float(fit.x[0]), float(fit.x[1])
    return a, b, _rms_log(a * x / (x + b), y)


def _net_of_quant(gpu: str, t: pd.DataFrame, peak: float, out: dict[str, Any]) -> pd.DataFrame:
    """FP8 rows' rates without the activation quantisation kernel. The collector times RowParallelLinear.forward on
    BF16 input, so the static quantisation kernel runs inside each row (vLLM's ScaledMMLinearKernel.apply_weights):
    the GEMM's own rate is the row's latency less that kernel's at the same (m, k) in the quantize table. Records
    the rate with it (fp8_gemm_fraction_with_quant) in `out`."""
    big = t[t.m.between(1024, 4096) & t[["n", "k"]].apply(tuple, axis=1).isin(SHAPES_8B)]
    out["fp8_gemm_fraction_with_quant"] = float(big.tflops.median()) / peak
    q = pd.read_parquet(_path(gpu, "quantize", "scale_matrix_perf")).set_index(["m", "k"]).latency
    quant = np.array([q.get((m, k), np.nan) for m, k in zip(t.m, t.k, strict=True)])
    return t.assign(tflops=2 * t.m * t.n * t.k / ((t.latency - quant) * 1e-3) / 1e12)


def _tiny_gemms(t: pd.DataFrame) -> dict[str, Any]:
    """The per-kernel floor: the tiniest BF16 GEMMs (one row, n and k at most 256: nothing to read or compute)."""
    tiny = t[(t.m == 1) & (t.n <= 256) & (t.k <= 256)]
    return {"tiny_gemm_us": float(tiny.latency.median() * 1e3), "tiny_gemm_rows": len(tiny)}


def gemm_figures(gpu: str) -> dict[str, Any]:
    bw, bf16, fp8 = PEAKS[gpu]
    d = pd.read_parquet(_path(gpu, "gemm", "gemm_perf"))
    out: dict[str, Any] = {}
    for dtype, kernel, peak, bpe in (("bfloat16", "torch.nn.functional.linear", bf16, 2),
                                     ("fp8", "CutlassFP8ScaledMMLinearKernel", fp8, 1)):
        t = d[(d.gemm_dtype == dtype) & (d.kernel_source == kernel)].copy()
        t["tflops"] = 2 * t.m * t.n * t.k / (t.latency * 1e-3) / 1e12
        key = "gemm" if dtype == "bfloat16" else "fp8_gemm"
        if dtype == "fp8":
            t = _net_of_quant(gpu, t, peak, out)
        big = t[t.m.between(1024, 4096) & t[["n", "k"]].apply(tuple, axis=1).isin(SHAPES_8B)]
        rate = float(big.tflops.median())
        out[f"{key}_fraction"] = rate / peak
        out[f"{key}_tflops"] = rate
        out[f"{key}_spread"] = (float(big.tflops.min()), float(big.tflops.max()), len(big))
        # T½ where the 8B shapes are compute-bound at the large rate
        s8 = t[t[["n", "k"]].apply(tuple, axis=1).isin(SHAPES_8B) & t.m.between(128, 1024)]
        weight_s = s8.n * s8.k * bpe / (0.8 * bw * 1e9)
        compute_s = 2 * s8.m * s8.n * s8.k / (rate * 1e12)
        cb = s8[compute_s > 1.5 * weight_s]
        implied = cb.latency * 1e-3 * rate * 1e12 / (2 * cb.n * cb.k) - cb.m
        out[f"{key}_half_tokens_compute_rows"] = float(implied.median()) if len(cb) else math.nan
        if dtype != "bfloat16":
            continue
        # the unhidden share of weight-bound GEMMs
        one = t[t.m == 1].set_index(["n", "k"]).latency
        w = t.n * t.k * 2
        sel = t[(w >= 64e6) & (w <= 2e9) & t.m.between(8, 128)].copy()
        sel["l1"] = [one.get((n, k), np.nan) for n, k in zip(sel.n, sel.k, strict=True)]
        flops_s = 2 * sel.m * sel.n * sel.k / (rate * 1e12)
        sel = sel[flops_s < 0.8 * sel.l1 * 1e-3]
        u = (sel.latency - sel.l1) * 1e-3 / (2 * sel.m * sel.n * sel.k / (rate * 1e12))
        out["gemm_unhidden"] = float(u.median())
        out["gemm_unhidden_iqr"] = (float(u.quantile(0.25)), float(u.quantile(0.75)), len(u),
                                    int(sel[["n", "k"]].drop_duplicates().shape[0]))
        by_m = {int(m): round(float(g.median()), 3) for m, g in u.groupby(sel.m) if m in (8, 16, 32, 64, 96, 128)}
        out["gemm_unhidden_by_m"] = by_m
        out.update(_tiny_gemms(t))
        r1 = t[(t.m == 1) & (w >= 0.5e9) & (w <= 2e9)]
        out["weight_read_fraction"] = float((r1.n * r1.k * 2 / (r1.latency * 1e-3)).median() / (bw * 1e9))
        # the largest GEMMs against mid-sized ones (a power-cap throttle would show as a falling rate)
        huge = t[(t.m >= 16384) & (t.n >= 16384) & (t.k >= 8192)].tflops.median()
        mid = t[(t.m == 4096) & (t.n.between(4096, 8192)) & (t.k.between(4096, 8192))].tflops.median()
        out["largest_over_mid"] = float(huge / mid)
        # T½ in the step model's own GEMM formula, max(W ÷ (0.8 · bw) + u · F ÷ R, F · (m + T½) ÷ (m · R)), with R
        # and u as derived above, over the 8B's shapes at 128-16,384 rows: the T½ of least rms log error.
        s8 = t[t[["n", "k"]].apply(tuple, axis=1).isin(SHAPES_8B) & t.m.between(128, 16384)]
        m = s8.m.to_numpy(float)
        flops = 2 * m * s8.n.to_numpy(float) * s8.k.to_numpy(float)
        weights = s8.n.to_numpy(float) * s8.k.to_numpy(float) * 2
        obs = s8.latency.to_numpy(float) * 1e-3
        memory = weights / (0.8 * bw * 1e9) + out["gemm_unhidden"] * flops / (rate * 1e12)
        errs = {h: _rms_log(np.maximum(memory, flops * (m + h) / (m * rate * 1e12)), obs) for h in range(1, 400)}
        best = min(errs, key=lambda h: errs[h])
        out["gemm_half_tokens_fit"] = float(best)
        out["gemm_half_tokens_fit_rms"] = errs[best]
        out["gemm_rms_at_48"] = errs[48]
    return out


def quant_figures(gpu: str) -> dict[str, Any]:
    """vLLM's static per-tensor FP8 activation quantisation (ops.scaled_fp8_quant with a scale: read m·k BF16, write
    m·k FP8): its latency at a few rows (the kernel's floor) and its read-and-write rate at many rows."""
    bw, _bf16, _fp8 = PEAKS[gpu]
    q = pd.read_parquet(_path(gpu, "quantize", "scale_matrix_perf"))
    small = q[(q.m <= 16) & (q.k <= 4096)]
    large = q[(q.m >= 4096) & (q.k >= 1024)]
    rate = 3 * large.m * large.k / (large.latency * 1e-3) / (bw * 1e9)
    dyn = pd.read_parquet(_path(gpu, "quantize", "computescale_perf"))
    return {"quant_floor_us": float(small.latency.median() * 1e3), "quant_floor_rows": len(small),
            "quant_floor_spread_us": (float(small.latency.min() * 1e3), float(small.latency.max() * 1e3)),
            "quant_fraction": float(rate.median()), "quant_fraction_spread": (float(rate.min()), float(rate.max()),
                                                                              len(rate)),
            "dynamic_extra_us_small": float(dyn[(dyn.m <= 16) & (dyn.k <= 4096)].latency.median() * 1e3)}


def attention_figures(gpu: str) -> dict[str, Any]:
    bw, bf16, _fp8 = PEAKS[gpu]
    prefill, decode = ATTN[gpu]
    c = pd.read_parquet(_path(gpu, "attention", "context_attention_perf"))
    c = c[(c.kernel_source == prefill) & (c.num_heads == 32) & (c.num_key_value_heads == 8) & (c.head_dim == 128)
          & (c.kv_cache_dtype == "bfloat16") & (c.window_size == 0)]
    flops = 4 * 32 * 128 * c.batch_size * c.isl * c.isl / 2
    c = c.assign(tflops=flops / (c.latency * 1e-3) / 1e12)
    long = c[c.isl.between(4096, 16384) & c.batch_size.between(1, 4)]
    g = pd.read_parquet(_path(gpu, "attention", "generation_attention_perf"))
    g = g[(g.kernel_source == decode) & (g.num_heads == 32) & (g.num_key_value_heads == 8) & (g.head_dim == 128)
          & (g.kv_cache_dtype == "bfloat16") & (g.window_size == 0)]
    # The KV read rate the way the H200's 0.9 was measured: the difference of two steps with the same rows at two
    # context lengths leaves only the KV read (the kernel's fixed costs cancel).
    lat = g.set_index(["batch_size", "step"]).latency
    rates = []
    for b in (8, 16, 32, 64, 128):
        for c1, c2 in ((1023, 4095), (2047, 8191), (4095, 16383)):
            if (b, c1) in lat.index and (b, c2) in lat.index:
                extra = b * (c2 - c1) * 2 * 8 * 128 * 2
                rates.append(extra / ((lat[(b, c2)] - lat[(b, c1)]) * 1e-3) / (bw * 1e9))
    absolute = g.batch_size * (g.step + 1) * 2 * 8 * 128 * 2 / (g.latency * 1e-3) / (bw * 1e9)
    return {"attention_fraction": float(long.tflops.median()) / bf16,
            "attention_spread": (float(long.tflops.min()), float(long.tflops.max()), len(long)),
            "kv_fraction": float(np.median(rates)),
            "kv_spread": (float(min(rates)), float(max(rates)), len(rates)),
            "kv_absolute_fraction": float(absolute[(g.batch_size >= 8) & (g.step >= 4095)].median())}


def moe_figures(gpu: str, dense_tflops: float) -> dict[str, Any]:
    bw, _bf16, _fp8 = PEAKS[gpu]
    m = pd.read_parquet(_path(gpu, "moe", "moe_perf"))
    m = m[(m.kernel_source == MOE[gpu]) & (m.moe_dtype == "bfloat16") & (m.moe_tp_size == 1)
          & (m.moe_ep_size == 1) & (m.distribution == "balanced")].copy()
    wbytes = m.num_experts * 3 * m.hidden_size * m.inter_size * 2
    flops = 6 * m.num_tokens * m.topk * m.hidden_size * m.inter_size
    m["lat_s"] = m.latency * 1e-3
    per_expert = m.num_tokens * m.topk / m.num_experts
    comp = m[m.num_tokens.between(4096, 16384) & (wbytes / (bw * 1e9) < 0.25 * m.lat_s)]
    rate = flops[comp.index] / comp.lat_s / 1e12 / (per_expert[comp.index] / (per_expert[comp.index] + HALF))
    table = rate.groupby([comp.hidden_size, comp.inter_size, comp.topk, comp.num_experts]).median()
    wide = MOE_WIDE.get(gpu, 0)
    narrow = table[[not (wide and k[1] >= wide) for k in table.index]]
    widths = np.array([k[1] for k in narrow.index], dtype=float)
    rmax, nhalf, rms = _saturating_fit(widths, narrow.to_numpy(), (dense_tflops * 0.85, 220.0))
    tile = MOE_SMALL_TILE.get(gpu, 0)
    light = (m.num_tokens * m.topk >= 4 * m.num_experts) & (flops / (0.63 * dense_tflops * 1e12) < 0.3 * m.lat_s)
    small_out: dict[str, Any] = {}
    if tile:
        st = m[light & (per_expert <= tile)]
        sr = (wbytes[st.index] / st.lat_s / 1e12).groupby(
            [st.hidden_size, st.inter_size, st.topk, st.num_experts]).median()
        sr = sr[sr < bw / 1e3]
        small_out = {"expert_small_tile_tokens": tile, "expert_small_tile_fraction": float(sr.median()) * 1e3 / bw,
                     "expert_small_tile_shapes": len(sr),
                     "expert_small_tile_spread": (float(sr.min()) * 1e3 / bw, float(sr.max()) * 1e3 / bw),
                     "expert_small_tile_table": {str(k): round(float(v), 2) for k, v in sr.items()}}
        light = light & (per_expert > tile)
    read = m[light]
    rr = (wbytes[read.index] / read.lat_s / 1e12).groupby(
        [read.hidden_size, read.inter_size, read.topk, read.num_experts]).median()
    rr = rr[rr < bw / 1e3]
    rn = rr[[not (wide and k[1] >= wide) for k in rr.index]]
    sizes = np.array([3 * h * n * 2 for h, n, _k, _e in rn.index], dtype=float)
    smax, shalf, srms = _saturating_fit(sizes, rn.to_numpy(), (0.85 * bw / 1e3, 1e6))
    out: dict[str, Any] = {}
    if wide:  # the shapes at or above the kernel's slower wide-expert tactic: their median over the curves
        rate_ratio = [v / (rmax * k[1] / (k[1] + nhalf)) for k, v in table.items() if k[1] >= wide]
        read_ratio = [v / (smax * 6 * k[0] * k[1] / (6 * k[0] * k[1] + shalf)) for k, v in rr.items() if k[1] >= wide]
        out = {"moe_wide_width": wide, "moe_wide_rate": float(np.median(rate_ratio)),
               "moe_wide_read": float(np.median(read_ratio)), "moe_wide_shapes": len(rate_ratio),
               "moe_wide_rate_spread": (float(min(rate_ratio)), float(max(rate_ratio))),
               "moe_wide_read_spread": (float(min(read_ratio)), float(max(read_ratio)))}
    return {"kernel": MOE[gpu], "moe_rate_tflops": rmax, "moe_rate_fraction": rmax / dense_tflops,
            "moe_width_half": nhalf, "moe_rms": rms, "moe_shapes": len(narrow), **out,
            "moe_table": {str(k): round(float(v), 1) for k, v in table.items()},
            "expert_read_tbps": smax, "expert_fraction": smax * 1e3 / bw, "expert_half_bytes": shalf,
            "expert_rms": srms, "expert_shapes": len(rn), **small_out,
            "expert_table": {str(k): round(float(v), 2) for k, v in rr.items()}}


def figures(gpu: str) -> dict[str, Any]:
    out = gemm_figures(gpu)
    out.update(quant_figures(gpu))
    out.update(attention_figures(gpu))
    out.update(moe_figures(gpu, out["gemm_tflops"]))
    return out


def extract_rows(gpu: str) -> dict[str, Any]:
    """The rows tests/perf/test_aic_priors.py checks dspark's per-op step costs against, with their filters."""
    prefill, decode = ATTN[gpu]
    ms = [1, 8, 32, 128, 512, 2048, 8192]
    d = pd.read_parquet(_path(gpu, "gemm", "gemm_perf"))
    gemm = d[(d.kernel_source == "torch.nn.functional.linear") & (d.gemm_dtype == "bfloat16") & d.m.isin(ms)
             & d[["n", "k"]].apply(tuple, axis=1).isin(SHAPES_8B)]
    fp8 = d[(d.kernel_source == "CutlassFP8ScaledMMLinearKernel") & (d.gemm_dtype == "fp8") & d.m.isin(ms)
            & d[["n", "k"]].apply(tuple, axis=1).isin(SHAPES_8B)]
    g = pd.read_parquet(_path(gpu, "attention", "generation_attention_perf"))
    g = g[(g.kernel_source == decode) & (g.num_heads == 32) & (g.num_key_value_heads == 8) & (g.head_dim == 128)
          & (g.kv_cache_dtype == "bfloat16") & (g.window_size == 0) & g.batch_size.isin([1, 8, 32, 128])
          & g.step.isin([1023, 4095, 16383])]
    c = pd.read_parquet(_path(gpu, "attention", "context_attention_perf"))
    c = c[(c.kernel_source == prefill) & (c.num_heads == 32) & (c.num_key_value_heads == 8) & (c.head_dim == 128)
          & (c.kv_cache_dtype == "bfloat16") & (c.window_size == 0) & (c.batch_size == 1)
          & c.isl.isin([1024, 4096, 16384])]
    m = pd.read_parquet(_path(gpu, "moe", "moe_perf"))
    m = m[(m.kernel_source == MOE[gpu]) & (m.moe_dtype == "bfloat16") & (m.moe_tp_size == 1) & (m.moe_ep_size == 1)
          & (m.distribution == "balanced") & m.num_tokens.isin([1, 4, 8, 16, 32, 48, 128, 256, 512, 1024, 4096, 16384])
          & m[["hidden_size", "inter_size", "topk", "num_experts"]].apply(tuple, axis=1).isin(
              [(2048, 768, 8, 128), (4096, 14336, 2, 8)])]

    tiny = d[(d.kernel_source == "torch.nn.functional.linear") & (d.gemm_dtype == "bfloat16") & (d.m == 1)
             & (d.n <= 256) & (d.k <= 256)]
    q = pd.read_parquet(_path(gpu, "quantize", "scale_matrix_perf"))
    q = q[q.m.isin(ms) & q.k.isin([4096, 12288])]

    def rows(frame: pd.DataFrame, cols: list[str]) -> list[dict[str, Any]]:
        return [{c: (v.item() if hasattr(v, "item") else v) for c, v in r.items()}
                for r in frame[[*cols, "latency"]].to_dict("records")]

    return {
        "gemm_bf16": {"file": _rel(_path(gpu, "gemm", "gemm_perf")),
                      "filter": "kernel_source torch.nn.functional.linear, gemm_dtype bfloat16, (n, k) Qwen3-8B's",
                      "rows": rows(gemm, ["m", "n", "k"])},
        "gemm_fp8": {"file": _rel(_path(gpu, "gemm", "gemm_perf")),
                     "filter": "kernel_source CutlassFP8ScaledMMLinearKernel, gemm_dtype fp8, (n, k) Qwen3-8B's",
                     "rows": rows(fp8, ["m", "n", "k"])},
        "gemm_tiny": {"file": _rel(_path(gpu, "gemm", "gemm_perf")),
                      "filter": "kernel_source torch.nn.functional.linear, gemm_dtype bfloat16, m 1, n and k <= 256",
                      "rows": rows(tiny, ["m", "n", "k"])},
        "fp8_quant": {"file": _rel(_path(gpu, "quantize", "scale_matrix_perf")),
                      "filter": "op scale_matrix (static_scaled_fp8_quant: BF16 m x k in, FP8 out), k 4096 and 12288",
                      "rows": rows(q, ["m", "k"])},
        "decode_attention": {"file": _rel(_path(gpu, "attention", "generation_attention_perf")),
                             "filter": f"kernel_source {decode}, 32 heads, 8 KV heads, head_dim 128, bf16 KV, "
                                       "no window; step = context tokens before the new one",
                             "rows": rows(g, ["batch_size", "step"])},
        "prefill_attention": {"file": _rel(_path(gpu, "attention", "context_attention_perf")),
                              "filter": f"kernel_source {prefill}, 32 heads, 8 KV heads, head_dim 128, bf16, "
                                        "no window, batch 1, causal",
                              "rows": rows(c, ["isl"])},
        "moe": {"file": _rel(_path(gpu, "moe", "moe_perf")),
                "filter": f"kernel_source {MOE[gpu]}, bfloat16, moe_tp 1, moe_ep 1, balanced",
                "rows": rows(m, ["num_tokens", "hidden_size", "inter_size", "topk", "num_experts"])},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(OUT.parents[3])}")
    parser.add_argument("--gpus", default="h200_sxm,h100_sxm,b200_sxm,rtx_pro_6000_server")
    args = parser.parse_args()
    result: dict[str, Any] = {"tool": "aiconfigurator-core", "version": metadata.version("aiconfigurator-core"),
                              "backend": "vllm", "backend_version": VERSION,
                              "script": "benchmarks/aic_gpu_priors.py", "peaks": PEAKS, "gpus": {}}
    for gpu in args.gpus.split(","):
        fig = figures(gpu)
        print(f"== {gpu}")
        for key, value in fig.items():
            if key not in ("moe_table", "expert_table", "expert_small_tile_table"):
                print(f"  {key}: {value}")
        print("  moe_table:", fig["moe_table"])
        print("  expert_table:", fig["expert_table"])
        print("  expert_small_tile_table:", fig.get("expert_small_tile_table"))
        result["gpus"][gpu] = {"figures": {k: v for k, v in fig.items()
                                          if k not in ("moe_table", "expert_table", "expert_small_tile_table")},
                               "rows": extract_rows(gpu)}
    if args.write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(result, indent=1, default=float) + "\n")
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
