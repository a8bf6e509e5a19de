"""The lean HTTP/1.1 transport of the Kubernetes client (services/runtime/http1.py), through
:class:`KubeApi` as the services use it: against the development cluster, the same answers as
over aiohttp; against tiny servers written here, every way an HTTP/1.1 answer can be framed and
every way it can fail to come, which must be one KubeError as before (status 0, ``Unreachable``
or ``Timeout``); connections reused, limited, and closed with the ApiClient.

A request the lean transport sent carries no ``Accept-Encoding`` (aiohttp's do): that is how a
test tells which way it went."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from devtools.cluster import DevCluster, LatencyModel
from events.envelope import ObjectKey
from services.runtime import http1
from services.runtime.kube import KubeApi, KubeError
from services.runtime.kubeclient import ApiClient, Configuration, kube_config, new_api_client
from tests.component.runtime.certificates import certificates, needs_openssl
from tests.component.runtime.httpserver import (
    CLOSE,
    NS,
    Request,
    Server,
    answering,
    config_map,
    no_proxy_from_the_environment,
    server_tls,
    serving,
)

KEY = ObjectKey("ConfigMap", NS, "c")
OBJECT = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS}}
BODY = msgspec.json.encode(OBJECT)

__all__ = ["no_proxy_from_the_environment"]  # the autouse fixture, for this module too


# --- against the development cluster: the answers aiohttp gave -------------------------------


@pytest.fixture
async def cluster_client(tmp_path: Path) -> AsyncIterator[ApiClient]:
    async with DevCluster(port=0, latency=LatencyModel.zero(), controllers=[]) as cluster:
        configuration = Configuration()
        await kube_config.load_kube_config(
            config_file=str(cluster.write_kubeconfig(tmp_path / "kubeconfig")),
            client_configuration=configuration,
        )
        client = new_api_client(configuration)
        try:
            yield client
        finally:
            await client.close()


async def failure(call: Awaitable[Any]) -> tuple[int, str, str]:
    with pytest.raises(KubeError) as raised:
        await call
    return raised.value.status, raised.value.reason, raised.value.message


async def test_the_development_cluster_answers_as_it_did_over_aiohttp(
    cluster_client: ApiClient,
) -> None:
    lean = KubeApi(cluster_client, field_manager="sandbus-test")
    old = KubeApi(cluster_client, field_manager="sandbus-test", via_aiohttp=True)
    key = ObjectKey("ConfigMap", NS, "lean")

    created = await lean.create(config_map("lean", a="1"))
    assert created["metadata"]["managedFields"][0]["manager"] == "sandbus-test"
    assert await lean.get(key) == await old.get(key) == created
    patched = await lean.patch(key, {"data": {"b": "2"}, "metadata": {"labels": {"x": "y"}}})
    assert patched["data"] == {"a": "1", "b": "2"} and patched["metadata"]["labels"] == {"x": "y"}
    assert await old.get(key) == patched
    listed = await lean.list("ConfigMap", NS)
    assert listed == await old.list("ConfigMap", NS) and len(listed) == 1

    # The failures: the same status, reason and message, whichever way they went.
    for make in (
        lambda kube: kube.get(ObjectKey("ConfigMap", NS, "absent")),
        lambda kube: kube.create(config_map("lean")),
        lambda kube: kube.create(config_map("Not_Valid")),
        lambda kube: kube.patch(ObjectKey("ConfigMap", NS, "absent"), {"data": {}}),
        lambda kube: kube.delete(ObjectKey("ConfigMap", NS, "absent")),
    ):
        assert await failure(make(lean)) == await failure(make(old))
    not_found = await failure(lean.get(ObjectKey("ConfigMap", NS, "absent")))
    assert not_found == (404, "NotFound", 'configmaps "absent" not found')
    exists = await failure(lean.create(config_map("lean")))
    assert exists == (409, "AlreadyExists", 'configmaps "lean" already exists')
    status, reason, message = await failure(lean.create(config_map("Not_Valid")))
    assert (status, reason) == (422, "Invalid")
    assert message.startswith('ConfigMap "Not_Valid" is invalid: metadata.name: Invalid value')

    deleted = await lean.delete(key, uid=created["metadata"]["uid"])
    assert deleted["kind"] in ("Status", "ConfigMap")
    assert (await failure(old.get(key)))[0] == 404


# --- tiny servers ----------------------------------------------------------------------------


def answer(
    body: bytes = BODY, status: str = "200 OK", headers: str = "", *, length: bool = True
) -> bytes:
    framing = f"Content-Length: {len(body)}\r\n" if length else ""
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{headers}{framing}\r\n"
    return head.encode() + body


@contextlib.asynccontextmanager
async def kube_on(
    server: Server, *, request_timeout: float = 5.0, limit: int | None = None, **configured: Any
) -> AsyncIterator[KubeApi]:
    configuration = Configuration(host=server.url)
    configuration.api_key["BearerToken"] = "Bearer t0ken"
    if limit is not None:
        configuration.connection_pool_maxsize = limit
    for name, value in configured.items():
        setattr(configuration, name, value)
    client = new_api_client(configuration)
    try:
        yield KubeApi(client, field_manager="m", request_timeout=request_timeout)
    finally:
        await client.close()


async def unanswered(call: Awaitable[Any], reason: str) -> KubeError:
    with pytest.raises(KubeError) as raised:
        await call
    assert (raised.value.status, raised.value.reason) == (0, reason), raised.value
    return raised.value


def test_the_services_event_loop_carries_it_too() -> None:
    """The services run on uvloop, whose transports are not asyncio.Transport subclasses."""
    uvloop = pytest.importorskip("uvloop")

    async def calls() -> None:
        async with serving(Server(answering(answer()))) as server, kube_on(server) as kube:
            for _ in range(2):
                assert await kube.get(KEY) == OBJECT
            assert await kube.patch(KEY, {"data": {"a": "1"}}) == OBJECT
            assert server.connections == 1

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(calls())


async def test_one_connection_carries_the_requests_one_after_the_other() -> None:
    async with serving(Server(answering(answer()))) as server, kube_on(server) as kube:
        for _ in range(3):
            assert await kube.get(KEY) == OBJECT
        assert await kube.patch(KEY, {"data": {"a": "é"}}) == OBJECT
        assert await kube.create(OBJECT) == OBJECT
        await kube.delete(KEY)
    assert server.connections == 1
    assert [(r.method, r.number) for r in server.requests] == [
        ("GET", 0),
        ("GET", 1),
        ("GET", 2),
        ("PATCH", 3),
        ("POST", 4),
        ("DELETE", 5),
    ]
    get, patch = server.requests[0], server.requests[3]
    assert get.target == "/api/v1/namespaces/default/configmaps/c"
    assert "content-length" not in get.headers and "accept-encoding" not in get.headers
    assert get.headers["host"] == server.url.removeprefix("http://")
    assert get.headers["authorization"] == "Bearer t0ken"
    assert patch.target == "/api/v1/namespaces/default/configmaps/c?fieldManager=m"
    assert patch.headers["content-type"] == "application/merge-patch+json"
    assert msgspec.json.decode(patch.body) == {"data": {"a": "é"}}
    assert int(patch.headers["content-length"]) == len(patch.body)


async def test_a_chunked_answer_and_an_interim_one() -> None:
    chunked = [
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"5;name=value\r\n" + BODY[:5] + b"\r\n",
        f"{len(BODY) - 5:x}\r\n".encode() + BODY[5:] + b"\r\n",
        b"0\r\nX-Trailer: t\r\n\r\n",
    ]
    async with serving(Server(answering(chunked))) as server, kube_on(server) as kube:
        assert await kube.get(KEY) == OBJECT
        assert await kube.get(KEY) == OBJECT  # all of it read: the connection is good for more
    assert server.connections == 1


async def test_after_connection_close_the_next_request_goes_on_a_new_connection() -> None:
    replies = [
        answer(headers="Connection: close\r\n"),
        # HTTP/1.0 without a length: the body runs until the server closes.
        b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + BODY,
        answer(),
    ]
    server = Server(answering(*replies), then_close=lambda request: request.connection < 2)
    async with serving(server), kube_on(server) as kube:
        for _ in range(4):
            assert await kube.get(KEY) == OBJECT
    assert [r.connection for r in server.requests] == [0, 1, 2, 2]


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    server = Server(answering(answer()))
    server.then_close = lambda request: request.connection == 0
    async with serving(server), kube_on(server) as kube:
        assert await kube.patch(KEY, {"data": {}}) == OBJECT
        await asyncio.sleep(0.2)  # the server's close arrives while the connection is idle
        assert await kube.patch(KEY, {"data": {}}) == OBJECT
    assert [r.connection for r in server.requests] == [0, 1]


async def test_a_connection_idle_for_too_long_is_not_reused() -> None:
    async with serving(Server(answering(answer()))) as server:
        pool = http1.Pool("127.0.0.1", int(server.url.rsplit(":", 1)[1]), idle_seconds=0.1)
        try:
            for pause in (0.0, 0.0, 0.3, 0.0):
                await asyncio.sleep(pause)
                status, reason, body = await pool.request("GET", "/", {})
                assert (status, reason, body) == (200, "OK", BODY)
            assert pool.connections == 1
            # Two in use at once, then only one of them: the other is closed once too old.
            await asyncio.gather(pool.request("GET", "/", {}), pool.request("GET", "/", {}))
            assert pool.connections == 2
            for _ in range(5):
                await asyncio.sleep(0.05)
                await pool.request("GET", "/", {})
            assert pool.connections == 1
        finally:
            await pool.close()
        assert pool.connections == 0
    assert [r.connection for r in server.requests[:4]] == [0, 0, 1, 1]
    assert server.connections == 3


async def test_a_get_on_a_connection_the_server_dropped_goes_again_and_a_patch_does_not() -> None:
    """The server closes a kept-alive connection as the next request arrives on it (its idle
    timeout and the request crossing): a GET is sent again on a new connection, a PATCH, which
    the server may have acted on, is a KubeError."""

    async def drop_the_second(request: Request) -> Any:
        return CLOSE if request.number == 1 else answer()

    async with serving(Server(drop_the_second)) as server, kube_on(server) as kube:
        assert await kube.get(KEY) == OBJECT
        assert await kube.get(KEY) == OBJECT  # dropped, then sent again
        assert [(r.connection, r.number) for r in server.requests] == [(0, 0), (0, 1), (1, 0)]
        error = await unanswered(kube.patch(KEY, {"data": {}}), "Unreachable")
        assert "ServerDisconnected" in error.message
        assert [(r.method, r.connection, r.number) for r in server.requests[3:]] == [
            ("PATCH", 1, 1)
        ]
        # On a new connection, not retried either: its failure is the answer.
        assert await kube.get(KEY) == OBJECT
    assert server.connections == 3


GARBAGE = {
    "not http": b"SSH-2.0-OpenSSH_9.6\r\n",
    "status": b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\n{}",
    "length": b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n{}",
    "two lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    "chunk size": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    "cut short": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",  # then the server closes
}


@pytest.mark.parametrize("name", GARBAGE)
async def test_a_garbled_answer_is_unreachable(name: str) -> None:
    async def garble(request: Request) -> Any:
        return GARBAGE[name]

    server = Server(garble, then_close=lambda request: name == "cut short")
    async with serving(server), kube_on(server) as kube:
        started = time.monotonic()
        await unanswered(kube.get(KEY), "Unreachable")
        assert time.monotonic() - started < 2.0  # not the timeout
        # The connection that carried it is gone; the next request opens another.
        await unanswered(kube.get(KEY), "Unreachable")
    assert server.connections == 2


async def test_a_server_that_never_answers_is_a_timeout_and_its_connection_is_dropped() -> None:
    async def hang(request: Request) -> Any:
        if request.connection == 0:
            await asyncio.sleep(3600)
        return answer()

    async with serving(Server(hang)) as server, kube_on(server, request_timeout=0.3) as kube:
        started = time.monotonic()
        error = await unanswered(kube.patch(KEY, {"data": {}}), "Timeout")
        assert time.monotonic() - started < 2.0
        assert "no answer within 0.3 s" in error.message
        # The connection that timed out is never used again (its answer might still come).
        assert await kube.get(KEY) == OBJECT
    assert [r.connection for r in server.requests] == [0, 1]


async def test_no_more_connections_than_the_limit_of_the_api_client() -> None:
    async def slowly(request: Request) -> Any:
        await asyncio.sleep(0.05)
        return answer()

    async with serving(Server(slowly)) as server, kube_on(server, limit=3) as kube:
        answers = await asyncio.gather(*(kube.get(KEY) for _ in range(12)))
        assert answers == [OBJECT] * 12
        assert server.connections == 3 and server.peak == 3
        # All three are kept, and used again.
        await asyncio.gather(*(kube.get(KEY) for _ in range(3)))
    assert server.connections == 3
    assert len(server.requests) == 15


async def test_closing_the_api_client_closes_its_connections() -> None:
    async with serving(Server(answering(answer()))) as server:
        async with kube_on(server) as kube:
            await asyncio.gather(*(kube.get(KEY) for _ in range(4)))
            assert server.open >= 1
        for _ in range(100):  # the server sees the connections end
            if server.open == 0:
                break
            await asyncio.sleep(0.01)
        assert server.open == 0
        await unanswered(kube.get(KEY), "Unreachable")  # a closed client sends nothing


# --- TLS -----------------------------------------------------------------------------------


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, Path]:
    return certificates(tmp_path)


@needs_openssl
async def test_https_with_the_clusters_ca(tls_files: dict[str, Path]) -> None:
    server = Server(answering(answer()), tls=server_tls(tls_files))
    async with serving(server), kube_on(server, ssl_ca_cert=str(tls_files["ca"])) as kube:
        for _ in range(3):
            assert await kube.get(KEY) == OBJECT
        assert await kube.patch(KEY, {"data": {}}) == OBJECT
    assert server.connections == 1
    assert "accept-encoding" not in server.requests[0].headers  # the lean transport's
    assert server.requests[0].headers["host"] == server.url.removeprefix("https://")


@needs_openssl
async def test_https_with_a_certificate_no_trusted_ca_signed_is_unreachable(
    tls_files: dict[str, Path], tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    another_ca = certificates(other)["ca"]
    server = Server(answering(answer()), tls=server_tls(tls_files))
    async with serving(server), kube_on(server, ssl_ca_cert=str(another_ca)) as kube:
        error = await unanswered(kube.get(KEY), "Unreachable")
        assert "CERTIFICATE_VERIFY_FAILED" in error.message
    assert server.requests == []
