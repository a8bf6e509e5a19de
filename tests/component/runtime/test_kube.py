"""The Kubernetes client against real sockets: every way a request can go unanswered is one
KubeError with status 0, never an aiohttp or OS exception; and the calls the services make,
against the development cluster."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi, KubeError
from tests.component.runtime.httpserver import config_map
from tests.component.watcher.harness import api_client, quiet_cluster

NS = "default"
POD = ObjectKey("Pod", NS, "p")


@pytest.fixture
async def server() -> AsyncIterator[str]:
    """A tiny HTTP server that misbehaves in the ways an API server or its network can."""

    async def hang(request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def disconnect(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.close()  # no status line, no headers: the server went away
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = 1000
        await response.prepare(request)
        await response.write(b'{"kind": "Pod", "metadata": {')
        assert request.transport is not None
        request.transport.close()  # the body stops a tenth of the way through
        return response

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default/pods/hang", hang)
    app.router.add_get("/api/v1/namespaces/default/pods/disconnect", disconnect)
    app.router.add_get("/api/v1/namespaces/default/pods/cut", cut)
    app.router.add_get("/api/v1/pods", hang)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def kube_of(client: k8s.ApiClient, timeout: float = 5.0) -> KubeApi:
    return KubeApi(client, request_timeout=timeout)


ClientOf = Callable[[str], k8s.ApiClient]


@pytest.fixture
async def client_of() -> AsyncIterator[ClientOf]:
    clients: list[k8s.ApiClient] = []

    def make(host: str) -> k8s.ApiClient:
        client = k8s.ApiClient(k8s.Configuration(host=host))
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


async def unanswered(call: Awaitable[Any]) -> KubeError:
    with pytest.raises(KubeError) as raised:
        await call
    assert raised.value.status == 0 and raised.value.unanswered
    return raised.value


async def test_a_closed_port_is_unreachable(client_of: ClientOf) -> None:
    kube = kube_of(client_of(f"http://127.0.0.1:{closed_port()}"))
    error = await unanswered(kube.get(POD))
    assert error.reason == "Unreachable"


async def test_a_server_that_disconnects_before_answering_is_unreachable(
    server: str, client_of: ClientOf
) -> None:
    kube = kube_of(client_of(server))
    error = await unanswered(kube.get(ObjectKey("Pod", NS, "disconnect")))
    assert error.reason == "Unreachable"
    assert "ServerDisconnected" in error.message


async def test_an_answer_cut_off_mid_body_is_unreachable(server: str, client_of: ClientOf) -> None:
    kube = kube_of(client_of(server))
    error = await unanswered(kube.get(ObjectKey("Pod", NS, "cut")))
    assert error.reason == "Unreachable"


async def test_a_request_that_outlasts_the_timeout_is_a_timeout(
    server: str, client_of: ClientOf
) -> None:
    kube = kube_of(client_of(server), timeout=0.3)
    started = time.monotonic()
    error = await unanswered(kube.get(ObjectKey("Pod", NS, "hang")))
    assert error.reason == "Timeout"
    assert time.monotonic() - started < 5.0


async def test_a_watch_whose_answer_never_starts_is_a_timeout(
    server: str, client_of: ClientOf
) -> None:
    kube = kube_of(client_of(server), timeout=0.3)

    async def watch() -> None:
        async with kube.watch("Pod", resource_version="1", timeout_seconds=60):
            raise AssertionError("the watch should not have started")

    error = await unanswered(watch())
    assert error.reason == "Timeout"


# --- the calls the services make, against the development cluster -------------------------


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    async with quiet_cluster() as running:
        yield running


@pytest.fixture
async def kube(cluster: DevCluster, tmp_path: Path) -> AsyncIterator[KubeApi]:
    async with api_client(cluster, tmp_path) as client:
        yield KubeApi(client, field_manager="sandbus-test")


async def test_create_get_patch_replace_list_and_delete(kube: KubeApi) -> None:
    created = await kube.create(config_map("c", a="1"))
    key = ObjectKey("ConfigMap", NS, "c")
    assert (await kube.get(key))["data"] == {"a": "1"}
    patched = await kube.patch(key, {"data": {"b": "2"}})
    assert patched["data"] == {"a": "1", "b": "2"}
    assert created["metadata"]["managedFields"][0]["manager"] == "sandbus-test"

    stale = dict(created)  # the resourceVersion of the create: a precondition that fails now
    with pytest.raises(KubeError) as conflict:
        await kube.replace(stale)
    assert conflict.value.conflict
    replaced = await kube.replace({**patched, "data": {"c": "3"}})
    assert replaced["data"] == {"c": "3"}

    assert [o["metadata"]["name"] for o in await kube.list("ConfigMap", NS)] == ["c"]
    with pytest.raises(KubeError) as exists:
        await kube.create(config_map("c"))
    assert exists.value.already_exists

    await kube.delete(key, uid=created["metadata"]["uid"])
    with pytest.raises(KubeError) as gone:
        await kube.get(key)
    assert gone.value.not_found


async def test_a_list_page_and_a_watch_of_one_resource(kube: KubeApi) -> None:
    await kube.create(config_map("w"))
    page = await kube.list_page("ConfigMap", limit=10)
    assert [item["metadata"]["name"] for item in page["items"]] == ["w"]
    version = page["metadata"]["resourceVersion"]
    async with kube.watch("ConfigMap", resource_version=version, timeout_seconds=30) as stream:
        await kube.patch(ObjectKey("ConfigMap", NS, "w"), {"data": {"x": "y"}})
        while True:
            event = await stream.next_event(5.0)
            assert event is not None
            if event["type"] != "BOOKMARK":
                break
    assert event["type"] == "MODIFIED" and event["object"]["data"] == {"x": "y"}
