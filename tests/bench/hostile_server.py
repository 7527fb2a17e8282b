"""A server that answers the bench every way an OpenAI-compatible server must not, one behaviour per URL.

`HostileServer.add(Behaviour(...))` returns a base URL (http://127.0.0.1:PORT/case/N) whose /v1/completions,
/v1/chat/completions, /v1/models, /version and /metrics answer as that behaviour says; anything not given is
answered as a well-behaved vLLM would. Every response closes its connection (its body ends at the close).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass

GOOD_METRICS = (
    b'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
    b'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n'
    b'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.01\n'
    b'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 0.0\n'
    b'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 0.0\n'
    b'vllm:num_preemptions_total{engine="0",model_name="m"} 0.0\n'
)
GOOD_MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "hostile"}]}).encode()


def chunk_event(chat: bool, text: str = "x") -> bytes:
    """One well-formed streamed chunk."""
    choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


def good_stream(chat: bool, tokens: int, prompt_tokens: int = 4) -> bytes:
    """A stream as vLLM sends it: `tokens` chunks, the usage chunk, [DONE]."""
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": tokens, "total_tokens": prompt_tokens + tokens}
    return (chunk_event(chat) * tokens + b"data: " + json.dumps({"choices": [], "usage": usage}).encode()
            + b"\n\ndata: [DONE]\n\n")


@dataclass(frozen=True)
class Behaviour:
    """How one case's server answers; None: as a well-behaved server would."""

    stream: bytes | None = None  # the body of a completions answer (after a 200 event-stream head)
    head: bytes | None = None  # the whole response head of a completions answer, instead of a 200
    models: bytes | None = None
    models_status: int = 200
    metrics: bytes | None = None
    trickle_metrics: bool = False  # /metrics sends one byte every 0.3 s and never ends


class HostileServer:
    """The server; `add` a behaviour for its URL once started."""

    def __init__(self) -> None:
        self.cases: dict[str, Behaviour] = {}
        self.url = ""
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, behaviour: Behaviour) -> str:
        key = str(len(self.cases))
        self.cases[key] = behaviour
        return f"{self.url}/case/{key}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=256)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
            await self._route(method, path, body, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, ValueError,
                asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str = "application/json") -> None:
        writer.write(f"HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n"
                     "connection: close\r\n\r\n".encode() + body)
        await writer.drain()

    async def _route(self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter) -> None:
        parts = path.split("/", 3)  # '', 'case', N, rest
        b = self.cases.get(parts[2]) if len(parts) == 4 and parts[1] == "case" else None
        rest = "/" + parts[3] if len(parts) == 4 else path
        if b is None:
            await self._send(writer, 404, b"{}")
        elif method == "GET" and rest == "/v1/models":
            await self._send(writer, b.models_status, b.models if b.models is not None else GOOD_MODELS)
        elif method == "GET" and rest == "/version":
            await self._send(writer, 200, b'{"version": "0-hostile"}')
        elif method == "GET" and rest == "/metrics":
            if b.trickle_metrics:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100000000\r\n\r\n")
                while True:
                    writer.write(b"#")
                    await writer.drain()
                    await asyncio.sleep(0.3)
            await self._send(writer, 200, b.metrics if b.metrics is not None else GOOD_METRICS, "text/plain")
        elif method == "POST" and rest in ("/v1/completions", "/v1/chat/completions"):
            req = json.loads(body)
            if b.head is not None:
                writer.write(b.head + (b.stream or b""))
            else:
                stream = b.stream if b.stream is not None else good_stream(rest.endswith("chat/completions"),
                                                                            int(req.get("max_tokens", 4)))
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
                             + stream)
            await writer.drain()
        else:
            await self._send(writer, 404, b"{}")
