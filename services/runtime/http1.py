"""A lean HTTP/1.1 client for one-shot requests to one origin, and for GETs whose answer is a
stream: the Kubernetes client's JSON calls (:meth:`services.runtime.kube.KubeApi._json`) and its
watches (:meth:`services.runtime.kube.KubeApi.watch`).

Why it exists. aiohttp's per-request machinery (the request and response objects, URL
building, the cookie jar, timers, tasks, trace hooks) is most of the CPU a worker spends on a
write; over this module a write costs the client less than half as much
(bench/kube_client_cost.py). Here a request is formatted as bytes and written at once, and the
answer parsed by an :class:`asyncio.Protocol` as it arrives.

What it does: a pool of at most ``limit`` keep-alive connections (plain TCP, or TLS with the
caller's ``SSLContext`` and server name), the idle ones reused last-in first-out and dropped
after :data:`IDLE_SECONDS` or once the server closed them; a response whose body is framed by
``Content-Length``, ``Transfer-Encoding: chunked``, or the end of the connection; interim 1xx
answers skipped. A connection is reused only after a complete answer the server did not mark
``Connection: close``; one whose request failed or was cancelled is closed. A GET sent on a
reused connection that the server closed before answering a byte is sent once more on a new
one; no other method is (the server may have acted on it).

Streams (:meth:`Pool.stream`): a GET on a connection of its own, whose 2xx answer's body is
handed over as it arrives (:meth:`Stream.read`), whatever its framing; the connection stops
reading while more than :data:`_HIGH_WATER` bytes wait for the reader (the server's writes then
wait too: backpressure), and is closed when the stream is, never reused. An answer of any other
status is read whole, as a one-shot request's is. At most ``limit`` streams are open at once,
apart from the one-shot requests' ``limit`` connections (as the watches of aiohttp's session
were limited by its connector, apart from this pool).

What it leaves to aiohttp: proxies, redirects, cookies, compression (no ``Accept-Encoding`` is
sent), WebSockets. Timeouts are the caller's (``asyncio.timeout``).

Every failure to get a complete answer, or the whole of a stream, is an ``OSError``: the
socket's own, ``ssl.SSLError``, or :class:`ServerDisconnected` and :class:`BadResponse` from
here. (A line break in a header is the caller's mistake: a ``ValueError``, and nothing is sent.)
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from typing import Final

__all__ = ["IDLE_SECONDS", "BadResponse", "Pool", "ServerDisconnected", "Stream"]

IDLE_SECONDS: Final = 30.0
"""An idle connection older than this is closed rather than reused."""
_MAX_HEAD: Final = 256 << 10
"""Bytes of a response's status line and headers (or a chunk-size or trailer line) at most."""
_HIGH_WATER: Final = 1 << 20
"""Bytes of a stream's body waiting for its reader above which its connection stops reading."""

_HEAD, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _TRAILER, _UNTIL_CLOSE = range(6)


class ServerDisconnected(ConnectionError):
    """The connection ended before the response was complete."""


class BadResponse(OSError):
    """The server's answer is not HTTP/1.x as this client reads it."""


Answer = tuple[int, str, bytes]
"""Status code, reason phrase, body."""


