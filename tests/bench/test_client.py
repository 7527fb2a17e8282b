"""The streaming client and the bench runner against a local fake streaming server (loopback only)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from dspark.bench.client import ClientConfig, _consume, _Stream, make_client, request_body, send_one
from dspark.bench.http import ServerProtocolError
from dspark.bench.prompts import synthetic_token_prompts
from dspark.bench.runner import BenchSpec, run_bench
from dspark.bench.shard import run_pass
from dspark.core.errors import InputError
from tests.bench.fake_server import FakeConfig, FakeServer
from tests.bench.helpers import free_port


def cfg(url: str, **kw: object) -> ClientConfig:
    base: dict[str, object] = {"base_url": url, "model": "fake-model", "max_tokens": 5, "concurrency": 4}
    base.update(kw)
    return ClientConfig(**base)  # type: ignore[arg-type]


def test_request_body() -> None:
    c = ClientConfig(base_url="http://x", model="m", max_tokens=7)
    assert request_body(c, [1, 2, 3]) == {
        "model": "m", "max_tokens": 7, "stream": True, "stream_options": {"include_usage": True},
        "ignore_eos": True, "prompt": [1, 2, 3],
    }
    chat = ClientConfig(base_url="http://x", model="m", endpoint="chat", ignore_eos=False)
    assert request_body(chat, "hi")["messages"] == [{"role": "user", "content": "hi"}]
    assert "ignore_eos" not in request_body(chat, "hi")
    with pytest.raises(InputError, match="token-id prompts need the completions endpoint"):
        request_body(chat, [1, 2])
    with pytest.raises(InputError, match="chat messages need --endpoint chat"):
        request_body(c, [{"role": "user", "content": "hi"}])


class _Pieces:
    """A response stand-in whose raw body arrives in awkward pieces."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for p in self._pieces:
            yield p


def test_sse_split_across_pieces_and_crlf() -> None:
    body = (b'data: {"choices":[{"text":"a"}]}\r\n\r\n'
            b': keep-alive comment\r\n\r\n'
            b'data: {"choices":[{"text":""}]}\n\n'
            b'data: {"choices":[],"usage":{"completion_tokens":2,"prompt_tokens":9}}\n\n'
            b"data: [DONE]\n\n"
            b'data: {"choices":[{"text":"after done"}]}\n\n')
    pieces = [body[i:i + 7] for i in range(0, len(body), 7)]
    stream = _Stream(chat=False)
    asyncio.run(_consume(_Pieces(pieces), stream))  # type: ignore[arg-type]
    assert (stream.chunks, stream.completion_tokens, stream.prompt_tokens, stream.error) == (2, 2, 9, None)


def test_chat_role_chunk_is_not_a_token() -> None:
    s = _Stream(chat=True)
    s.event(b'{"choices":[{"delta":{"role":"assistant","content":""}}]}', 1.0)
    assert (s.first, s.chunks) == (None, 0)
    s.event(b'{"choices":[{"delta":{"content":"hi"}}]}', 2.0)
    assert (s.first, s.chunks) == (2.0, 1)


def test_error_event_ends_the_stream() -> None:
    s = _Stream(chat=False)
    assert s.event(b'{"error": {"message": "overloaded", "code": 503}}', 1.0) is False
    assert s.error == "overloaded"


def test_completions_pass_counts_tokens_from_usage() -> None:
    async def go() -> None:
        async with FakeServer(FakeConfig(token_delay=0.001)) as srv:
            prompts = synthetic_token_prompts(8, 12, vocab_size=500, seed=1)
            seen: list[int] = []
            records, wall = await run_pass(cfg(srv.url), prompts, on_record=lambda r: seen.append(r.index))
            assert [r.index for r in records] == list(range(8))
            assert sorted(seen) == list(range(8))
            assert all(r.ok and r.output_tokens == 5 and r.prompt_tokens == 12 for r in records)
            assert all(r.start < r.first_token <= r.last_token <= r.end for r in records)  # type: ignore[operator]
            assert wall >= max(r.end for r in records) - min(r.start for r in records)
            assert srv.state.max_running == 4  # 4 closed-loop clients, never more
            assert srv.state.connections == 4  # each client keeps its connection: bodies are read to the end
    asyncio.run(go())


def test_chat_without_usage_counts_chunks() -> None:
    async def go() -> None:
        async with FakeServer(FakeConfig(usage=False)) as srv:
            c = cfg(srv.url, endpoint="chat", max_tokens=6)
            async with make_client(c) as http:
                rec = await send_one(http, c, 0, "hello there")
            assert rec.ok and rec.output_tokens == 6 and rec.prompt_tokens is None
    asyncio.run(go())


def test_failures_become_records_not_exceptions() -> None:
    async def go() -> None:
        async with FakeServer(FakeConfig(fail_every=3)) as srv:
            records, _ = await run_pass(cfg(srv.url), synthetic_token_prompts(6, 4, vocab_size=500, seed=0))
            errors = [r.error for r in records if r.error]
            assert errors == ['HTTP 500: {"error": {"message": "injected failure"}}'] * 2
        dead = cfg(f"http://127.0.0.1:{free_port()}")
        async with make_client(dead) as http:
            rec = await send_one(http, dead, 0, [1, 2])
        assert rec.error is not None and rec.error.startswith("ConnectError")
        assert rec.output_tokens == 0
    asyncio.run(go())


