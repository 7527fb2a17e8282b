"""The seat model's inputs from a validation report: bytes a step reads, priors for its costs; pure.

Every prior comes with the sentence that says where it comes from; calibration replaces the ones the
measurements can determine (dspark.advise.calibrate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dspark.advise.calibrate import TERM_LABELS
from dspark.advise.model import StepCosts, StepShape
from dspark.capacity import CapacitySummary
from dspark.hardware import GpuInfo
from dspark.hardware.profiles import bandwidth_gbps_for
from dspark.model.architecture import LinearStateLayer, ModelArchitecture, dtype_bytes
from dspark.model.weights import WeightBytes, format_bytes_per_parameter

# Decode on the seed deployment read 78–85% of GB10's bandwidth: the prior takes 80%.
BANDWIDTH_EFFICIENCY = 0.80
# Dense BF16 tensor throughput reached by decode and chunked prefill: a prior, replaced by any calibration.
COMPUTE_EFFICIENCY = 0.40
# Dense BF16 tensor TFLOPS per GPU (vendor figures; GB10: a quarter of its 1 PFLOP sparse FP4).
_COMPUTE_TFLOPS = (
    ("h100", 989.0), ("h200", 989.0), ("b200", 2250.0), ("rtx 5090", 209.5), ("gb10", 125.0))
# Without a figure for the device (a CPU engine, an unknown GPU) the priors are these, labelled as such.
_CPU_BANDWIDTH_GBPS = 20.0
_CPU_TFLOPS = 0.5
FIXED_PRIOR_S = {"cuda": 0.002, "cpu": 0.005}
# Tokens a seat keeps per step with k speculative tokens, unless given: half of them accepted, at most 4.
ACCEPTED_SHARE = 0.5
ACCEPTED_CAP = 4.0


@dataclass(frozen=True)
class ModelInputs:
    """The step shape and the prior costs, each prior with its source."""

    shape: StepShape
    prior: StepCosts
    sources: dict[str, str]  # term or quantity -> where its value comes from
    assumptions: tuple[str, ...]


def default_emitted(speculative_tokens: int) -> float:
    """Tokens per seat per step when nothing says: 1 + half the speculative tokens, at most 1 + 4."""
    return 1.0 + min(ACCEPTED_SHARE * speculative_tokens, ACCEPTED_CAP)


def _state_bytes_per_seat(arch: ModelArchitecture, tp: int) -> float:
    """Linear-attention state one seat reads and writes per step, per GPU (convolution window + recurrent state)."""
    total = 0.0
    for layer in arch.layers:
        if isinstance(layer, LinearStateLayer):
            conv = layer.conv_dim * (layer.conv_kernel - 1) * dtype_bytes(arch.dtype)
            ssm = layer.num_v_heads * layer.head_k_dim * layer.head_v_dim * dtype_bytes(layer.ssm_dtype or arch.dtype)
            total += 2 * (conv + ssm) / tp
    return total


def _split_weights(arch: ModelArchitecture, weights: WeightBytes | None, tp: int) -> tuple[float, float, str]:
    """(dense bytes read per step, routed-expert bytes, note) per GPU; embedding tables are gathered, not read."""
    if weights is None:
        return 0.0, 0.0, "weights unknown: a step reads no weights in this model until calibrated"
    per_gpu = float(weights.per_gpu_bytes)
    params = arch.parameters
    if params is None:
        return per_gpu, 0.0, f"weights {per_gpu / 1e9:.1f} GB per GPU, all read every step"
    plain = dtype_bytes(arch.dtype)
    gathered = (params.embedding + params.vision) * plain / tp
    expert = 0.0
    if arch.moe is not None and params.routed_experts:
        bpp = format_bytes_per_parameter(arch.expert_weight_format or arch.weight_format, arch.dtype)
        expert = min(params.routed_experts * bpp / tp, per_gpu)
    dense = max(per_gpu - expert - gathered, 0.0)
    note = (f"weights read per step per GPU: {dense / 1e9:.2f} GB dense"
            + (f" + {expert / 1e9:.2f} GB of routed experts × expert coverage" if expert else "")
            + f" (of {per_gpu / 1e9:.2f} GB held; embeddings are gathered, not read)")
    return dense, expert, note


def _active_params_per_gpu(arch: ModelArchitecture, weights: WeightBytes | None, tp: int) -> float:
    params = arch.parameters
    if params is None:
        return (weights.per_gpu_bytes / dtype_bytes(arch.dtype)) if weights else 0.0
    active = float(params.total - params.embedding - params.vision)
    if arch.moe is not None and params.routed_experts:
        active -= params.routed_experts * (1 - arch.moe.top_k / arch.moe.num_experts)
    return active / tp


def model_inputs(
    arch: ModelArchitecture,
    weights: WeightBytes | None,
    capacity: CapacitySummary,
    gpu: GpuInfo | None,
    *,
    platform: str,
    tp: int,
    speculative_tokens: int,
    emitted_per_step: float | None = None,
    observed_prefill_s: tuple[float, str] | None = None,
) -> ModelInputs:
    """Shape and priors for one configuration; `observed_prefill_s` pins the prefill cost (value, source)."""
    sources: dict[str, str] = {}
    notes: list[str] = []
    dense, expert, weight_note = _split_weights(arch, weights, tp)
    notes.append(weight_note)
    name = gpu.name if gpu is not None else ""
    gbps = (gpu.bandwidth_gbps if gpu is not None else None) or bandwidth_gbps_for(name)
    if platform == "cpu" or gbps is None:
        gbps = _CPU_BANDWIDTH_GBPS if platform == "cpu" else 1000.0
        sources["bandwidth_bytes_per_s"] = f"{gbps:g} GB/s: no figure for {name or 'this device'}, a placeholder"
    else:
        sources["bandwidth_bytes_per_s"] = f"{BANDWIDTH_EFFICIENCY:.0%} of {name}'s {gbps:,.0f} GB/s"
        gbps *= BANDWIDTH_EFFICIENCY
    tflops = next((t for key, t in _COMPUTE_TFLOPS if key in name.lower()), None)
    if platform == "cpu" or tflops is None:
        tflops = _CPU_TFLOPS
        compute_source = f"{tflops:g} TFLOPS: no figure for {name or 'this device'}, a placeholder"
    else:
        compute_source = f"{COMPUTE_EFFICIENCY:.0%} of {name}'s {tflops:g} dense BF16 TFLOPS"
        tflops *= COMPUTE_EFFICIENCY
    active = _active_params_per_gpu(arch, weights, tp)
    per_token = 2 * active / (tflops * 1e12)
    sources["per_token_s"] = f"2 × {active / 1e9:.2f} B active parameters per GPU at {compute_source}"
    prefill = per_token
    sources["prefill_per_token_s"] = "as a decode token: " + sources["per_token_s"]
    if observed_prefill_s is not None:
        prefill, sources["prefill_per_token_s"] = observed_prefill_s
    fixed = FIXED_PRIOR_S["cpu" if platform == "cpu" else "cuda"]
    sources["fixed_s"] = f"{fixed * 1e3:g} ms: a default for {platform} (launches, scheduling, sampling)"
    if emitted_per_step is None:
        emitted_per_step = default_emitted(speculative_tokens)
        sources["emitted_per_step"] = (f"default: 1 + half of {speculative_tokens} speculative tokens accepted, "
                                       f"at most 1 + {ACCEPTED_CAP:g}") if speculative_tokens else "no speculation"
    else:
        sources["emitted_per_step"] = "given (--accepted-tokens)"
    moe = arch.moe
    shape = StepShape(
        dense_weight_bytes=dense, expert_weight_bytes=expert,
        num_experts=moe.num_experts if moe else None, top_k=moe.top_k if moe else None,
        kv_bytes_per_token=float(capacity.kv_bytes_per_token),
        state_bytes_per_seat=_state_bytes_per_seat(arch, tp),
        speculative_tokens=speculative_tokens, emitted_per_step=emitted_per_step,
    )
    notes.append(f"KV read per step: {capacity.kv_bytes_per_token:,} B per token of context per GPU"
                 + (f"; linear state {shape.state_bytes_per_seat / 1e6:.1f} MB per seat read and written"
                    if shape.state_bytes_per_seat else ""))
    prior = StepCosts(fixed_s=fixed, bandwidth_bytes_per_s=gbps * 1e9, per_token_s=per_token,
                      prefill_per_token_s=prefill)
    return ModelInputs(shape=shape, prior=prior, sources=sources, assumptions=tuple(notes))


def describe_costs(costs: StepCosts, fitted: Sequence[str], sources: dict[str, str], points: int) -> list[str]:
    """One line per cost term: its value, and whether it was fitted (from how many points) or where it comes from."""
    values = {
        "fixed_s": f"{costs.fixed_s * 1e3:.2f} ms",
        "bandwidth_bytes_per_s": f"{costs.bandwidth_bytes_per_s / 1e9:.1f} GB/s",
        "per_token_s": f"{costs.per_token_s * 1e3:.4f} ms",
        "prefill_per_token_s": f"{costs.prefill_per_token_s * 1e3:.4f} ms",
    }
    return [f"{TERM_LABELS[t]}: {values[t]} ("
            + (f"fitted to {points} measured point(s))" if t in fitted else f"prior: {sources.get(t, '?')})")
            for t in TERM_LABELS]
