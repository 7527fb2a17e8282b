"""dspark bench against vLLM's own `vllm bench serve`, on the same live vLLM CPU server, in one run.

Builds a tiny random-weight Qwen3 with a word-level tokenizer ("t0".."t511", one token per word, so both clients
send text prompts of exactly --input-len tokens), starts vLLM's CPU build under dspark's supervisor, then
rotates the clients (dspark bench with and without its /metrics sampler, and vllm bench serve) on the same
workload (random prompts, --requests requests, --concurrency streams,
--max-tokens output tokens with ignore_eos) for --rounds rounds, and compares aggregate decode tok/s
(output tokens / wall time: vLLM's "Output token throughput"), TTFT and per-stream decode.

  python -m benchmarks.bench_vs_vllm [--rounds 8] [--requests 32] [--concurrency 8] [--max-tokens 128]

With --parity it compares instead the workload options both tools share, each run as its own command line
(`dspark bench ...` and `vllm bench serve ...`, so each one's client CPU is its whole process's): synthetic
prompts with --range-ratio and --goodput SLOs, a ShareGPT file through the model's tokenizer, and a request-rate
sweep (dspark's --profile sweep, then vllm bench serve at the same points: --max-concurrency 1, --max-concurrency
C, and each --request-rate), printing both figures and their ratio (request throughput, goodput, mean TTFT and
TPOT, client CPU per output token).

  python -m benchmarks.bench_vs_vllm --parity [--requests 48] [--concurrency 8] [--sweep-points 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dspark.bench.client import ClientConfig
from dspark.bench.report import write_atomic
from dspark.bench.runner import BenchSpec, run_bench
from dspark.engines import engine_spec
from dspark.runtime.launch import LaunchPlan
from dspark.runtime.supervise import EngineProcess

ROOT = Path(__file__).resolve().parents[1]

VOCAB = 512
# dspark bench as shipped (samples /metrics every 5 s), the same client without /metrics, and vLLM's own.
CLIENTS = ["dspark bench", "dspark bench --no-metrics", "vllm bench serve"]
BUILD = """
import sys, torch, transformers as tf
from tokenizers import Tokenizer, models, pre_tokenizers
out = sys.argv[1]
vocab = {f"t{i}": i for i in range(VOCAB)}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", eos_token="t1", pad_token="t2")
cfg = tf.Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=4096,
    tie_word_embeddings=True, dtype="bfloat16", eos_token_id=1, pad_token_id=2)
