"""Asyncio streaming client for OpenAI-compatible /v1/completions and /v1/chat/completions (HTTP edge)."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from dspark.bench.http import HttpError, RawHttp, ServerProtocolError, within
from dspark.bench.prompts import Prompt
from dspark.bench.stats import RequestRecord
from dspark.core.errors import InputError

Endpoint = Literal["completions", "chat"]
_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass(frozen=True)
class ClientConfig:
    """How to talk to the server: one closed-loop stream per client, `concurrency` clients at once."""

    base_url: str  # scheme://host:port, without /v1
    model: str
    endpoint: Endpoint = "completions"
    max_tokens: int = 128
    ignore_eos: bool = True
    concurrency: int = 8
    timeout_s: float = 600.0
    api_key: str | None = None
    authorization: str | None = None  # an Authorization header of its own (Basic, from the URL's user:password)
    processes: int = 1  # client processes sharing the streams (one reads ~11,000 tokens/s, one per read)
    # Output tokens per prompt index, from a prompts file's max_tokens (empty: max_tokens for every request).
    max_tokens_each: tuple[int, ...] = ()

    def max_tokens_for(self, index: int) -> int:
        """The max_tokens request `index` asks for."""
        return self.max_tokens_each[index] if self.max_tokens_each else self.max_tokens


# One SSE event larger than this (no blank line in sight) is not a completion chunk: refused, never buffered on.
MAX_EVENT_BYTES = 1 << 20
# The largest prompt a usage block may count: a figure above it is not a token count.
MAX_PROMPT_TOKENS = 1 << 31


def auth_headers(cfg: ClientConfig) -> dict[str, str]:
    """The Authorization header the requests carry: the URL's credentials, else OPENAI_API_KEY's bearer token."""
    if cfg.authorization:
        return {"Authorization": cfg.authorization}
    return {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}


def _shown(data: bytes) -> str:
    text = data[:80].decode("utf-8", "replace")
    return repr(text + ("..." if len(data) > 80 else ""))


def _token_count(value: object, name: str, limit: int, data: bytes) -> int:
    """A usage count as the server sent it: a whole number within 0..limit, else ServerProtocolError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise ServerProtocolError(
            f"the server's usage {name} is {str(value)[:40]!r}, not a token count within 0..{limit:,} (event "
            f"{_shown(data)})", hint="--url must name an OpenAI-compatible server (vLLM, SGLang)")
    return value


