"""Bench fixtures: a free loopback port, a fake streaming server, the tiny model for the real engine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.bench.helpers import FIXTURES, free_port


@pytest.fixture
def port() -> int:
    """A free loopback port."""
    return free_port()


# Run by the engine's python (its transformers): a 4-layer Qwen3, 2 KV heads x 32, bf16 (1,024 KV bytes per token).
_BUILD = """
import sys, torch, transformers as tf
cfg = tf.Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=4096,
    tie_word_embeddings=True, dtype="bfloat16")
torch.manual_seed(0)
tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).save_pretrained(sys.argv[1])
"""


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, vllm_python: str) -> Path:
    """A 4-layer random-weight Qwen3 (vocab 512) built once per session with the engine's transformers."""
    out = tmp_path_factory.mktemp("tiny-model") / "qwen3-tiny"
    proc = subprocess.run([vllm_python, "-c", _BUILD, str(out)], capture_output=True, text=True, timeout=300,
                          check=False)
    if proc.returncode != 0:
        pytest.fail(f"building the tiny model failed: {proc.stderr[-2000:]}", pytrace=False)
    return out


@pytest.fixture
def metrics_text() -> dict[str, str]:
    """Real /metrics text captured from vLLM 0.32.0 (CPU build) serving a tiny model, by situation."""
    names = ("idle", "running", "preempted", "warm")
    return {name: (FIXTURES / f"vllm_metrics_{name}.txt").read_text() for name in names}
