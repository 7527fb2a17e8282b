"""A minimal HTTP/1.1 client for streamed responses, straight on asyncio's Protocol (the bench's hot path).

httpx costs ~70 µs of CPU per streamed token (its async iterators, h11 and anyio layers for every network
read); reading the socket in a Protocol and parsing chunked framing by hand costs a fraction of that, so the
client stays far from being the bottleneck it measures. Plain http:// only, one request at a time per
connection, kept alive; https and anything unusual go through httpx (dspark.bench.client).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import urlsplit

from dspark.core.errors import InputError

T = TypeVar("T")
_MAX_HEAD = 64 * 1024
_MAX_CHUNK_LINE = 1024  # a chunk-size line (hex digits and extensions) longer than this is not HTTP


class HttpError(Exception):
    """The connection failed or the response was not HTTP/1.1 as expected."""


class ServerProtocolError(InputError):
    """The server answered, but not as an OpenAI-compatible server does (an event of the wrong shape, a token
    count that cannot be): the URL names something dspark cannot measure, an input error naming the cause."""


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """Await `awaitable` for at most `seconds`; asyncio.TimeoutError after that (it is cancelled).

    Not asyncio.wait_for: before Python 3.12 it can swallow a cancellation of the caller that arrives as the
    awaited work completes, and a sampler or client told to stop would then run on (a bench that never ends).
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except BaseException:  # the caller was cancelled: so is the work it waited for
        task.cancel()
        raise
    if not done:
        task.cancel()
        await asyncio.wait({task})
        raise asyncio.TimeoutError
    return task.result()


class _Response:
    """Parses one response as bytes arrive: head, then body (chunked or Content-Length), handed to a sink."""

    __slots__ = ("body", "buf", "chunk_left", "chunked", "crlf_left", "done", "headers", "length_left", "sink",
                 "status")

    def __init__(self, sink: Callable[[bytes, float], None]) -> None:
        self.sink = sink
        self.buf = b""
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunked = False
        self.length_left = -1  # Content-Length still to read; -1: until close
        self.chunk_left = 0
        self.crlf_left = 0
        self.done = False
        self.body: bytes | None = None  # the head is parsed once this is not None

    def feed(self, data: bytes, now: float) -> None:
        """Take bytes from the socket."""
        if self.body is None:
            self.buf += data
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > _MAX_HEAD:
                    raise HttpError("response head too large")
                return
            self._head(self.buf[:end].decode("latin-1"))
            data, self.buf, self.body = self.buf[end + 4:], b"", b""
        if self.chunked:
            self._chunks(data, now)
        elif data:
            if self.length_left >= 0:
                data = data[: self.length_left]
                self.length_left -= len(data)
                self.done = self.length_left == 0
            self.sink(data, now)

    def _head(self, head: str) -> None:
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise HttpError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
        if not parts[1].isdigit() or len(parts[1]) != 3:
            raise HttpError(f"not an HTTP status: {lines[0][:80]!r}")
        self.status = int(parts[1])
        for line in lines[1:]:
            key, _, value = line.partition(":")
            self.headers[key.strip().lower()] = value.strip()
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if not self.chunked and "content-length" in self.headers:
            length = self.headers["content-length"]
            if not length.isdigit() or len(length) > 18:
                raise HttpError(f"not a Content-Length: {length[:40]!r}")
            self.length_left = int(length)
            self.done = self.length_left == 0

    def _chunks(self, data: bytes, now: float) -> None:
        buf = self.buf + data if self.buf else data
        pos, out = 0, []
        while pos < len(buf) and not self.done:
            if self.chunk_left:
                piece = buf[pos : pos + self.chunk_left]
                out.append(piece)
                pos += len(piece)
                self.chunk_left -= len(piece)
            elif self.crlf_left:  # the CRLF after a chunk's data
                skip = min(self.crlf_left, len(buf) - pos)
                pos += skip
                self.crlf_left -= skip
            else:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if len(buf) - pos > _MAX_CHUNK_LINE:
                        raise HttpError("a chunk-size line without its end")
                    break
                if eol - pos > _MAX_CHUNK_LINE:
                    raise HttpError("a chunk-size line too long")
                size = int(buf[pos:eol].split(b";", 1)[0], 16)
                if size == 0:  # the last chunk: no trailers are expected, its final CRLF ends the response
                    if len(buf) - eol < 4:
                        break
                    pos = eol + 4
                    self.done = True
                    break
                pos = eol + 2
                self.chunk_left, self.crlf_left = size, 2
        self.buf = buf[pos:]
        if out:
            self.sink(out[0] if len(out) == 1 else b"".join(out), now)


