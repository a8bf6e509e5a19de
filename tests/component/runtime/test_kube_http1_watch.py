"""Watches over the lean HTTP/1.1 transport (services/runtime/http1.py, ``Pool.stream``), through
:meth:`KubeApi.watch` as the watcher reads them: against the development cluster, the events
aiohttp gave; against tiny servers (test_kube_http1.py's), a stream framed every way and cut
anywhere, dropped mid-way, garbled, failing, stalled or slow to read, which must end as it did
over aiohttp (``via_aiohttp``): the same events, then the same clean end or the same KubeError.

A request the lean transport sent carries no ``Accept-Encoding`` (aiohttp's do)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from devtools.cluster import DevCluster, LatencyModel
from events.envelope import ObjectKey
from services.runtime import http1
from services.runtime.kube import Expired, KubeApi, KubeError, StreamBroken
from services.runtime.kubeclient import ApiClient, Configuration, kube_config, new_api_client
from tests.component.runtime.certificates import certificates, needs_openssl
from tests.component.runtime.httpserver import (
    NS,
    Request,
    Server,
    answering,
    config_map,
    no_proxy_from_the_environment,
    server_tls,
    serving,
)

__all__ = ["no_proxy_from_the_environment"]  # the autouse fixture, for this module too

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
CHUNKED = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
LAST_CHUNK = b"0\r\n\r\n"


def event(name: str, event_type: str = "ADDED") -> bytes:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}}
    return msgspec.json.encode({"type": event_type, "object": obj}) + b"\n"


def chunk(data: bytes, extension: str = "") -> bytes:
    return f"{len(data):x}{extension}\r\n".encode() + data + b"\r\n"


def cut(wire: bytes, size: int) -> list[Any]:
    """``wire`` in parts of ``size`` bytes, each written apart."""
    return [wire[start : start + size] for start in range(0, len(wire), size)]


EVENTS = event("a") + event("b", "MODIFIED") + event("c", "DELETED")


def framed(body: bytes, framing: str) -> bytes:
    """A 200 answer with ``body``: chunked (in three chunks that split its lines, with chunk
    extensions or not), with a Content-Length, or until the server closes."""
    if framing.startswith("chunked"):
        extension = ";name=value" if "extensions" in framing else ""
        pieces = [body[:10], body[10 : len(body) // 2], body[len(body) // 2 :]]
        return CHUNKED + b"".join(chunk(piece, extension) for piece in pieces) + LAST_CHUNK
    if framing == "length":
        return HEAD + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    return HEAD + b"\r\n" + body


@contextlib.asynccontextmanager
async def clients_on(
    server: Server, *, request_timeout: float = 5.0, limit: int | None = None
) -> AsyncIterator[tuple[KubeApi, KubeApi]]:
    """Over the lean transport, and over aiohttp, with one ApiClient."""
    configuration = Configuration(host=server.url)
    configuration.api_key["BearerToken"] = "Bearer t0ken"
    if limit is not None:
        configuration.connection_pool_maxsize = limit
    client = new_api_client(configuration)
    try:
        yield (
            KubeApi(client, request_timeout=request_timeout),
            KubeApi(client, request_timeout=request_timeout, via_aiohttp=True),
        )
    finally:
        await client.close()


Outcome = tuple[list[str], Any]
"""The names of the events read, then how the stream ended: None (cleanly), or the error's
class, status and reason (and message, for an answer of the server's)."""


async def outcome(kube: KubeApi, inactivity_limit: float = 2.0) -> Outcome:
    names: list[str] = []
    try:
        async with kube.watch("ConfigMap", resource_version="1", timeout_seconds=30) as stream:
            while (found := await stream.next_event(inactivity_limit)) is not None:
                names.append(f"{found['type']} {found['object']['metadata']['name']}")
    except KubeError as error:
        ended: Any = (type(error).__name__, error.status, error.reason)
        if error.status:
            ended = (*ended, error.message)
        return names, ended
    return names, None


async def both_ways(
    server: Server, *, over_aiohttp: Outcome | None = None, **options: Any
) -> Outcome:
    """The outcome over the lean transport, checked to be the one over aiohttp (unless told
    what that is)."""
    async with clients_on(server, **options) as (lean, old):
        over_lean = await outcome(lean)
        sent = len(server.requests)
        assert await outcome(old) == (over_aiohttp or over_lean)
    assert sent >= 1 and "accept-encoding" not in server.requests[0].headers
    assert "accept-encoding" in server.requests[sent].headers
    assert server.requests[0].target == (
        "/api/v1/configmaps?watch=true&allowWatchBookmarks=true&resourceVersion=1&timeoutSeconds=30"
    )
    return over_lean


ALL_THREE = ["ADDED a", "MODIFIED b", "DELETED c"]


@needs_openssl
async def test_a_watch_over_https(tmp_path: Path) -> None:
    files = certificates(tmp_path)
    wire = framed(EVENTS, "chunked")
    server = Server(answering(cut(wire, 50)), tls=server_tls(files))
    async with serving(server):
        configuration = Configuration(host=server.url)
        configuration.ssl_ca_cert = str(files["ca"])
        client = new_api_client(configuration)
        try:
            assert await outcome(KubeApi(client)) == (ALL_THREE, None)
        finally:
            await client.close()
    assert "accept-encoding" not in server.requests[0].headers


@pytest.mark.parametrize("size", [1, 7, 100_000])
@pytest.mark.parametrize("framing", ["chunked", "chunked with extensions", "length", "until close"])
async def test_a_stream_however_framed_and_cut(framing: str, size: int) -> None:
    """Lines split across chunks, and chunks (and their size lines) across reads."""
    wire = framed(EVENTS, framing)
    parts = cut(wire, size) if size > 1 else [*cut(wire[:150], 1), wire[150:]]
    server = Server(answering(parts), then_close=lambda request: framing == "until close")
    async with serving(server):
        assert await both_ways(server) == (ALL_THREE, None)


def sized(body: bytes, length: int) -> bytes:
    return HEAD + f"Content-Length: {length}\r\n\r\n".encode() + body


A, B = event("a"), event("b")
DROPS: dict[str, tuple[bytes, list[str]]] = {
    "chunked, mid-line": (CHUNKED + chunk(A) + chunk(B)[:20], ["ADDED a"]),
    "chunked, mid-chunk": (CHUNKED + chunk(A + B)[:-20], ["ADDED a"]),
    "chunked, between lines": (CHUNKED + chunk(A) + chunk(B), ["ADDED a", "ADDED b"]),
    "length, mid-line": (sized(A + B[:20], len(A + B)), ["ADDED a"]),
    "length, between lines": (sized(A, len(A + B)), ["ADDED a"]),
    "until close, mid-line": (HEAD + b"\r\n" + A + B[:20], ["ADDED a"]),
}


@pytest.mark.parametrize("name", DROPS)
async def test_a_stream_dropped_midway_is_broken(name: str) -> None:
    wire, names = DROPS[name]
    server = Server(answering([wire]), then_close=lambda request: True)
    async with serving(server):
        assert await both_ways(server) == (names, ("StreamBroken", 0, "StreamBroken"))


STATUS_410 = msgspec.json.encode(
    {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410, "message": "old"}
)
STATUS_403 = msgspec.json.encode(
    {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403, "message": "no"}
)
ERROR_EVENT = b'{"type":"ERROR","object":' + STATUS_410 + b"}\n"


def whole_answer(status: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    return head.encode() + b"\r\n\r\n" + body


ENDINGS: dict[str, tuple[Any, Outcome]] = {
    "ERROR 410 event": (
        CHUNKED + chunk(event("a") + ERROR_EVENT) + LAST_CHUNK,
        (["ADDED a"], ("Expired", 410, "Expired", "old")),
    ),
    "HTTP 410": (whole_answer("410 Gone", STATUS_410), ([], ("Expired", 410, "Expired", "old"))),
    "HTTP 403": (
        whole_answer("403 Forbidden", STATUS_403),
        ([], ("KubeError", 403, "Forbidden", "no")),
    ),
    "HTTP 500 not JSON": (
        whole_answer("500 Internal Server Error", b"oops"),
        ([], ("KubeError", 500, "Internal Server Error", "oops")),
    ),
    "not HTTP": (b"SSH-2.0-OpenSSH_9.6\r\n", ([], ("KubeError", 0, "Unreachable"))),
    "a line not JSON": (
        CHUNKED + chunk(event("a") + b"hello\n") + LAST_CHUNK,
        (["ADDED a"], ("StreamBroken", 0, "StreamBroken")),
    ),
    "a line with no type": (
        CHUNKED + chunk(b'{"object": {}}\n') + LAST_CHUNK,
        ([], ("StreamBroken", 0, "StreamBroken")),
    ),
    "blank lines and a clean end": (
        CHUNKED + chunk(b"\n" + event("a") + b"\r\n  \n") + LAST_CHUNK,
        (["ADDED a"], None),
    ),
}


@pytest.mark.parametrize("name", ENDINGS)
async def test_failures_and_garbage_end_the_watch_as_over_aiohttp(name: str) -> None:
    wire, expected = ENDINGS[name]
    server = Server(answering(wire), then_close=lambda request: True)
    async with serving(server):
        started = time.monotonic()
        assert await both_ways(server) == expected
        assert time.monotonic() - started < 3.0  # none of them waits for a timeout


async def test_a_garbled_chunk_is_broken_where_aiohttp_waited_for_a_stall() -> None:
    """aiohttp's parser fails, but the reader of the stream is not told: only the inactivity
    limit (2 s) ends the watch, as a stall. Over the lean transport it is a broken stream at
    once; the watcher does the same for both (watch again from the last resourceVersion)."""
    parts = [CHUNKED + chunk(event("a")), b"zz\r\n{}\r\n"]  # the garbage after the head
    server = Server(answering(parts), then_close=lambda request: True)
    async with serving(server):
        stalled = (["ADDED a"], ("StreamStalled", 0, "Timeout"))
        broken = await both_ways(server, over_aiohttp=stalled)
        assert broken == (["ADDED a"], ("StreamBroken", 0, "StreamBroken"))


async def test_a_silent_stream_stalls_and_the_bound_holds_only_until_its_answer_starts() -> None:
    """The request timeout (0.3 s) bounds the wait for the answer's head, not the stream: a
    1 s pause between events is fine; 2 s of silence is the inactivity limit."""
    parts = [CHUNKED, chunk(event("a")), 1.0, chunk(event("b")), 3600.0]
    server = Server(answering(parts))
    async with serving(server), clients_on(server, request_timeout=0.3) as (lean, _):
        started = time.monotonic()
        names, ended = await outcome(lean, inactivity_limit=2.0)
        assert names == ["ADDED a", "ADDED b"]
        assert ended == ("StreamStalled", 0, "Timeout")
        assert 2.5 < time.monotonic() - started < 6.0


async def test_a_watch_whose_answer_never_starts_is_a_timeout_and_frees_its_slot() -> None:
    async def hang_once(request: Request) -> Any:
        if request.connection == 0:
            await asyncio.sleep(3600)
        return [CHUNKED, chunk(event("a")), LAST_CHUNK]

    server = Server(hang_once)
    async with serving(server), clients_on(server, request_timeout=0.3, limit=1) as (lean, _):
        assert await outcome(lean) == ([], ("KubeError", 0, "Timeout"))
        # The one stream the limit allows is free again.
        assert await outcome(lean) == (["ADDED a"], None)


async def test_closing_a_watch_closes_its_connection_and_leaves_the_requests_theirs() -> None:
    """A watch has a connection of its own, outside the one-shot requests' limit; leaving the
    watch closes it, mid-stream."""

    async def reply(request: Request) -> Any:
        if "watch=true" in request.target:
            return [CHUNKED, chunk(event("a")), *[0.02, chunk(b"\n")] * 500]
        return whole_answer("200 OK", msgspec.json.encode(config_map("c")))

    server = Server(reply)
    async with serving(server), clients_on(server, limit=1) as (lean, _):
        pool = lean._pool
        assert pool is not None
        key = ObjectKey("ConfigMap", NS, "c")
        await lean.get(key)
        async with lean.watch("ConfigMap", resource_version="1", timeout_seconds=30) as stream:
            found = await stream.next_event(2.0)
            assert found is not None and found["object"]["metadata"]["name"] == "a"
            assert (await lean.get(key))["metadata"]["name"] == "c"  # not held up by the limit
            assert pool.connections == server.open == 2
        await settled(lambda: (pool.connections, server.open), (1, 1))
        await lean.get(key)
    assert [(r.connection, "watch" in r.target) for r in server.requests] == [
        (0, False),
        (1, True),
        (0, False),
        (0, False),
    ]


async def test_a_reader_slower_than_the_stream_gets_every_byte_and_holds_little() -> None:
    """Backpressure: while the reader waits, the connection stops reading, and the buffer of
    what is waiting stays near the high-water mark, not the whole of what the server sent."""
    piece = bytes(range(256)) * 256  # 64 KiB
    count = 256  # 16 MiB in all
    body = CHUNKED + chunk(piece) * count + LAST_CHUNK
    async with serving(Server(answering(body))) as server:
        pool = http1.Pool("127.0.0.1", int(server.url.rsplit(":", 1)[1]))
        try:
            stream = await pool.stream("/", {})
            assert (stream.status, stream.reason) == (200, "OK")
            await asyncio.sleep(0.5)
            held = stream._size
            assert 0 < held < 2 * http1._HIGH_WATER
            received = bytearray()
            while data := await stream.read():
                received += data
            assert received == piece * count
            stream.close()
        finally:
            await pool.close()


def test_the_services_event_loop_carries_watches_too() -> None:
    uvloop = pytest.importorskip("uvloop")

    async def watches() -> None:
        wire = framed(EVENTS, "chunked")
        async with serving(Server(answering(cut(wire, 7)))) as server:
            assert await both_ways(server) == (ALL_THREE, None)
        dropped = Server(answering(CHUNKED + chunk(event("a")) + b"10\r\n{"), lambda r: True)
        async with serving(dropped):
            assert await both_ways(dropped) == (["ADDED a"], ("StreamBroken", 0, "StreamBroken"))
        await test_a_reader_slower_than_the_stream_gets_every_byte_and_holds_little()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(watches())


async def settled(now: Callable[[], Any], expected: Any) -> None:
    """Wait (1 s at most) for ``now()`` to be ``expected``: a closed connection is seen gone at
    the next turns of the loop."""
    for _ in range(100):
        if now() == expected:
            return
        await asyncio.sleep(0.01)
    assert now() == expected


# --- against the development cluster -------------------------------------------------------


@pytest.fixture
async def cluster_and_client(tmp_path: Path) -> AsyncIterator[tuple[DevCluster, ApiClient]]:
    async with DevCluster(port=0, latency=LatencyModel.zero(), controllers=[]) as cluster:
        configuration = Configuration()
        await kube_config.load_kube_config(
            config_file=str(cluster.write_kubeconfig(tmp_path / "kubeconfig")),
            client_configuration=configuration,
        )
        client = new_api_client(configuration)
        try:
            yield cluster, client
        finally:
            await client.close()


async def read_until(stream: Any, names: set[str]) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    while names - {name for _, name in seen}:
        found = await stream.next_event(5.0)
        assert found is not None
        if found["type"] != "BOOKMARK":
            seen.append((found["type"], found["object"]["metadata"]["name"]))
    return seen


async def test_the_development_clusters_watches_over_the_lean_transport(
    cluster_and_client: tuple[DevCluster, ApiClient],
) -> None:
    cluster, client = cluster_and_client
    lean = KubeApi(client, field_manager="sandbus-test")
    old = KubeApi(client, field_manager="sandbus-test", via_aiohttp=True)
    await lean.create(config_map("first"))
    version = (await lean.list_page("ConfigMap", limit=10))["metadata"]["resourceVersion"]
    pool = lean._pool
    assert pool is not None

    # The same events, whichever way; then the server's timeout ends both cleanly.
    async with (
        lean.watch("ConfigMap", resource_version=version, timeout_seconds=2) as over_lean,
        old.watch("ConfigMap", resource_version=version, timeout_seconds=2) as over_aiohttp,
    ):
        assert pool.connections == 2  # the list's, kept, and the watch's own
        await lean.patch(ObjectKey("ConfigMap", NS, "first"), {"data": {"x": "y"}})
        await lean.create(config_map("second"))
        await lean.delete(ObjectKey("ConfigMap", NS, "first"))
        expected = [("MODIFIED", "first"), ("ADDED", "second"), ("DELETED", "first")]
        assert await read_until(over_lean, {"first", "second"}) == expected[:2]
        assert await read_until(over_aiohttp, {"first", "second"}) == expected[:2]
        for stream in (over_lean, over_aiohttp):
            found = await stream.next_event(5.0)
            while found is not None and found["type"] == "BOOKMARK":
                found = await stream.next_event(5.0)
            assert found is not None and (found["type"], found["object"]["metadata"]["name"]) == (
                "DELETED",
                "first",
            )
        started = time.monotonic()
        for stream in (over_lean, over_aiohttp):
            while (found := await stream.next_event(5.0)) is not None:
                assert found["type"] == "BOOKMARK"
        assert time.monotonic() - started < 4.0
    await settled(lambda: pool.connections, 1)

    # ERROR 410 in the stream: Expired.
    cluster.faults.watch("expire", resource="configmaps", count=1)
    with pytest.raises(Expired):
        async with lean.watch("ConfigMap", resource_version=version, timeout_seconds=30) as stream:
            await stream.next_event(5.0)

    # A resourceVersion older than the history: Expired, whichever way.
    await lean.create(config_map("third"))
    cluster.faults.compact()
    for kube in (lean, old):
        with pytest.raises(Expired):
            async with kube.watch(
                "ConfigMap", resource_version=version, timeout_seconds=30
            ) as stream:
                await stream.next_event(5.0)

    # An aborted stream: broken.
    latest = (await lean.list_page("ConfigMap", limit=10))["metadata"]["resourceVersion"]
    with pytest.raises(StreamBroken):
        async with lean.watch("ConfigMap", resource_version=latest, timeout_seconds=30) as stream:
            await cluster.watches.wait_for()
            assert cluster.faults.break_watches("abort", resource="configmaps") == 1
            while True:
                await stream.next_event(5.0)
    await settled(lambda: pool.connections, 1)
