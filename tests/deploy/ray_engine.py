"""A stand-in for `vllm serve ... --distributed-executor-backend ray` on a real Ray cluster (vLLM's CPU build has no
Ray backend, so the sweep's Ray path is tested with this): it joins the cluster at RAY_ADDRESS as the engine's
driver does, reserves one {"GPU": 1} bundle per rank in a placement group (vLLM's initialize_ray_cluster), starts
one worker actor in each bundle, records where each one runs, then prints vLLM's start-up lines and serves the
fake OpenAI API (tests/bench/fake_server.py) until SIGTERM/SIGINT, when it removes its placement group.

    python ray_engine.py MODEL --max-num-seqs N --tensor-parallel-size T ... --port P

Environment: RAY_ADDRESS (the cluster), RAY_ENGINE_RECORD (a JSON-lines file: one line per start, {"pid", "seats",
"world", "workers": [{"node_id", "pid"}]}), RAY_ENGINE_POOL (JSON {seats: KV pool tokens} to print; default
16384), RAY_ENGINE_LEAK (a name: the placement group is detached under that name and left behind at the
stop, as a worker that outlives its engine holds its GPUs).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from tests.bench.fake_server import FakeConfig, FakeServer  # the checkout is on PYTHONPATH (the test sets it)


def flags_of(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """The model and every --flag as vLLM's `non-default args:` line shows it (ints and JSON parsed, bare flags True,
    --no-X False)."""
    model, out, i = "", {}, 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--"):
            model = model or arg
            i += 1
            continue
        name, _, inline = arg[2:].partition("=")
        key = name.replace("-", "_")
        if inline or (i + 1 < len(argv) and not argv[i + 1].startswith("--")):
            raw = inline or argv[i + 1]
            try:
                out[key] = json.loads(raw)
            except ValueError:
                out[key] = raw
            i += 1 if inline else 2
        elif key.startswith("no_"):
            out[key[3:]] = False
            i += 1
        else:
            out[key] = True
            i += 1
    return model, out


def main(argv: list[str]) -> int:
    import ray  # noqa: PLC0415 - the test's interpreter has the `ray` extra
    from ray.util.placement_group import placement_group, remove_placement_group  # noqa: PLC0415
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # noqa: PLC0415

    model, flags = flags_of(argv)
    seats = int(flags.get("max_num_seqs", 256))
    world = int(flags.get("tensor_parallel_size", 1)) * int(flags.get("pipeline_parallel_size", 1))
    port = int(flags.get("port", 8000))
    print(f"(APIServer pid={os.getpid()}) INFO [api_utils.py:286] non-default args: "
          f"{ {'model': model, **flags}!r}", flush=True)
    assert flags.get("distributed_executor_backend") == "ray", flags
    ray.init(address=os.environ["RAY_ADDRESS"], logging_level=logging.ERROR, log_to_driver=False)
    leak = os.environ.get("RAY_ENGINE_LEAK", "")
    pg = placement_group([{"GPU": 1}] * world, strategy="PACK", **({"name": leak, "lifetime": "detached"}
                                                                   if leak else {}))
    ray.get(pg.ready(), timeout=120)

    @ray.remote(num_gpus=1, num_cpus=0)
    class Worker:
        def where(self) -> dict[str, Any]:
            return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    workers = [Worker.options(scheduling_strategy=PlacementGroupSchedulingStrategy(  # type: ignore[attr-defined]
        placement_group=pg, placement_group_bundle_index=i)).remote() for i in range(world)]
    where = ray.get([w.where.remote() for w in workers], timeout=120)
    record = os.environ.get("RAY_ENGINE_RECORD")
    if record:
        with Path(record).open("a") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "seats": seats, "world": world, "workers": where}) + "\n")
    pools = json.loads(os.environ.get("RAY_ENGINE_POOL", "{}"))
    pool = int(pools.get(str(seats), 16384))
    print(f"(EngineCore pid={os.getpid()}) INFO [kv_cache_utils.py:2327] GPU KV cache size: {pool:,} tokens, "
          f"Maximum concurrency for 1,024 tokens per request: {pool / 1024:.2f}x", flush=True)

    async def serve() -> None:
        name = str(flags.get("served_model_name", model))
        srv = FakeServer(FakeConfig(seats=seats, model=name), "127.0.0.1", port)
        await srv.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        await stop.wait()
        await srv.stop()

    try:
        asyncio.run(serve())
    finally:
        for w in workers:
            ray.kill(w)
        if not leak:
            remove_placement_group(pg)
        ray.shutdown()
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:3] == ["-m", "vllm.entrypoints.cli.main", "serve"]:  # as the engine's interpreter is run
        args = args[3:]
    sys.exit(main(args))