def test_bench_reps_and_warm_rerun_read_the_metrics() -> None:
    async def go() -> None:
        async with FakeServer(FakeConfig(preempt_every=5)) as srv:
            spec = BenchSpec(
                client=cfg(srv.url, model=""),
                prompts_for_rep=lambda rep: synthetic_token_prompts(5, 10, vocab_size=500, seed=rep),
                prompt_source="synthetic", reps=2, warm_rerun=True, sample_interval_s=0.05,
            )
            res = await run_bench(spec)
        assert res.model == "fake-model"  # from /v1/models
        assert [p.label for p in res.passes] == ["rep 1", "rep 2", "warm re-run"]
        hit_rates = [p.engine.prefix_hit_rate for p in res.passes if p.engine]
        assert hit_rates == [0.0, 0.0, 1.0]
        assert [p.engine.preemptions for p in res.passes if p.engine] == [1.0, 1.0, 1.0]
        assert res.summary["warm_prefix_hit_rate"] == 1.0
        assert res.summary["preemptions"] == 3.0
        assert res.summary["errors"] == 0.0
        assert res.summary["queue_time_mean_s"] == pytest.approx(0.001)
        assert not res.clean
    asyncio.run(go())


def test_bench_without_metrics_endpoint_reports_why() -> None:
    async def go() -> None:
        async with FakeServer() as srv:
            spec = BenchSpec(client=cfg(srv.url), prompts_for_rep=lambda rep: [[1, 2, 3]], prompt_source="x",
                             metrics_url=srv.url + "/nope")
            res = await run_bench(spec)
        (p,) = res.reps
        assert p.engine is None
        assert p.metrics_error is not None and "404" in p.metrics_error
        assert res.summary["preemptions"] is None
    asyncio.run(go())


def test_unreachable_server_fails_fast() -> None:
    spec = BenchSpec(client=cfg(f"http://127.0.0.1:{free_port()}", model=""), prompts_for_rep=lambda r: [[1]],
                     prompt_source="x")
    with pytest.raises(httpx.ConnectError):
        asyncio.run(run_bench(spec))


def test_fast_path_agrees_with_the_full_parse() -> None:
    # vLLM's compact JSON and a spaced one take the fast path; usage, errors and quoted keys in text do not.
    chunks = [
        b'{"id":"c","object":"text_completion","choices":[{"index":0,"text":"","finish_reason":null}]}',
        b'{"id": "c", "choices": [{"index": 0, "text": "say \\"usage\\"", "finish_reason": null}]}',
        b'{"id":"c","choices":[{"index":0,"text":"x","finish_reason":"length"}],"usage":null}',
        b'{"id":"c","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3}}',
    ]
    s = _Stream(chat=False)
    for i, c in enumerate(chunks):
        assert s.event(c, float(i)) is True
    assert (s.first, s.last, s.chunks, s.completion_tokens, s.prompt_tokens) == (0.0, 2.0, 3, 3, 4)


def test_raw_http_parses_chunked_framing_split_anywhere() -> None:
    from dspark.bench.http import _Response  # noqa: PLC0415

    pieces = (b"data: a", b"\n\ndata: [DONE", b"]\n\n")  # chunk borders that cut the events anywhere
    raw = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
           + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n")
    for step in (1, 2, 5, len(raw)):
        got: list[bytes] = []
        resp = _Response(lambda b, _t, got=got: got.append(b))  # type: ignore[misc]
        for i in range(0, len(raw), step):
            resp.feed(raw[i:i + step], 0.0)
        assert (b"".join(got), resp.done, resp.status) == (b"data: a\n\ndata: [DONE]\n\n", True, 200)


def test_raw_http_keeps_one_connection_per_client_and_reports_http_errors() -> None:
    async def go() -> None:
        async with FakeServer(FakeConfig(fail_every=2)) as srv:
            records, _ = await run_pass(cfg(srv.url, concurrency=1), synthetic_token_prompts(4, 4, vocab_size=500,
                                                                                            seed=0))
            assert [r.error for r in records] == [None, 'HTTP 500: {"error": {"message": "injected failure"}}'] * 2
            assert srv.state.connections == 1  # kept alive across 4 requests, the failed ones included
            assert [r.output_tokens for r in records if r.ok] == [5, 5]
    asyncio.run(go())


@pytest.mark.parametrize("payload", [b"[1,2]", b'{"choices":5}', b'{"choices":[5]}', b'{"usage":[1]}', b"{",
                                     b'{"usage":{"completion_tokens":"3"}}', b'{"usage":{"completion_tokens":-1}}',
                                     b'{"usage":{"completion_tokens":' + b"9" * 5000 + b"}}", b"[" * 100_000],
                         ids=lambda p: p[:24].decode())
def test_an_event_of_the_wrong_shape_is_a_protocol_error(payload: bytes) -> None:
    """Issue 26 item 17: `data: [1,2]` was an AttributeError traceback inside asyncio; a string count was kept."""
    for chat in (False, True):
        with pytest.raises(ServerProtocolError):
            _Stream(chat=chat, max_tokens=8).event(payload, 0.0)
    with pytest.raises(ServerProtocolError, match="'delta' is not an object"):
        _Stream(chat=True).event(b'{"choices":[{"delta":5}]}', 0.0)
    assert issubclass(ServerProtocolError, InputError)  # exit 2 with its message