class _Connection(asyncio.Protocol):
    """One connection: one request at a time, its answer parsed as the bytes arrive."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.lost: asyncio.Future[None] = loop.create_future()
        self.reusable = False
        """True once a complete answer left the connection fit for another request."""
        self.idle_since = 0.0
        self.received = False
        """Whether any byte of the current request's answer arrived."""
        self._answer: asyncio.Future[Answer] | None = None
        self._buffer = bytearray()
        self._state = _HEAD
        self._status = 0
        self._reason = ""
        self._left = 0
        self._chunks: list[bytes] = []
        self._stream: Stream | None = None
        """The stream that asked for the current answer, to get its body if it is a 2xx one."""
        self._streaming: Stream | None = None
        """The stream the body goes to as it arrives: a 2xx answer to a stream's request."""

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's transports (the services' loop) do not derive from
        # asyncio.Transport, though they have its methods.
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        streaming = self._streaming
        if self._answer is None and streaming is None:  # bytes nobody asked for
            self.close()
            return
        self.received = True
        try:
            if streaming is not None and self._state == _CHUNK_SIZE and not self._buffer:
                data = self._whole_chunks(streaming, data)  # most often all of it
                if not data:
                    return
            elif self._state == _HEAD and not self._buffer:  # most often the whole answer
                end = data.find(b"\r\n\r\n")
                if end >= 0:
                    self._read_head(data[:end])
                    if self._state == _BODY and len(data) - end - 4 == self._left:
                        self._finish(data[end + 4 :])
                        return
                    data = data[end + 4 :]
            self._buffer += data
            self._advance()
        except BadResponse as error:
            self._fail(error)

    def eof_received(self) -> bool:
        return False  # the transport closes itself; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        streaming, self._streaming = self._streaming, None
        if streaming is not None and (self._state != _UNTIL_CLOSE or exc is not None):
            why = f": {exc!r}" if exc is not None else ""
            error = ServerDisconnected(f"the connection ended in the middle of the stream{why}")
            error.__cause__ = exc
            streaming.fail(error)
        elif streaming is not None:  # a body until the end of the connection: it ended
            if self._buffer:
                streaming.feed(bytes(self._buffer))
                self._buffer.clear()
            streaming.end()
        elif self._state == _UNTIL_CLOSE and exc is None:
            body = bytes(self._buffer)
            self._buffer.clear()
            self._finish(body)
        elif self._answer is not None:
            what = "before answering" if not self.received else "in the middle of its answer"
            why = f": {exc!r}" if exc is not None else ""
            error = ServerDisconnected(f"the connection ended {what}{why}")
            error.__cause__ = exc
            self._fail(error)
        if not self.lost.done():
            self.lost.set_result(None)

    # -- a request ----------------------------------------------------------------------------

    def send(self, request: bytes, stream: Stream | None = None) -> asyncio.Future[Answer]:
        """Send ``request`` (the whole of it): the future of its complete answer, or, with a
        ``stream`` and a 2xx answer, of its status and reason once its head came (its body then
        goes to ``stream``)."""
        self._answer = answer = self._loop.create_future()
        self._stream = stream
        self.reusable = self.received = False
        self._state = _HEAD
        transport = self.transport
        if transport is None or transport.is_closing():
            answer.set_exception(ServerDisconnected("the connection is closed"))
            return answer
        transport.write(request)
        return answer

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.abort()

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _finish(self, body: bytes) -> None:
        streaming, self._streaming = self._streaming, None
        if streaming is not None:  # the end of a streamed body: the connection is done with
            self.reusable = False
            if body:
                streaming.feed(body)
            streaming.end()
            return
        answer, self._answer = self._answer, None
        if self._buffer:  # more than the answer: nothing after it can be trusted
            self.reusable = False
        if answer is not None and not answer.done():
            answer.set_result((self._status, self._reason, body))

    def _fail(self, error: Exception) -> None:
        answer, self._answer = self._answer, None
        streaming, self._streaming = self._streaming, None
        self.close()
        if answer is not None and not answer.done():
            answer.set_exception(error)
        if streaming is not None:
            streaming.fail(error)

    def _whole_chunks(self, streaming: Stream, data: bytes) -> bytes:
        """Pass on the chunks that ``data`` holds whole, from its start; what is left of it.
        (A stream's chunks, an event each, most often arrive whole: none is copied into the
        buffer first.)"""
        parts: list[bytes] = []
        start = 0
        while True:
            end = data.find(b"\r\n", start)
            if end < 0:
                break
            try:
                size = int(data[start:end], 16)
            except ValueError:  # an extension, or no size: the general way's to read or refuse
                break
            begin = end + 2
            stop = begin + size
            if size <= 0 or data[stop : stop + 2] != b"\r\n" or data[start] == 0x2B:  # "+"
                break  # the last chunk, one cut short, or a bad size
            parts.append(data[begin:stop])
            start = stop + 2
        if parts:
            streaming.feed(parts[0] if len(parts) == 1 else b"".join(parts))
        return data[start:] if start else data

    def _stream_on(self) -> int:
        """A streamed body passes on what came of the part being read (the body framed by
        Content-Length, or a chunk); the bytes of that part still to come."""
        buffer, left, streaming = self._buffer, self._left, self._streaming
        if streaming is not None and buffer and left:
            part = bytes(buffer[:left])
            del buffer[:left]
            left = self._left = left - len(part)
            streaming.feed(part)
        return left

    def _advance(self) -> None:
        buffer = self._buffer
        while True:
            state = self._state
            if state == _BODY:
                left = self._stream_on()
                if len(buffer) < left:
                    return
                body = bytes(buffer[:left])
                del buffer[:left]
                self._finish(body)
                return
            if state == _HEAD:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    if buffer[:7] != b"HTTP/1."[: len(buffer)]:
                        raise BadResponse(f"not an HTTP/1.x answer: {bytes(buffer[:80])!r}")
                    if len(buffer) > _MAX_HEAD:
                        raise BadResponse(f"no end of the response head in {_MAX_HEAD} bytes")
                    return
                head = bytes(buffer[:end])
                del buffer[: end + 4]
                self._read_head(head)
            elif state == _UNTIL_CLOSE:
                if self._streaming is not None and buffer:
                    self._streaming.feed(bytes(buffer))
                    buffer.clear()
                return
            elif state == _CHUNK_DATA:
                left = self._stream_on()
                if len(buffer) < left + 2:
                    return
                if buffer[left : left + 2] != b"\r\n":
                    raise BadResponse("a chunk does not end with CRLF")
                if left:
                    self._chunks.append(bytes(buffer[:left]))
                del buffer[: left + 2]
                self._state = _CHUNK_SIZE
            else:  # a chunk-size or a trailer line
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > _MAX_HEAD:
                        raise BadResponse("a chunk-size or trailer line is too long")
                    return
                line = bytes(buffer[:end])
                del buffer[: end + 2]
                if state == _TRAILER:
                    if not line:
                        body = b"".join(self._chunks)
                        self._chunks = []
                        self._finish(body)
                        return
                    continue
                size = line.partition(b";")[0].strip()
                try:
                    self._left = int(size, 16)
                except ValueError:
                    raise BadResponse(f"a bad chunk size {line[:40]!r}") from None
                if self._left < 0 or size[:1] in (b"+", b"-"):
                    raise BadResponse(f"a bad chunk size {line[:40]!r}")
                self._state = _CHUNK_DATA if self._left else _TRAILER

    def _read_head(self, head: bytes) -> None:
        """The status line and headers: how the body is framed, and whether the connection can
        carry another request after it."""
        end = head.find(b"\r\n")
        version, _, rest = (head if end < 0 else head[:end]).partition(b" ")
        code, _, reason = rest.partition(b" ")
        if version[:7] != b"HTTP/1." or len(code) != 3 or not code.isdigit():
            raise BadResponse(f"not an HTTP/1.x status line: {head[:80]!r}")
        status = int(code)
        if 100 <= status < 200 and status != 101:
            return  # an interim answer (100 Continue, 103 Early Hints): the real one follows
        fields = head[end:].lower() if end >= 0 else b""  # each header after a CRLF
        keep_alive = version == b"HTTP/1.1"
        connection = _field(fields, b"\r\nconnection:")
        if connection is not None:
            tokens = {token.strip() for token in connection.split(b",")}
            keep_alive = b"close" not in tokens and (keep_alive or b"keep-alive" in tokens)
        length = _field(fields, b"\r\ncontent-length:")
        if length is not None and (
            not length.isdigit() or fields.count(b"\r\ncontent-length:") > 1
        ):
            raise BadResponse(f"a bad or repeated Content-Length {length[:40]!r}")
        coding = _field(fields, b"\r\ntransfer-encoding:")
        self._status = status
        self._reason = reason.decode("latin-1")
        self.reusable = keep_alive and status != 101
        if status in (101, 204, 304):
            self._left = 0
            self._state = _BODY
        elif coding is not None and coding.rpartition(b",")[2].strip() == b"chunked":
            self._chunks = []
            self._state = _CHUNK_SIZE
        elif length is not None and coding is None:
            self._left = int(length)
            self._state = _BODY
        else:
            self.reusable = False
            self._state = _UNTIL_CLOSE
        stream, self._stream = self._stream, None
        if stream is not None and 200 <= status <= 299:  # the body goes to it as it arrives
            answer, self._answer = self._answer, None
            self._streaming = stream
            if answer is not None and not answer.done():
                answer.set_result((status, self._reason, b""))