def request_body(cfg: ClientConfig, prompt: Prompt, index: int = 0) -> dict[str, Any]:
    """The JSON body for request `index`; usage is asked for so token counts come from the server."""
    body: dict[str, Any] = {
        "model": cfg.model,
        "max_tokens": cfg.max_tokens_for(index),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if cfg.ignore_eos:
        body["ignore_eos"] = True  # a vLLM/SGLang extension: every request decodes exactly max_tokens
    if cfg.endpoint == "chat":
        if isinstance(prompt, str):
            body["messages"] = [{"role": "user", "content": prompt}]
        elif prompt and isinstance(prompt[0], dict):
            body["messages"] = prompt
        else:
            raise InputError("token-id prompts need the completions endpoint (chat takes text or messages)")
    else:
        if prompt and isinstance(prompt[0], dict):
            raise InputError("chat messages need --endpoint chat")
        body["prompt"] = prompt
    return body


def _wrong_shape(what: str, data: bytes) -> ServerProtocolError:
    return ServerProtocolError(f"the server streamed an event that is not an OpenAI completion chunk: {what} "
                               f"(event {_shown(data)})",
                               hint="--url must name an OpenAI-compatible server (vLLM, SGLang)")


def _event_object(data: bytes) -> dict[str, Any]:
    """One `data:` payload as a JSON object; ServerProtocolError for anything else."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):  # JSONDecodeError, bad UTF-8, 4,300+ digit numbers; deep nesting
        raise _wrong_shape("not JSON", data) from None
    if not isinstance(obj, dict):
        raise _wrong_shape(f"a JSON {type(obj).__name__}, not an object", data)
    return obj


def _carries_output(choice: dict[str, Any], chat: bool, data: bytes = b"") -> bool:
    """Whether a streamed choice holds generated output (a token or more)."""
    if not chat:
        # With --skip-tokenizer-init every chunk has text "", yet each one is a token (as vLLM's bench counts).
        return True
    delta = choice.get("delta") or {}
    if not isinstance(delta, dict):
        raise _wrong_shape("'delta' is not an object", data)
    return bool(
        delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or choice.get("token_ids")
    )


class _Stream:
    """Accumulates one response's SSE events: output chunk times, usage and any error."""

    __slots__ = ("chat", "chunks", "completion_tokens", "error", "first", "gaps", "last", "max_tokens",
                 "prompt_tokens")

    def __init__(self, chat: bool, max_tokens: int = 1 << 31) -> None:
        self.chat = chat
        self.max_tokens = max_tokens  # what the request asked for: a server never counts more
        self.first: float | None = None
        self.last: float | None = None
        self.chunks = 0
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.error: str | None = None
        self.gaps: list[float] = []  # between output chunks: vLLM bench's inter-token latencies

    def event(self, data: bytes, now: float) -> bool:
        """Handle one `data:` payload; False once the stream is done."""
        if data == b"[DONE]":
            return False
        if not self.chat and b'"usage"' not in data and b'"error"' not in data and (
            b'"choices":[{' in data or b'"choices": [{' in data
        ):
            # A plain completion chunk with a choice is one output chunk: skip the JSON parse, the client's
            # largest cost per token after HTTP itself. Keys quoted inside generated text are escaped (\"),
            # so they cannot match; anything unusual falls through to the full parse.
            if (last := self.last) is None:
                self.first = now
            else:
                self.gaps.append(now - last)
            self.last = now
            self.chunks += 1
            return True
        obj = _event_object(data)
        if "error" in obj:
            err = obj["error"]
            self.error = str(err.get("message") or err) if isinstance(err, dict) else str(err)
            return False
        choices = obj.get("choices")
        if choices is not None and not (isinstance(choices, list) and all(isinstance(c, dict) for c in choices)):
            raise _wrong_shape("'choices' is not a list of objects", data)
        if choices and _carries_output(choices[0], self.chat, data):
            if (last := self.last) is None:
                self.first = now
            else:
                self.gaps.append(now - last)
            self.last = now
            self.chunks += 1
        self._usage(obj.get("usage"), data)
        return True

    def _usage(self, usage: object, data: bytes) -> None:
        """The usage block's counts, checked: whole numbers a server could have counted."""
        if usage is not None and not isinstance(usage, dict):
            raise _wrong_shape("'usage' is not an object", data)
        if usage:
            if usage.get("completion_tokens") is not None:
                self.completion_tokens = _token_count(usage["completion_tokens"], "completion_tokens",
                                                      self.max_tokens, data)
            if usage.get("prompt_tokens") is not None:
                self.prompt_tokens = _token_count(usage["prompt_tokens"], "prompt_tokens", MAX_PROMPT_TOKENS, data)


class _SseSink:
    """Splits body bytes into SSE events for a _Stream (cheaper than decoding text line by line); keeps the
    first bytes too, for the message of a response that was not a stream."""

    __slots__ = ("buf", "done", "head", "stream")

    def __init__(self, stream: _Stream) -> None:
        self.stream = stream
        self.buf = b""
        self.head = b""
        self.done = False

    def feed(self, piece: bytes, now: float) -> None:
        """Bytes of the body as they arrived at `now`."""
        # After [DONE] the body is still read to its end by the caller: a response left unread costs its
        # connection, and a new connection per request is churn the engine's API server pays for.
        if self.done:
            return
        if len(self.head) < 300:
            self.head += piece[:300]
        buf = self.buf + piece if self.buf else piece
        if len(buf) > MAX_EVENT_BYTES and b"\n\n" not in buf and b"\r\n\r\n" not in buf:
            raise _wrong_shape(f"more than {MAX_EVENT_BYTES:,} bytes without the blank line that ends an event",
                               buf[:80])
        if b"\r" in buf:  # SSE allows CRLF line ends; a CR may end one piece and its LF start the next
            buf = buf.replace(b"\r\n", b"\n")
        while True:
            cut = buf.find(b"\n\n")
            if cut < 0:
                break
            event, buf = buf[:cut], buf[cut + 2 :]
            for line in event.split(b"\n"):
                if line.startswith(b"data:") and not self.stream.event(line[5:].strip(), now):
                    self.done = True
                    self.buf = b""
                    return
        self.buf = buf


async def _consume(resp: httpx.Response, stream: _Stream) -> None:
    """Feed an httpx streamed response to the SSE splitter, to its end."""
    sink = _SseSink(stream)
    async for piece in resp.aiter_raw():
        sink.feed(piece, time.perf_counter())


async def send_one_raw(conn: RawHttp, cfg: ClientConfig, index: int, prompt: Prompt) -> RequestRecord:
    """send_one over the Protocol-level client (plain http): the same record at a fraction of the CPU."""
    stream = _Stream(chat=cfg.endpoint == "chat", max_tokens=cfg.max_tokens_for(index))
    sink = _SseSink(stream)
    body = json.dumps(request_body(cfg, prompt, index)).encode()
    start = time.perf_counter()
    try:
        status = await conn.post(_PATHS[cfg.endpoint], body, sink.feed)
        if status != 200:
            stream.error = f"HTTP {status}: {sink.head.decode('utf-8', 'replace')[:200]}"
    except HttpError as exc:
        stream.error = f"{type(exc).__name__}: {exc}"[:300]
    return _record(stream, index, start, time.perf_counter())


async def send_one(client: httpx.AsyncClient, cfg: ClientConfig, index: int, prompt: Prompt) -> RequestRecord:
    """Send one streaming request and time it; failures become a record with an error, never an exception."""
    stream = _Stream(chat=cfg.endpoint == "chat", max_tokens=cfg.max_tokens_for(index))
    start = time.perf_counter()
    body = request_body(cfg, prompt, index)

    async def exchange() -> None:
        async with client.stream("POST", cfg.base_url + _PATHS[cfg.endpoint], json=body) as resp:
            if resp.status_code != 200:
                head = b""
                async for piece in resp.aiter_raw():
                    head += piece
                    if len(head) >= 300:
                        break
                stream.error = f"HTTP {resp.status_code}: {head.decode('utf-8', 'replace')[:200]}"
            else:
                await _consume(resp, stream)

    try:
        # httpx's timeout bounds each read; this bounds the whole response (a trickling server).
        await within(exchange(), cfg.timeout_s)
    except asyncio.TimeoutError:
        stream.error = f"no complete response within {cfg.timeout_s:g} s"
    except (httpx.HTTPError, UnicodeDecodeError) as exc:
        stream.error = f"{type(exc).__name__}: {exc}"[:300]
    return _record(stream, index, start, time.perf_counter())


def printable(text: str) -> str:
    """Text from the server as it may reach a terminal: control characters (escape sequences) as \\xNN."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _record(stream: _Stream, index: int, start: float, end: float) -> RequestRecord:
    if stream.error is None and stream.first is None:
        stream.error = "the stream ended without output"
    if stream.error is not None:
        stream.error = printable(stream.error)
    tokens = stream.completion_tokens if stream.completion_tokens is not None else stream.chunks
    return RequestRecord(
        index=index,
        start=start,
        end=end,
        first_token=stream.first,
        last_token=stream.last,
        output_tokens=tokens,
        prompt_tokens=stream.prompt_tokens,
        error=stream.error,
        itl=tuple(stream.gaps),
    )


def make_client(cfg: ClientConfig, *, connections: int | None = None,
                ssl_context: ssl.SSLContext | None = None) -> httpx.AsyncClient:
    """An httpx client for `connections` long-lived streams (default: the configured concurrency)."""
    headers = auth_headers(cfg)
    n = cfg.concurrency if connections is None else connections
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    return httpx.AsyncClient(
        timeout=httpx.Timeout(cfg.timeout_s, connect=30.0),
        transport=httpx.AsyncHTTPTransport(limits=limits, verify=ssl_context or True),
        headers=headers,
    )


async def run_clients(
    cfg: ClientConfig,
    prompts: Sequence[Prompt],
    take: Callable[[], int | None],
    on_record: Callable[[RequestRecord], None],
    on_start: Callable[[], float] | None = None,
    schedule: Sequence[float] | None = None,
) -> None:
    """Run cfg.concurrency clients in this event loop; each takes the next prompt index until none.

    Closed loop without a schedule; with one (seconds after the start, per prompt index: open-loop arrivals),
    a client holding index i waits until that time before sending, so at most cfg.concurrency are in flight.
    Each client has its own one-connection pool, kept alive across its requests: one pool shared by hundreds
    of streams costs httpcore O(connections²) work whenever a request ends (its idle-connection scan).
    on_start is called once the clients are built, just before the first request (building them is not load),
    and returns the perf_counter time the pass starts.
    """
    n = max(1, min(cfg.concurrency, len(prompts)))
    t0 = 0.0

    async def wait_turn(i: int) -> None:
        if schedule is not None and (delay := t0 + schedule[i] - time.perf_counter()) > 0:
            await asyncio.sleep(delay)

    if cfg.base_url.startswith("http://"):
        # Plain http: the Protocol-level client (dspark.bench.http), a fraction of httpx's CPU per token.
        headers = auth_headers(cfg)
        conns = [RawHttp(cfg.base_url, headers, cfg.timeout_s) for _ in range(n)]

        async def raw_loop(conn: RawHttp) -> None:
            try:
                while (i := take()) is not None:
                    await wait_turn(i)
                    on_record(await send_one_raw(conn, cfg, i, prompts[i]))
            finally:
                conn.close()

        t0 = on_start() if on_start is not None else time.perf_counter()
        await asyncio.gather(*(raw_loop(c) for c in conns))
        return
    # One SSL context for every client: httpx builds (and loads CA certificates into) one per transport
    # otherwise, ~40 ms each.
    ssl_context = httpx.create_ssl_context()
    clients = [make_client(cfg, connections=1, ssl_context=ssl_context) for _ in range(n)]

    async def client_loop(client: httpx.AsyncClient) -> None:
        async with client:
            while (i := take()) is not None:
                await wait_turn(i)
                on_record(await send_one(client, cfg, i, prompts[i]))

    t0 = on_start() if on_start is not None else time.perf_counter()
    await asyncio.gather(*(client_loop(c) for c in clients))


async def first_model(client: httpx.AsyncClient, base_url: str) -> str:
    """The id of the first model the server lists at /v1/models; InputError naming what is wrong with it."""
    url = base_url + "/v1/models"
    hint = "--url must name an OpenAI-compatible server; or name the model with --served-model"
    status, body = await get_bounded(client, url)
    if status != 200:
        raise InputError(f"{url} answered HTTP {status}: {body[:200].decode('utf-8', 'replace')!r}", hint=hint)
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        raise InputError(f"{url} did not answer JSON: {_shown(body)}", hint=hint) from None
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list):
        raise InputError(f"{url} answered no model list ('data'): {_shown(body)}", hint=hint)
    if not data:
        raise InputError(f"{url} lists no model", hint=hint)
    first = data[0]
    model = first.get("id") if isinstance(first, dict) else None
    if not isinstance(model, str) or not model or len(model) > 1024 or not model.isprintable():
        raise InputError(f"{url}: its first model has no usable 'id': {_shown(body)}", hint=hint)
    return model


# The most one reply of /v1/models, /version or /metrics may hold, and the longest it may take, whole.
MAX_REPLY_BYTES = 16 << 20
REPLY_DEADLINE_S = 10.0


async def get_bounded(client: httpx.AsyncClient, url: str, *, limit: int = MAX_REPLY_BYTES,
                      deadline_s: float = REPLY_DEADLINE_S) -> tuple[int, bytes]:
    """GET url: its status and body, read within `deadline_s` in all and at most `limit` bytes (httpx's own
    timeout bounds each read, so a server trickling a byte at a time would otherwise hold the bench forever).
    httpx.HTTPError for a failed connection, an overlong body or the deadline."""

    async def read() -> tuple[int, bytes]:
        async with client.stream("GET", url) as resp:
            body = bytearray()
            async for piece in resp.aiter_bytes():
                body += piece
                if len(body) > limit:
                    raise httpx.DecodingError(f"{url}: the reply exceeds {limit:,} bytes")
            return resp.status_code, bytes(body)

    try:
        return await within(read(), deadline_s)
    except asyncio.TimeoutError:
        raise httpx.ReadTimeout(f"{url}: no complete reply within {deadline_s:g} s") from None
