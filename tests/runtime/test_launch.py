"""The launch plan value: redaction, environment overlay, and the exec seam."""

from __future__ import annotations

import pytest

from dspark.runtime.launch import REDACTED, LaunchPlan, exec_plan, redact_argv, redact_env


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["vllm", "--api-key", "sk-123", "--port", "8000"], ["vllm", "--api-key", REDACTED, "--port", "8000"]),
        (["x", "--api-key=sk-123"], ["x", f"--api-key={REDACTED}"]),
        (["x", "--hf-token", "hf_abc", "--max-num-seqs", "12"], ["x", "--hf-token", REDACTED, "--max-num-seqs", "12"]),
        (["x", "--max-num-seqs", "12"], ["x", "--max-num-seqs", "12"]),
    ],
)
def test_redact_argv(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == expected


def test_redact_env_hides_tokens_and_keys_only() -> None:
    env = {"HF_TOKEN": "hf_secret", "OPENAI_API_KEY": "sk", "VLLM_CPU_KVCACHE_SPACE": "1", "DB_PASSWORD": "p"}
    assert redact_env(env) == {
        "HF_TOKEN": REDACTED, "OPENAI_API_KEY": REDACTED, "VLLM_CPU_KVCACHE_SPACE": "1", "DB_PASSWORD": REDACTED,
    }


def test_plan_json_and_shell_line_never_show_secrets() -> None:
    plan = LaunchPlan("vllm", ("vllm", "serve", "m", "--api-key", "sk-live-1"), {"HF_TOKEN": "hf_live"})
    text = str(plan.to_json()) + plan.shell_line()
    assert "sk-live-1" not in text
    assert "hf_live" not in text
    assert plan.shell_line() == "HF_TOKEN='***' vllm serve m --api-key '***'"


def test_full_env_overlays_base() -> None:
    plan = LaunchPlan("vllm", ("vllm",), {"A": "2", "B": "3"})
    assert plan.full_env({"A": "1", "C": "4"}) == {"A": "2", "B": "3", "C": "4"}


def test_exec_plan_calls_execvpe_with_argv_and_env() -> None:
    calls: list[tuple[str, list[str], dict[str, str]]] = []
    plan = LaunchPlan("vllm", ("python", "-m", "vllm"), {"X": "1"})
    with pytest.raises(SystemExit):
        exec_plan(plan, execvpe=lambda f, a, e: calls.append((f, a, e)))
    assert calls[0][0] == "python"
    assert calls[0][1] == ["python", "-m", "vllm"]
    assert calls[0][2]["X"] == "1"