class Stream:
    """The answer to :meth:`Pool.stream`: its :attr:`status` and :attr:`reason`, and its body:
    a 2xx answer's as it arrives (:meth:`read`), any other's whole (:attr:`body`)."""

    def __init__(self, connection: _Connection, release: Callable[[], None] | None) -> None:
        self.status = 0
        self.reason = ""
        self.body = b""
        """The whole body of an answer that is not a 2xx one (nothing is left to read)."""
        self._connection = connection
        self._release = release
        self._parts: list[bytes] = []
        self._size = 0
        self._paused = False
        self._ended = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None

    async def read(self) -> bytes:
        """The bytes of the body that arrived since the last read (waiting for some), ``b""``
        once it ended cleanly; :class:`ServerDisconnected` or :class:`BadResponse` (after the
        bytes that came before) when it did not."""
        while not self._parts:
            if self._error is not None:
                raise self._error
            if self._ended:
                return b""
            self._waiter = waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        parts = self._parts
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        self._size = 0
        if self._paused:
            self._paused = False
            self._connection.resume_reading()
        return data

    def close(self) -> None:
        """Close its connection (what is left of the body is not read)."""
        if self._error is None and not self._ended:
            self._error = ServerDisconnected("the stream is closed")
            self._wake()
        self._connection.close()
        release, self._release = self._release, None
        if release is not None:
            release()

    # -- from its connection

    def feed(self, data: bytes) -> None:
        self._parts.append(data)
        self._size += len(data)
        if self._size > _HIGH_WATER and not self._paused:
            self._paused = True
            self._connection.pause_reading()
        self._wake()

    def end(self) -> None:
        self._ended = True
        self._wake()

    def fail(self, error: Exception) -> None:
        if not self._ended and self._error is None:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _field(fields: bytes, name: bytes) -> bytes | None:
    """The value of the header ``name`` (``b"\\r\\nname:"``, in lower case) in ``fields``."""
    start = fields.find(name)
    if start < 0:
        return None
    start += len(name)
    end = fields.find(b"\r\n", start)
    return fields[start : end if end >= 0 else len(fields)].strip()


