"""Run in SGLang's interpreter (dspark_inside on its PYTHONPATH): dspark's scheduler replay
(dspark_inside.sglang.replay_scheduler) on each case, and beside it an independent tally of the prefix hits by
SGLang's classic RadixCache.

stdin: {"env": {SGLANG_* settings, set before SGLang is imported},
"cases": [{"name", "request", "tally": bool}]}; stdout: one line
``SGLANG-REPLAY-CHECK {name: {"answer": the replay's answer, "tally": {seats: [[hits per request] per pass]}}}``.

The tally is computed apart from the replay: a RadixCache (mem_cache/radix_cache.py, the tree SGLang kept before
its unified tree, which the replay uses) is fed the requests' token ids in the order of the prefill batches the
replay reports (its `trace`): each request's prompt, less its last token (SGLang always computes it), is matched
when the request is first admitted, and after each batch the tokens it computed are inserted. With a pool that
evicts nothing, the hits SGLang counted must be these.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from array import array
from typing import Any

PREFIX = "SGLANG-REPLAY-CHECK "


def tally(prompts: list[list[int]], passes: list[tuple[str, list[list[list[Any]]]]], page: int) -> list[list[int]]:
    """Hits per request and pass, from match_prefix / insert on a fresh RadixCache shared by the passes in order."""
    # Imported once SGLang is (the replay prepares the host for it first).
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams, MatchPrefixParams  # noqa: PLC0415
    from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey  # noqa: PLC0415

    tree = RadixCache.create_simulated(page_size=page)
    out = []
    for tag, trace in passes:
        hits: dict[int, int] = {}
        for batch in trace:
            for rid, _prefix, _end in batch:
                i = int(rid[len(tag):])
                if i not in hits:
                    key = RadixKey(array("q", prompts[i][: len(prompts[i]) - 1]))
                    hits[i] = int(tree.match_prefix(MatchPrefixParams(key=key)).device_prefix_len)
            for rid, _prefix, end in batch:
                tree.insert(InsertParams(key=RadixKey(array("q", prompts[int(rid[len(tag):])][:end]))))
        out.append([hits[i] for i in range(len(prompts))])
    return out


def main() -> None:
    """Every case of stdin; one answer line."""
    job = json.load(sys.stdin)
    os.environ.update(job.get("env") or {})
    replay = importlib.import_module("dspark_inside.sglang.replay_scheduler")  # after the env: SGLang reads it
    results: dict[str, Any] = {}
    for case in job["cases"]:
        request = {**case["request"], "trace": True, "workers": 1}
        with contextlib.redirect_stdout(sys.stderr):
            answer = replay.replay(request)
        tallies: dict[str, list[list[int]]] = {}
        if case.get("tally") and answer.get("ok"):
            prompts = [r["prompt"] for r in request["requests"]]
            page = int(request["engine"]["page_size"])
            for r in answer["results"]:
                passes = [(tag, r[key]["trace"]) for tag, key in (("c", "cold"), ("w", "warm")) if r.get(key)]
                tallies[str(r["seats"])] = tally(prompts, passes, page)
        for r in answer.get("results") or []:
            for key in ("cold", "warm"):
                if r.get(key):
                    r[key].pop("trace", None)
        results[case["name"]] = {"answer": answer, "tally": tallies}
    print(PREFIX + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