class _Protocol(asyncio.Protocol):
    """Feeds the socket's bytes to the current response; wakes the waiter when it is complete or fails."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.response: _Response | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # noqa: S101 - TCP connections have stream transports
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        resp, waiter = self.response, self.waiter
        if resp is None or waiter is None or waiter.done():
            return
        try:
            resp.feed(data, time.perf_counter())
        except ServerProtocolError as exc:  # raised by the sink: the stream's events are not an OpenAI server's
            waiter.set_exception(exc)
            return
        except (HttpError, ValueError) as exc:
            waiter.set_exception(HttpError(str(exc)))
            return
        if resp.done:
            waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter, resp = self.waiter, self.response
        if waiter is not None and not waiter.done():
            if resp is not None and resp.body is not None and not resp.chunked and resp.length_left < 0:
                waiter.set_result(None)  # a body delimited by the close
            else:
                waiter.set_exception(HttpError(f"connection closed mid-response{f': {exc}' if exc else ''}"))


class RawHttp:
    """One kept-alive HTTP/1.1 connection to base_url (http only); reconnects when the server closed it."""

    def __init__(self, base_url: str, headers: dict[str, str] | None = None, timeout_s: float = 600.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"RawHttp takes http://HOST[:PORT] URLs, got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        # Never the URL's user:password (that goes in an Authorization header, from the caller).
        host_header = f"[{self.host}]" if ":" in self.host else self.host
        if parts.port is not None:
            host_header += f":{parts.port}"
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._head_tail = f"Host: {host_header}\r\n{extra}Content-Type: application/json\r\n".encode("latin-1")
        self.timeout_s = timeout_s
        self._proto: _Protocol | None = None

    async def _connection(self) -> _Protocol:
        if self._proto is None or self._proto.closed:
            loop = asyncio.get_running_loop()
            try:
                _t, proto = await within(loop.create_connection(_Protocol, self.host, self.port), 30.0)
            except (OSError, asyncio.TimeoutError) as exc:
                raise HttpError(f"cannot connect to {self.host}:{self.port}: {exc or type(exc).__name__}") from exc
            self._proto = proto
        return self._proto

    async def post(self, path: str, body: bytes, sink: Callable[[bytes, float], None]) -> int:
        """POST body to path; the response body goes to sink(bytes, arrival time) as it arrives; the status."""
        proto = await self._connection()
        loop = asyncio.get_running_loop()
        resp = _Response(sink)
        proto.response, proto.waiter = resp, loop.create_future()
        head = b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n" % (
            (self.prefix + path).encode("latin-1"), self._head_tail, len(body))
        assert proto.transport is not None  # noqa: S101 - set by connection_made before create_connection returns
        proto.transport.write(head + body)
        try:
            await within(proto.waiter, self.timeout_s)
        except asyncio.TimeoutError:
            self.close()
            raise HttpError(f"no complete response within {self.timeout_s:.0f} s") from None
        except (HttpError, ServerProtocolError):
            self.close()
            raise
        finally:
            proto.response = proto.waiter = None
        if resp.headers.get("connection", "").lower() == "close":
            self.close()
        return resp.status

    def close(self) -> None:
        """Close the connection (the next request opens a new one)."""
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._proto = None