torch.manual_seed(0)
tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).save_pretrained(out)
fast.save_pretrained(out)
""".replace("VOCAB", str(VOCAB))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def text_prompts(count: int, length: int, seed: int) -> list[str]:
    """Prompts of exactly `length` tokens of the word-level vocabulary (ids 10.. to avoid the special ones)."""
    rng = random.Random(seed)  # noqa: S311 - reproducible prompts
    return [" ".join(f"t{rng.randrange(10, VOCAB)}" for _ in range(length)) for _ in range(count)]


def run_ours(url: str, model: str, a: argparse.Namespace, seed: int, read_metrics: bool) -> dict[str, float]:
    cfg = ClientConfig(base_url=url, model=model, max_tokens=a.max_tokens, concurrency=a.concurrency)
    spec = BenchSpec(client=cfg, prompts_for_rep=lambda _r: text_prompts(a.requests, a.input_len, seed),
                     prompt_source="word-level text", read_metrics=read_metrics)
    cpu0 = time.process_time()
    res = asyncio.run(run_bench(spec))
    cpu = time.process_time() - cpu0  # the whole bench: clients, and the /metrics scrapes when on
    s = res.reps[0].stats
    assert s.errors == 0, s.error_messages
    return {"aggregate_decode_tps": s.aggregate_decode_tps, "ttft_mean_s": s.ttft_mean_s,
            "per_stream_decode_tps": s.per_stream_decode_tps, "wall_s": s.wall_time_s,
            "tpot_mean_ms": s.tpot_ms.mean, "itl_mean_ms": s.itl_ms.mean, "e2e_mean_ms": s.e2e_ms.mean,
            "request_throughput": s.request_throughput,
            "output_tokens": float(s.output_tokens), "client_cpu_s": cpu}


def run_vllm(vllm: str, url: str, model: str, a: argparse.Namespace, seed: int, work: Path) -> dict[str, float]:
    name = f"vllm-bench-{seed}.json"
    argv = [vllm, "bench", "serve", "--backend", "vllm", "--base-url", url, "--model", model, "--tokenizer", model,
            "--dataset-name", "random", "--random-input-len", str(a.input_len), "--random-output-len",
            str(a.max_tokens), "--random-range-ratio", "0", "--num-prompts", str(a.requests), "--max-concurrency",
            str(a.concurrency), "--ignore-eos", "--seed", str(seed), "--disable-tqdm", "--save-result",
            "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--result-dir", str(work), "--result-filename", name]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    r = json.loads((work / name).read_text())
    assert r["failed"] == 0, r
    return {"aggregate_decode_tps": r["output_throughput"], "ttft_mean_s": r["mean_ttft_ms"] / 1000,
            "per_stream_decode_tps": 1000 / r["mean_tpot_ms"] if r["mean_tpot_ms"] else float("nan"),
            "wall_s": r["duration"], "output_tokens": float(r["total_output_tokens"]),
            "tpot_mean_ms": r["mean_tpot_ms"], "itl_mean_ms": r["mean_itl_ms"], "e2e_mean_ms": r["mean_e2el_ms"],
            "request_throughput": r["request_throughput"]}


def cpu_of_children() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def timed(argv: list[str]) -> float:
    """Run a client command line; the CPU seconds its process (and children) used."""
    cpu0 = cpu_of_children()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return cpu_of_children() - cpu0


def dspark_cli(url: str, out: Path, *args: str) -> tuple[dict[str, Any], float]:
    cpu = timed([sys.executable, "-m", "dspark", "bench", "--url", url, "--no-progress", "--json", "--out",
                 str(out), *args])
    return json.loads(out.read_text()), cpu


def vllm_cli(vllm: str, url: str, model: str, work: Path, name: str, *args: str) -> tuple[dict[str, Any], float]:
    cpu = timed([vllm, "bench", "serve", "--backend", "vllm", "--base-url", url, "--model", model, "--tokenizer",
                 model, "--ignore-eos", "--disable-tqdm", "--save-result", "--percentile-metrics",
                 "ttft,tpot,itl,e2el", "--result-dir", str(work), "--result-filename", name, *args])
    return json.loads((work / name).read_text()), cpu


def ours_figures(r: dict[str, Any], cpu: float) -> dict[str, float]:
    s = r["reps"][0]["stats"]
    good = (r.get("goodput") or {}).get("request_goodput")
    return {"request_throughput": r["request_throughput"], "request_goodput": good if good is not None else math.nan,
            "mean_ttft_ms": r["ttft_ms"]["mean"], "mean_tpot_ms": r["tpot_ms"]["mean"],
            "output_tokens": float(s["output_tokens"]), "errors": float(s["errors"]),
            "cpu_per_token_ms": 1e3 * cpu / max(s["output_tokens"], 1)}


def vllm_figures(r: dict[str, Any], cpu: float) -> dict[str, float]:
    good = r.get("request_goodput")
    return {"request_throughput": r["request_throughput"], "request_goodput": good if good is not None else math.nan,
            "mean_ttft_ms": r["mean_ttft_ms"], "mean_tpot_ms": r["mean_tpot_ms"],
            "output_tokens": float(r["total_output_tokens"]), "errors": float(r["failed"]),
            "cpu_per_token_ms": 1e3 * cpu / max(r["total_output_tokens"], 1)}


PARITY_KEYS = ("request_throughput", "request_goodput", "mean_ttft_ms", "mean_tpot_ms", "cpu_per_token_ms",
               "output_tokens")


def sharegpt_file(path: Path, count: int, seed: int) -> None:
    """A ShareGPT file in the word-level vocabulary: prompts of 2..400 words, replies of 2..160 (some outside
    vLLM's length bounds, so the filter is exercised), a few entries of one turn (skipped by both)."""
    rng = random.Random(seed)  # noqa: S311

    def words(lo: int, hi: int) -> str:
        return " ".join(f"t{rng.randrange(10, VOCAB)}" for _ in range(rng.randint(lo, hi)))

    data = [{"id": str(i), "conversations": [{"from": "human", "value": words(2, 400)},
                                             {"from": "gpt", "value": words(2, 160)}][: 1 if i % 17 == 0 else 2]}
            for i in range(count)]
    path.write_text(json.dumps(data))


def parity(a: argparse.Namespace, url: str, model: Path, vllm: str, work: Path) -> list[dict[str, Any]]:
    """Each workload with both tools on the same server; rows of (case, tool, figures)."""
    rows: list[dict[str, Any]] = []
    n, c, seed = str(a.requests), str(a.concurrency), "7"
    ilen, olen, ratio = str(a.input_len), str(a.max_tokens), "0.5"
    common = ["--requests", n, "--concurrency", c, "--seed", seed]
    # Text prompts, as vllm bench serve sends its random dataset: the server tokenizes both (sending token ids
    # instead lets every prompt reach the engine at once and changes the TTFT/TPOT split, not the throughput).
    synth = [*common, "--input-len", ilen, "--output-len", olen, "--range-ratio", ratio, "--prompt-kind", "text"]
    vsynth = ["--dataset-name", "random", "--random-input-len", ilen, "--random-output-len", olen,
              "--random-range-ratio", ratio, "--num-prompts", n, "--seed", seed]

    # Client CPU per token here is each tool's whole process (imports included: vLLM's pulls in torch) over its
    # output tokens; benchmarks/client_cpu_vs_vllm.py cancels start-up (two sizes, the difference per token).
    def add(case: str, tool: str, fig: dict[str, float]) -> None:
        rows.append({"case": case, "tool": tool, **fig})
        print(f"{case:>28} {tool:>16}: " + ", ".join(f"{k} {fig[k]:.4g}" for k in PARITY_KEYS), flush=True)

    # Warm-up (the first run after start-up is slower), then the SLOs: the median TTFT and the p90 TPOT of a
    # second run of this workload on this server, so goodput is neither all nor nothing.
    dspark_cli(url, work / "warm.json", *synth)
    warm, _ = dspark_cli(url, work / "warm.json", *synth)
    slo = [f"ttft:{warm['ttft_ms']['p50'] * a.slo_scale:.1f}", f"tpot:{warm['tpot_ms']['p90'] * a.slo_scale:.2f}"]
    print(f"SLOs from a warm run's TTFT p50 and TPOT p90: {' '.join(slo)}")
    for i in range(a.rounds if "goodput" in a.cases else 0):  # alternate who goes first
        order = ("dspark", "vllm") if i % 2 == 0 else ("vllm", "dspark")
        for tool in order:
            if tool == "dspark":
                r, cpu = dspark_cli(url, work / f"rr{i}.json", *synth, *(x for s in slo for x in ("--goodput", s)))
                add(f"range-ratio 0.5 + goodput #{i + 1}", "dspark bench", ours_figures(r, cpu))
            else:
                r, cpu = vllm_cli(vllm, url, str(model), work, f"v-rr{i}.json", *vsynth, "--max-concurrency", c,
                                  "--goodput", *slo)
                add(f"range-ratio 0.5 + goodput #{i + 1}", "vllm bench serve", vllm_figures(r, cpu))
    data = work / "sharegpt.json"
    sharegpt_file(data, 400, 1)
    for i in range(a.rounds if "sharegpt" in a.cases else 0):
        order = ("dspark", "vllm") if i % 2 == 0 else ("vllm", "dspark")
        for tool in order:
            if tool == "dspark":
                r, cpu = dspark_cli(url, work / f"sg{i}.json", *common, "--dataset", str(data), "--tokenizer",
                                    str(model))
                add(f"ShareGPT #{i + 1}", "dspark bench", ours_figures(r, cpu))
            else:
                r, cpu = vllm_cli(vllm, url, str(model), work, f"v-sg{i}.json", "--dataset-name", "sharegpt",
                                  "--dataset-path", str(data), "--num-prompts", n, "--seed", seed,
                                  "--max-concurrency", c)
                add(f"ShareGPT #{i + 1}", "vllm bench serve", vllm_figures(r, cpu))
    if "sweep" not in a.cases:
        return rows
    # The sweep: dspark picks the rates; vllm bench serve runs the same points.
    cpu = timed([sys.executable, "-m", "dspark", "bench", "--url", url, "--no-progress", "--json", "--out",
                 str(work / "sweep.json"), *synth, "--profile", "sweep", "--sweep-points", str(a.sweep_points)])
    sweep = json.loads((work / "sweep.json").read_text())
    total_tokens = sum(p["result"]["reps"][0]["stats"]["output_tokens"] for p in sweep["points"])
    for p in sweep["points"]:
        label = f"sweep: {p['label']}"
        fig = ours_figures(p["result"], 0.0)
        fig["cpu_per_token_ms"] = 1e3 * cpu / max(total_tokens, 1)  # the sweep's one process, over all points
        add(label, "dspark bench", fig)
        extra = ["--max-concurrency", str(p["concurrency"])]
        if p["target_rate"] is not None:
            extra += ["--request-rate", f"{p['target_rate']:.6g}", "--burstiness", "1"]
        r, vcpu = vllm_cli(vllm, url, str(model), work, f"v-sweep-{len(rows)}.json", *vsynth, *extra)
        add(label, "vllm bench serve", vllm_figures(r, vcpu))
    return rows


def print_parity(rows: list[dict[str, Any]]) -> None:
    cases = list(dict.fromkeys(r["case"] for r in rows))
    print(f"\n{'case':34} {'figure':20} {'dspark bench':>14} {'vllm bench serve':>17} {'ratio':>8}")
    ratios: dict[tuple[str, str], list[float]] = {}
    for case in cases:
        ours = next(r for r in rows if r["case"] == case and r["tool"] == "dspark bench")
        theirs = next(r for r in rows if r["case"] == case and r["tool"] == "vllm bench serve")
        for k in PARITY_KEYS:
            x, y = ours[k], theirs[k]
            if math.isnan(x) and math.isnan(y):
                continue
            ratio = x / y if y else math.nan
            ratios.setdefault((case.split(" #")[0], k), []).append(ratio)
            print(f"{case:34} {k:20} {x:14.4g} {y:17.4g} {ratio:8.3f}")
    print(f"\n{'median ratio over rounds':34} {'figure':20} {'rounds':>7} {'median':>8}  per round")
    for (case, k), values in ratios.items():
        if len(values) > 1:
            print(f"{case:34} {k:20} {len(values):7d} {statistics.median(values):8.3f}  "
                  + ", ".join(f"{v:.3f}" for v in values))


def run_parity(a: argparse.Namespace, engine: EngineProcess, url: str, model: Path, vllm: str, work: Path) -> int:
    try:
        print(f"vLLM healthy after {engine.wait_healthy(url + '/health', 900):.0f} s; log: {work / 'engine.log'}")
        rows = parity(a, url, model, vllm, work)
    finally:
        stop = engine.stop(30)
        print(f"engine stopped: rc {stop.returncode}, killed {stop.killed}")
    print_parity(rows)
    if a.out:
        write_atomic(a.out, json.dumps({"workload": {k: str(v) for k, v in vars(a).items()}, "rows": rows},
                                       indent=2) + "\n")
    return 0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine-python", default=str(ROOT / ".engines/vllm/bin/python"))
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--work-dir", type=Path)
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    p.add_argument("--parity", action="store_true", help="compare the shared workload options (see above)")
    p.add_argument("--sweep-points", type=int, default=3)
    p.add_argument("--server", choices=["vllm", "fake", "stepping"], default="vllm",
                   help="with --parity: the vLLM CPU engine, or tests/bench/fake_server.py (fake: a paced stream "
                        "per request; stepping: a batched engine of known step cost with half --concurrency seats, "
                        "so requests queue): no CPU-bound engine, the clients' own agreement")
    p.add_argument("--token-delay", type=float, default=0.005, help="the fake server's seconds between tokens")
    p.add_argument("--cases", default="goodput,sharegpt,sweep", help="with --parity: which cases to run")
    p.add_argument("--slo-scale", type=float, default=1.0,
                   help="with --parity: the SLOs are a warm run's TTFT p50 and TPOT p90 times this (off a cluster "
                        "of equal latencies, where a client's own jitter of a millisecond decides)")
    return p.parse_args()


def main() -> int:
    a = parse_args()
    work = a.work_dir or Path(tempfile.mkdtemp(prefix="dspark-vs-vllm-"))
    model = work / "qwen3-tiny-wordlevel"
    if not (model / "tokenizer.json").exists():
        subprocess.run([a.engine_python, "-c", BUILD, str(model)], check=True, capture_output=True, timeout=600)
    vllm = str(Path(a.engine_python).with_name("vllm"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    plan = LaunchPlan(engine="vllm", argv=(
        a.engine_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--enforce-eager",
        "--max-num-seqs", str(a.concurrency), "--kv-cache-memory-bytes", str(64 << 20), "--max-model-len", "2048",
        "--port", str(port), "--host", "127.0.0.1",
        # --parity: each tool re-sends its prompts of one --seed, and dspark's sweep gives each point fresh ones
        # where vllm's runs re-send theirs: with the prefix cache on, the two would not run alike.
        *(["--no-enable-prefix-caching"] if a.parity else [])))
    if a.server == "fake":  # tokens --token-delay apart per stream whatever the load: only the clients differ
        plan = LaunchPlan(engine="vllm", argv=(sys.executable, str(ROOT / "tests" / "bench" / "fake_server.py"),
                                               "--port", str(port), "--token-delay", str(a.token_delay)))
    if a.server == "stepping":  # a continuously batched engine of known step cost, seats half the streams
        plan = LaunchPlan(engine="vllm", argv=(
            sys.executable, str(ROOT / "tests" / "bench" / "fake_server.py"), "--port", str(port), "--step-fixed",
            str(a.token_delay), "--step-per-running", str(a.token_delay / 4), "--max-num-seqs",
            str(max(a.concurrency // 2, 1))))
    engine = EngineProcess(plan, log_path=work / "engine.log", log_format=engine_spec("vllm").log_format)
    engine.start()
    rows: list[dict[str, Any]] = []
    if a.parity:
        return run_parity(a, engine, url, model, vllm, work)
    try:
        print(f"vLLM healthy after {engine.wait_healthy(url + '/health', 900):.0f} s; log: {work / 'engine.log'}")
        for rnd in range(a.rounds):
            # Rotate who goes first, so warm-up and drift do not favour one client.
            order = CLIENTS[rnd % len(CLIENTS):] + CLIENTS[:rnd % len(CLIENTS)]
            for who in order:
                seed = 1000 * rnd + CLIENTS.index(who)
                t0 = time.monotonic()
                if who == "vllm bench serve":
                    fig = run_vllm(vllm, url, str(model), a, seed, work)
                else:
                    fig = run_ours(url, str(model), a, seed, read_metrics=who == "dspark bench")
                rows.append({"round": rnd + 1, "client": who, **fig})
                cpu = f", client CPU {fig['client_cpu_s']:.2f} s" if "client_cpu_s" in fig else ""
                print(f"round {rnd + 1} {who:>24}: {fig['aggregate_decode_tps']:7.1f} tok/s aggregate, "
                      f"TTFT {fig['ttft_mean_s']:.3f} s, per-stream {fig['per_stream_decode_tps']:6.1f} tok/s, "
                      f"{fig['output_tokens']:.0f} tokens ({time.monotonic() - t0:.0f} s{cpu})", flush=True)
    finally:
        stop = engine.stop(30)
        print(f"engine stopped: rc {stop.returncode}, killed {stop.killed}")

    def value(n: int, client: str, key: str) -> float:
        return float(next(r[key] for r in rows if r["round"] == n and r["client"] == client))

    rounds = range(1, a.rounds + 1)
    keys = ("aggregate_decode_tps", "ttft_mean_s", "per_stream_decode_tps", "tpot_mean_ms", "itl_mean_ms",
            "e2e_mean_ms", "request_throughput")
    summary = {k: {c: statistics.mean(value(n, c, k) for n in rounds) for c in CLIENTS} for k in keys}
    # Paired per round against vllm bench serve: the machine's load drifts (other engines share its cores),
    # one round's runs less so; the median resists the rounds a neighbour's engine start lands in.
    paired = {c: [value(n, c, "aggregate_decode_tps") / value(n, "vllm bench serve", "aggregate_decode_tps") - 1
                  for n in rounds] for c in CLIENTS[:2]}
    spread = {c: statistics.pstdev(value(n, c, "aggregate_decode_tps") for n in rounds)
              / summary["aggregate_decode_tps"][c] for c in CLIENTS}
    print(f"\nworkload: {a.requests} requests x {a.input_len} in / {a.max_tokens} out, {a.concurrency} streams, "
          f"{a.rounds} rounds")
    print(f"{'mean over rounds':24}" + "".join(f"{c:>26}" for c in CLIENTS))
    for k, v in summary.items():
        print(f"{k:24}" + "".join(f"{v[c]:26.3f}" for c in CLIENTS))
    print(f"{'run-to-run spread (sd)':24}" + "".join(f"{spread[c]:26.1%}" for c in CLIENTS))
    for c, diffs in paired.items():
        print(f"aggregate decode, {c} against vllm bench serve: median {statistics.median(diffs):+.1%}, "
              f"mean {statistics.mean(diffs):+.1%}; per round " + ", ".join(f"{x:+.1%}" for x in diffs))
    if a.out:
        write_atomic(a.out, json.dumps({"workload": vars(a) | {"work_dir": str(work), "out": str(a.out),
                                                              "engine_python": a.engine_python},
                                        "rows": rows, "summary": summary, "aggregate_diff_per_round": paired,
                                        "spread": spread}, indent=2,
                                       default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
