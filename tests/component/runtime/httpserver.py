"""A tiny HTTP/1.1 server for the tests of the lean transport (services/runtime/http1.py):
it reads requests and answers exactly as a test tells it, framing and failures included."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "CLOSE",
    "NS",
    "Answer",
    "Request",
    "Server",
    "answering",
    "config_map",
    "no_proxy_from_the_environment",
    "server_tls",
    "serving",
]

NS = "default"


@pytest.fixture(autouse=True)
def no_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def config_map(name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "data": dict(data),
    }


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    """Names in lower case."""
    body: bytes
    connection: int
    """Which connection it came on (0: the first the server accepted)."""
    number: int
    """Its place among the requests of its connection (0: the first)."""


CLOSE: Any = None
"""An answer: close the connection without answering."""


Answer = Callable[[Request], Awaitable[Any]]
"""What the server does with a request: bytes to write (a list: written one at a time, a float
in it a pause of that many seconds), with ``then_close`` after them, or CLOSE."""


@dataclass
class Server:
    """An HTTP/1.1 server on a random port that reads requests and answers as it is told."""

    answer: Answer
    then_close: Callable[[Request], bool] = lambda request: False
    """Whether to close the connection after answering ``request`` (without saying so)."""
    tls: ssl.SSLContext | None = None
    url: str = ""
    requests: list[Request] = field(default_factory=list)
    connections: int = 0
    open: int = 0
    peak: int = 0
    """The most connections open at once."""
    handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        task.add_done_callback(self.handlers.discard)
        index = self.connections
        self.connections += 1
        self.open += 1
        self.peak = max(self.peak, self.open)
        try:
            for number in range(1000):
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                line, *lines = head.decode().split("\r\n")
                method, target, _ = line.split(" ")
                headers = {
                    name.strip().lower(): value.strip()
                    for name, _, value in (h.partition(":") for h in lines if h)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = Request(method, target, headers, body, index, number)
                self.requests.append(request)
                written = await self.answer(request)
                if written is CLOSE:
                    return
                for part in written if isinstance(written, list) else [written]:
                    if isinstance(part, float):  # a pause
                        await asyncio.sleep(part)
                        continue
                    writer.write(part)
                    await writer.drain()
                    await asyncio.sleep(0.01)  # so that the parts arrive apart
                if self.then_close(request):
                    return
        finally:
            self.open -= 1
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


@contextlib.asynccontextmanager
async def serving(server: Server) -> AsyncIterator[Server]:
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=server.tls)
    port = listening.sockets[0].getsockname()[1]
    server.url = f"{'https' if server.tls else 'http'}://127.0.0.1:{port}"
    try:
        yield server
    finally:
        listening.close()
        await listening.wait_closed()
        # Python 3.11's wait_closed does not wait for the connections' handlers.
        for handler in list(server.handlers):
            handler.cancel()
        await asyncio.gather(*server.handlers, return_exceptions=True)


def answering(*replies: Any) -> Answer:
    """An answer for each request in turn, the last one for all that follow."""
    count = 0

    async def answer_(request: Request) -> Any:
        nonlocal count
        count += 1
        return replies[min(count, len(replies)) - 1]

    return answer_


def server_tls(files: dict[str, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(files["server"], files["server-key"])
    return context