class Pool:
    """Keep-alive connections to one origin, at most ``limit`` of them (0: no limit)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        limit: int = 100,
        idle_seconds: float = IDLE_SECONDS,
    ) -> None:
        self.host = host
        self.port = port
        self._ssl = ssl_context
        self._server_hostname = (server_hostname or None) if ssl_context else None
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._slots = asyncio.Semaphore(limit) if limit > 0 else None
        self._stream_slots = asyncio.Semaphore(limit) if limit > 0 else None
        self._idle_seconds = idle_seconds
        self._closed = False
        host_port = f"[{host}]" if ":" in host else host
        default_port = 443 if ssl_context else 80
        self._host_line = (
            f" HTTP/1.1\r\nHost: {host_port}{'' if port == default_port else f':{port}'}\r\n"
        )

    @property
    def connections(self) -> int:
        """Connections open now, idle or busy."""
        return len(self._open)

    async def request(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None = None
    ) -> Answer:
        """Send one request and return its answer. ``target`` is the path and query, already
        percent-encoded; ``headers`` (not Host nor Content-Length, which are added) go as they
        are."""
        request = self._format(method, target, headers, body)
        slots = self._slots
        if slots is not None:
            await slots.acquire()
        try:
            connection = self._idle_connection()
            if connection is None:
                return await self._exchange(await self._connect(), request)
            try:
                return await self._exchange(connection, request)
            except ServerDisconnected:
                # The server closed the idle connection as the request went out: a GET goes
                # again; anything else may have been acted on.
                if method != "GET" or connection.received:
                    raise
            return await self._exchange(await self._connect(), request)
        finally:
            if slots is not None:
                slots.release()

    async def stream(self, target: str, headers: dict[str, str]) -> Stream:
        """Send a GET (``target`` and ``headers`` as for :meth:`request`) on a new connection
        and return its answer once its head came; the caller closes it. Cancelled or failing
        before that, its connection is closed."""
        request = self._format("GET", target, headers, None)
        slots = self._stream_slots
        if slots is not None:
            await slots.acquire()
        try:
            connection = await self._connect()
            stream = Stream(connection, slots.release if slots is not None else None)
            try:
                status, reason, body = await connection.send(request, stream)
            except BaseException:
                connection.close()
                raise
        except BaseException:
            if slots is not None:
                slots.release()
            raise
        stream.status, stream.reason = status, reason
        if not 200 <= status <= 299:
            stream.body = body
            stream.close()
        return stream

    async def close(self) -> None:
        """Close every connection, idle or busy, and refuse requests from now on."""
        self._closed = True
        self._idle.clear()
        open_now = list(self._open)
        for connection in open_now:
            connection.close()
        if open_now:
            await asyncio.wait([connection.lost for connection in open_now], timeout=5.0)

    def _format(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None
    ) -> bytes:
        lines = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
        count = len(headers) + 3  # the request line, Host, the headers, the empty line
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines += f"Content-Length: {len(body) if body is not None else 0}\r\n"
            count += 1
        head = f"{method} {target}{self._host_line}{lines}\r\n"
        if head.count("\n") != count or head.count("\r") != count:
            raise ValueError(f"a line break in the request line or a header of {method} {target}")
        request = head.encode()
        if body:
            request += body
        return request

    async def _exchange(self, connection: _Connection, request: bytes) -> Answer:
        try:
            answer = await connection.send(request)
        except BaseException:
            connection.close()
            raise
        if not connection.reusable or self._closed:
            connection.close()
            return answer
        now = time.monotonic()
        connection.idle_since = now
        idle = self._idle
        while idle and idle[0].idle_since < now - self._idle_seconds:  # unused for too long
            idle.pop(0).close()
        idle.append(connection)
        return answer

    def _idle_connection(self) -> _Connection | None:
        idle = self._idle
        if not idle:
            return None
        oldest = time.monotonic() - self._idle_seconds
        while idle:
            connection = idle.pop()
            if connection.reusable and connection.idle_since >= oldest:
                return connection
            connection.close()
        return None

    async def _connect(self) -> _Connection:
        if self._closed:
            raise ServerDisconnected("the connection pool is closed")
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(
            lambda: _Connection(loop),
            self.host,
            self.port,
            ssl=self._ssl,
            server_hostname=self._server_hostname,
        )
        if self._closed:
            connection.close()
            raise ServerDisconnected("the connection pool is closed")
        self._open.add(connection)
        connection.lost.add_done_callback(lambda _: self._forget(connection))
        return connection

    def _forget(self, connection: _Connection) -> None:
        self._open.discard(connection)
        if connection in self._idle:  # closed by the server while idle
            self._idle.remove(connection)
