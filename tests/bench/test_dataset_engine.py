"""`dspark bench --dataset` on a small ShareGPT file against the real vLLM CPU engine: the prompts the tokenizer
measured are the ones the engine counted, and every request decodes its reply's length."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from dspark.bench.datasets import load_tokenizer, sharegpt_requests
from dspark.cli import main
from dspark.engines import engine_spec
from dspark.runtime.launch import LaunchPlan
from dspark.runtime.supervise import EngineProcess
from tests.bench.helpers import free_port

# A word-level tokenizer over the tiny model's 512 ids ("t0".."t511", one token per word), saved by the engine's
# transformers so that vLLM's API server loads it as it loads any model's.
_TOKENIZER = """
import sys, transformers as tf
from tokenizers import Tokenizer, models, pre_tokenizers
tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(512)}, unk_token="t0"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tf.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", eos_token="t1", pad_token="t2").save_pretrained(
    sys.argv[1])
"""


def _sharegpt(path: Path) -> list[dict[str, object]]:
    rng = random.Random(5)  # noqa: S311 - reproducible cases

    def words(n: int) -> str:
        return " ".join(f"t{rng.randrange(10, 512)}" for _ in range(n))

    # Usable conversations, and at least one vLLM's filter skips (a 2-word prompt).
    data: list[dict[str, object]] = [
        {"conversations": [{"from": "human", "value": words(p)}, {"from": "gpt", "value": words(o)}]}
        for p, o in ((12, 6), (2, 8), (30, 5), (20, 3), (7, 9))]
    path.write_text(json.dumps(data))
    return data


@pytest.mark.engine
@pytest.mark.timeout(400)
def test_sharegpt_dataset_against_the_cpu_engine(tiny_model: Path, vllm_python: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "qwen3-tiny-wordlevel"
    shutil.copytree(tiny_model, model)
    subprocess.run([vllm_python, "-c", _TOKENIZER, str(model)], check=True, capture_output=True, timeout=300)
    data = _sharegpt(tmp_path / "sharegpt.json")
    # dspark's reading of the model's tokenizer.json (its added tokens "t0".."t2" split words such as "t15" in
    # two, as the engine's transformers does): the counts the engine must report.
    expected, skipped = sharegpt_requests(data, "f", count=6, seed=0, output_len=None,
                                          tokenize=load_tokenizer(model))
    assert skipped >= 1
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    plan = LaunchPlan(engine="vllm", argv=(
        vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--max-num-seqs", "3",
        "--max-model-len", "512", "--enforce-eager", "--host", "127.0.0.1", "--port", str(port),
        "--kv-cache-memory-bytes", str(16 << 20)))
    engine = EngineProcess(plan, log_format=engine_spec("vllm").log_format, log_path=tmp_path / "engine.log")
    out = tmp_path / "bench.json"
    try:
        engine.start()
        engine.wait_healthy(url + "/health", 300)
        rc = main(["bench", "--url", url, "--dataset", str(tmp_path / "sharegpt.json"), "--tokenizer", str(model),
                   "--requests", "6", "--concurrency", "3", "--no-progress", "--goodput", "e2el:60000", "--json",
                   "--out", str(out)])
    finally:
        engine.stop(30)
    assert rc == 0, capsys.readouterr().err[-2000:] + (tmp_path / "engine.log").read_text()[-3000:]
    result = json.loads(out.read_text())
    stats = result["reps"][0]["stats"]
    assert stats["errors"] == 0
    # The engine's own usage counts: the tokenizer's prompt lengths, and each reply's length decoded (ignore_eos).
    assert stats["prompt_tokens_mean"] == pytest.approx(sum(r.prompt_len or 0 for r in expected) / 6)
    assert stats["output_tokens"] == sum(r.max_tokens or 0 for r in expected)
    assert f"{skipped} skipped by length" in result["prompt_source"]
    assert result["goodput"]["fraction"] == 1.0
