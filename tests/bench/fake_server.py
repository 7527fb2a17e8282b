"""A fast fake OpenAI-compatible streaming server (stdlib asyncio only), usable in-process or as a fake engine.

In-process: `async with FakeServer(...) as srv: srv.url`. As a script it behaves like a tiny vLLM for the
sweep: it prints vLLM's `non-default args:` and `KV cache size:` lines, serves /health, /v1/models,
/v1/completions, /v1/chat/completions and /metrics (vLLM metric names), and exits on SIGTERM.
Each request streams max_tokens chunks; a prompt seen before counts as a full prefix-cache hit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeState:
    """Counters the fake /metrics exposes."""

    seen: set[str] = field(default_factory=set)
    queries: int = 0
    hits: int = 0
    generation: int = 0
    running: int = 0
    max_running: int = 0
    connections: int = 0
    requests: int = 0
    preemptions: int = 0
    heads: list[dict[str, str]] = field(default_factory=list)  # every request's headers, lower-cased names


@dataclass
class FakeConfig:
    """How the fake behaves."""

    token_delay: float = 0.0  # seconds between streamed tokens
    first_token_delay: float = 0.0
    fail_every: int = 0  # every k-th request answers HTTP 500 (0: never)
    usage: bool = True  # send the usage chunk when asked
    preempt_every: int = 0  # count a preemption every k-th request
    model: str = "fake-model"
    chunk_batch: int = 1  # tokens per write (1: one write per token)
    # A continuously batched engine with a known step cost: up to `seats` requests run, and every step takes
    # step_fixed_s + step_per_running_s × running requests and gives each running request one token (its
    # first step is its prefill). 0: off (tokens as fast as written, or token_delay apart).
    step_fixed_s: float = 0.0
    step_per_running_s: float = 0.0
    seats: int = 1


class _Stepper:
    """The engine loop of a stepping fake: one step at a time, every running request advances together."""

    def __init__(self, cfg: FakeConfig) -> None:
        self.cfg = cfg
        self.running = 0
        self.step = 0
        self.seats = asyncio.Semaphore(cfg.seats)
        self.cond = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        while self.running:
            await asyncio.sleep(self.cfg.step_fixed_s + self.cfg.step_per_running_s * self.running)
            async with self.cond:
                self.step += 1
                self.cond.notify_all()
        self._task = None

    async def join(self) -> int:
        """Take a seat (waiting for one); the step number the request joins at."""
        await self.seats.acquire()
        self.running += 1
        if self._task is None:
            self._task = asyncio.create_task(self._loop())
        return self.step

    async def after(self, step: int) -> int:
        """Wait until step `step` has finished; the current step number."""
        async with self.cond:
            await self.cond.wait_for(lambda: self.step > step)
            return self.step

    def leave(self) -> None:
        self.running -= 1
        self.seats.release()


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class FakeServer:
    """The server; `url` once started."""

    def __init__(self, config: FakeConfig | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config or FakeConfig()
        self.state = FakeState()
        self._host = host
        self._port = port
        self._server: asyncio.base_events.Server | None = None
        self._stepper = _Stepper(self.config) if self.config.step_fixed_s > 0 else None
        self.url = ""

    async def __aenter__(self) -> FakeServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port, backlog=1024)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://{self._host}:{port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def metrics_text(self) -> str:
        s = self.state
        lab = f'{{engine="0",model_name="{self.config.model}"}}'
        return "".join(
            [
                "# TYPE vllm:num_requests_running gauge\n",
                f"vllm:num_requests_running{lab} {float(s.running)}\n",
                "# TYPE vllm:num_requests_waiting gauge\n",
                f"vllm:num_requests_waiting{lab} 0.0\n",
                "# TYPE vllm:kv_cache_usage_perc gauge\n",
                f"vllm:kv_cache_usage_perc{lab} {min(1.0, s.running / 100):.4f}\n",
                "# TYPE vllm:prefix_cache_queries counter\n",
                f"vllm:prefix_cache_queries_total{lab} {float(s.queries)}\n",
                "# TYPE vllm:prefix_cache_hits counter\n",
                f"vllm:prefix_cache_hits_total{lab} {float(s.hits)}\n",
                "# TYPE vllm:num_preemptions counter\n",
                f"vllm:num_preemptions_total{lab} {float(s.preemptions)}\n",
                "# TYPE vllm:generation_tokens counter\n",
                f"vllm:generation_tokens_total{lab} {float(s.generation)}\n",
                "# TYPE vllm:request_queue_time_seconds histogram\n",
                f'vllm:request_queue_time_seconds_bucket{{engine="0",le="+Inf",model_name="{self.config.model}"}} '
                f"{float(s.requests)}\n",
                f"vllm:request_queue_time_seconds_count{lab} {float(s.requests)}\n",
                f"vllm:request_queue_time_seconds_sum{lab} {0.001 * s.requests}\n",
            ]
        )

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.state.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                self.state.heads.append({"_path": path, **headers})
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                await self._route(method, path, body, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _reply(self, writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str) -> None:
        reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}[status]
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()

    async def _route(self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter) -> None:
        if method == "GET" and path == "/health":
            await self._reply(writer, 200, b"", "text/plain")
        elif method == "GET" and path == "/v1/models":
            data = json.dumps({"object": "list", "data": [{"id": self.config.model, "object": "model",
                                                           "owned_by": "fake-engine"}]})
            await self._reply(writer, 200, data.encode(), "application/json")
        elif method == "GET" and path == "/version":
            await self._reply(writer, 200, b'{"version": "0.0-fake"}', "application/json")
        elif method == "GET" and path == "/metrics":
            await self._reply(writer, 200, self.metrics_text().encode(), "text/plain; version=0.0.4")
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            await self._stream(json.loads(body), path.endswith("chat/completions"), writer)
        else:
            await self._reply(writer, 404, b'{"error": "not found"}', "application/json")

    def _count_prompt(self, req: dict[str, Any], chat: bool) -> int:
        """Prompt tokens of a request, counted into the prefix-cache counters (a prompt seen before hits)."""
        st = self.state
        prompt = req.get("messages") if chat else req.get("prompt")
        key = json.dumps(prompt)
        n_prompt = len(prompt) if isinstance(prompt, list) and not chat else len(key.split())
        st.queries += n_prompt
        if key in st.seen:
            st.hits += n_prompt
        st.seen.add(key)
        return n_prompt

    async def _stream(self, req: dict[str, Any], chat: bool, writer: asyncio.StreamWriter) -> None:
        cfg, st = self.config, self.state
        st.requests += 1
        if cfg.fail_every and st.requests % cfg.fail_every == 0:
            await self._reply(writer, 500, b'{"error": {"message": "injected failure"}}', "application/json")
            return
        if cfg.preempt_every and st.requests % cfg.preempt_every == 0:
            st.preemptions += 1
        n_prompt = self._count_prompt(req, chat)
        n = int(req.get("max_tokens", 16))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        if self._stepper is not None:
            await self._stepped(req, n, n_prompt, writer)
            return
        st.running += 1
        st.max_running = max(st.max_running, st.running)
        try:
            if cfg.first_token_delay:
                await asyncio.sleep(cfg.first_token_delay)
            created = int(time.time())
            # Serialised once per request: the fake must stay far cheaper than the client it measures.
            frames = []
            for last in (False, True):
                if chat:
                    choice: dict[str, Any] = {"index": 0, "delta": {"content": "x"}, "finish_reason": None}
                    obj = "chat.completion.chunk"
                else:
                    choice = {"index": 0, "text": "", "finish_reason": "length" if last else None}
                    obj = "text_completion"
                msg = {"id": "cmpl-fake", "object": obj, "created": created, "model": cfg.model, "choices": [choice]}
                frames.append(_chunked(b"data: " + json.dumps(msg).encode() + b"\n\n"))
            for i in range(n):
                writer.write(frames[i == n - 1])
                st.generation += 1
                if (i + 1) % cfg.chunk_batch == 0:
                    await writer.drain()
                    if cfg.token_delay:
                        await asyncio.sleep(cfg.token_delay)
            opts = req.get("stream_options") or {}
            if cfg.usage and opts.get("include_usage"):
                usage = {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n}
                msg = {"id": "cmpl-fake", "object": "text_completion", "choices": [], "usage": usage}
                writer.write(_chunked(b"data: " + json.dumps(msg).encode() + b"\n\n"))
            writer.write(_chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
        finally:
            st.running -= 1


    async def _stepped(self, req: dict[str, Any], n: int, n_prompt: int, writer: asyncio.StreamWriter) -> None:
        """Stream n tokens, one per engine step, holding a seat from the first step to the last."""
        stepper, st = self._stepper, self.state
        assert stepper is not None
        step = await stepper.join()
        st.running = stepper.running
        st.max_running = max(st.max_running, st.running)
        frame = _chunked(b'data: {"id":"cmpl-fake","object":"text_completion","model":"fake-model",'
                         b'"choices":[{"index":0,"text":"","finish_reason":null}]}\n\n')
        try:
            for _ in range(n):
                step = await stepper.after(step)
                writer.write(frame)
                await writer.drain()
                st.generation += 1
            usage = {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n}
            msg = {"id": "cmpl-fake", "object": "text_completion", "choices": [], "usage": usage}
            writer.write(_chunked(b"data: " + json.dumps(msg).encode() + b"\n\n") + _chunked(b"data: [DONE]\n\n")
                         + b"0\r\n\r\n")
        finally:
            stepper.leave()
            st.running = stepper.running
        await writer.drain()


def main(argv: list[str]) -> int:
    """Run as a fake engine: print vLLM-like start-up lines, serve until SIGTERM."""
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--kv-pool-tokens", type=int, default=16384)
    p.add_argument("--token-delay", type=float, default=0.0)
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--preempt-every", type=int, default=0)
    p.add_argument("--chunk-batch", type=int, default=1)
    p.add_argument("--step-fixed", type=float, default=0.0,
                   help="a continuously batched engine: seconds per step, plus --step-per-running per running "
                        "request, at most --max-num-seqs running (0: off)")
    p.add_argument("--step-per-running", type=float, default=0.0)
    p.add_argument("--report-seats", type=int, help="print this seat count instead (a lying engine)")
    p.add_argument("--report-pool", type=int, help="print this KV pool instead")
    p.add_argument("--die-after", type=float, default=0.0, help="exit 1 this many seconds after serving")
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--spawn-worker", action="store_true", help="start a child process that outlives a SIGKILL")
    p.add_argument("--startup-delay", type=float, default=0.0)
    p.add_argument("--api-key", nargs="+", help="as vLLM's: one or more keys, logged among the non-default args")
    a = p.parse_args(argv)
    seats = a.report_seats if a.report_seats is not None else a.max_num_seqs
    pool = a.report_pool if a.report_pool is not None else a.kv_pool_tokens
    nd = {"host": a.host, "port": a.port, "max_num_seqs": seats, "kv_pool_tokens": a.kv_pool_tokens,
          **({"api_key": a.api_key} if a.api_key else {})}
    print(f"(APIServer pid={os.getpid()}) INFO [api_utils.py:286] non-default args: {nd!r}", flush=True)
    if a.spawn_worker:
        import subprocess  # noqa: PLC0415

        subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
    time.sleep(a.startup_delay)
    print(f"(EngineCore pid={os.getpid()}) INFO [kv_cache_utils.py:2327] CPU KV cache size: {pool:,} tokens, "
          f"Maximum concurrency for 1,024 tokens per request: {pool / 1024:.2f}x", flush=True)
    if a.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    async def serve() -> None:
        cfg = FakeConfig(token_delay=a.token_delay, fail_every=a.fail_every, preempt_every=a.preempt_every,
                         chunk_batch=a.chunk_batch, step_fixed_s=a.step_fixed,
                         step_per_running_s=a.step_per_running, seats=a.max_num_seqs)
        srv = FakeServer(cfg, a.host, a.port)
        await srv.start()
        print(f"serving on {srv.url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        if not a.ignore_sigterm:
            loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        if a.die_after:
            loop.call_later(a.die_after, lambda: os._exit(1))
        await stop.wait()
        print("shutting down", flush=True)
        await srv.stop()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
