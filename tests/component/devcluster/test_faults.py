"""Latency model and fault injection (docs/devcluster.md §4.5), and the §3 failure table."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from devtools.cluster import DevCluster, LatencyModel
from tests.component.devcluster.samples import (
    GROUP,
    PLURAL,
    VERSION,
    create_widget,
    failure,
    widget,
)

WIDGETS = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"


async def test_error_rule_with_retry_after(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    """error(429, retry_after): a TooManyRequests Status and a Retry-After header, on the
    matching verb and resource only, as many times as ``count`` says."""
    cluster.faults.error(429, retry_after=2, verb="create", resource="widgets", count=1)
    async with http.get(WIDGETS) as response:
        assert response.status == 200
    async with http.post(WIDGETS, json=widget("w1")) as response:
        assert response.status == 429
        assert response.headers["Retry-After"] == "2"
        body = await response.json()
    assert body["reason"] == "TooManyRequests"
    assert body["details"] == {"retryAfterSeconds": 2}
    async with http.post(WIDGETS, json=widget("w1")) as response:
        assert response.status == 201


async def test_nth_and_name_matching(cluster: DevCluster, http: aiohttp.ClientSession) -> None:
    """A rule can fire on the nth matching request only, and match names by regex."""
    cluster.faults.error(500, verb="create", name="", nth=2)
    codes = []
    for i in range(3):
        async with http.post(WIDGETS, json=widget(f"w{i}")) as response:
            codes.append(response.status)
    assert codes == [201, 500, 201]


async def test_conflict_once_models_a_racing_writer(
    cluster: DevCluster, custom: k8s.CustomObjectsApi
) -> None:
    """conflict_once: the target's RV moves just before the request, so a PUT carrying the RV it
    read fails with a real 409; the retry after a re-read succeeds."""
    created = await create_widget(custom)
    cluster.faults.conflict_once(verb="update", resource="widgets", name="w1")
    created["spec"]["size"] = 2
    status, error = await failure(
        custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w1", created)
    )
    assert (status, error["reason"]) == (409, "Conflict")
    fresh = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w1")
    fresh["spec"]["size"] = 2
    done = await custom.replace_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "w1", fresh
    )
    assert done["spec"]["size"] == 2


async def test_drop_before_commit_does_not_write(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    """drop(before_commit): the connection breaks and nothing was written."""
    cluster.faults.drop("before_commit", verb="create")
    with pytest.raises(aiohttp.ClientError):
        async with http.post(WIDGETS, json=widget("w1")) as response:
            await response.read()
    assert cluster.store.get("widgets.example.com", "default", "w1") is None


async def test_drop_after_commit_writes_but_the_client_sees_an_error(
    cluster: DevCluster, custom: k8s.CustomObjectsApi
) -> None:
    """drop(after_commit): "it succeeded but the client saw an error"."""
    cluster.faults.drop("after_commit", verb="create", count=1)
    with pytest.raises(aiohttp.ClientError):
        await create_widget(custom)
    assert cluster.store.get("widgets.example.com", "default", "w1") is not None
    status, error = await failure(create_widget(custom))
    assert (status, error["reason"]) == (409, "AlreadyExists")


async def test_pause_answers_503_until_resumed(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    """pause(): 503 on everything, as during an apiserver restart."""
    cluster.faults.pause()
    for path in ("/version", WIDGETS, "/api/v1/namespaces"):
        async with http.get(path) as response:
            assert response.status == 503
            assert (await response.json())["reason"] == "ServiceUnavailable"
    cluster.faults.resume()
    async with http.get(WIDGETS) as response:
        assert response.status == 200


async def test_watch_abort_surfaces_as_client_payload_error(
    cluster: DevCluster, custom: k8s.CustomObjectsApi
) -> None:
    """§3: an aborted stream raises aiohttp.ClientPayloadError out of watch.Watch."""
    created = await create_widget(custom)
    cluster.faults.watch("abort", resource="widgets", after_events=1)
    seen = []
    with pytest.raises(aiohttp.ClientPayloadError):
        async with watch.Watch() as w:
            async for event in w.stream(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                "default",
                PLURAL,
                timeout_seconds=5,
            ):
                seen.append(event["type"])
    assert seen == ["ADDED"]
    assert created


async def test_watch_expire_raises_410(cluster: DevCluster, custom: k8s.CustomObjectsApi) -> None:
    """watch_expire: ERROR 410 now; the client raises ApiException(410)."""
    cluster.faults.watch("expire", resource="widgets")
    with pytest.raises(ApiException) as caught:
        async with watch.Watch() as w:
            async for _ in w.stream(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                "default",
                PLURAL,
                timeout_seconds=5,
            ):
                pass
    assert caught.value.status == 410


async def test_break_live_watches_with_a_clean_close(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    """break_watches("close"): live watches end with a clean EOF now."""
    async with http.get(WIDGETS, params={"watch": "1", "timeoutSeconds": "30"}) as response:
        async with asyncio.timeout(2):
            await cluster.watches.wait_for()
        assert cluster.faults.break_watches("close", resource="widgets") == 1
        started = time.monotonic()
        assert await response.read() == b""
        assert time.monotonic() - started < 15  # far sooner than the watch's own 30 s


async def test_watch_stall_hangs_the_stream(
    cluster: DevCluster, custom: k8s.CustomObjectsApi, http: aiohttp.ClientSession
) -> None:
    """watch_stall: events stop flowing although the connection stays open."""
    cluster.faults.watch("stall", resource="widgets")
    async with http.get(WIDGETS, params={"watch": "1", "timeoutSeconds": "30"}) as response:
        await create_widget(custom)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await response.content.readline()


async def test_admin_http_endpoints(cluster: DevCluster, http: aiohttp.ClientSession) -> None:
    """The fault engine over HTTP for other processes: add, list, state, compact, pause."""
    async with http.post(
        "/_devcluster/faults", json={"action": "error", "code": 503, "verb": "list", "count": 1}
    ) as response:
        assert response.status == 201
        rule = await response.json()
    async with http.get(WIDGETS) as response:
        assert response.status == 503
    async with http.get("/_devcluster/faults") as response:
        (listed,) = await response.json()
    assert listed["id"] == rule["id"] and listed["fired"] == 1
    async with http.post("/_devcluster/faults", json={"action": "explode"}) as response:
        assert response.status == 400
    async with http.post("/_devcluster/pause") as response:
        assert response.status == 200
    async with http.get("/_devcluster/state") as response:
        state = await response.json()
    assert state["paused"] is True
    assert state["objects"]["namespaces"] == 4
    async with http.post("/_devcluster/resume") as response:
        assert response.status == 200
    async with http.post("/_devcluster/compact") as response:
        compacted = (await response.json())["compactedResourceVersion"]
    assert compacted == str(cluster.store.resource_version)
    async with http.delete("/_devcluster/faults") as response:
        assert response.status == 200
    assert cluster.faults.rules == []


async def test_latency_model_is_seeded_and_bounded() -> None:
    """Seeded log-normal draws: the same seed gives the same sequence, within a band."""
    a = LatencyModel(seed=7)
    b = LatencyModel(seed=7)
    draws = [a.draw("write") for _ in range(200)]
    assert draws == [b.draw("write") for _ in range(200)]
    assert all(0.001 <= d <= 0.020 for d in draws)
    assert LatencyModel.zero().draw("write") == 0.0


async def test_write_latency_and_watch_propagation_delay(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    """Writes sleep before the commit; watch events are delayed from the commit, per watcher."""
    cluster.latency.update({"write": [0.05, 0.05], "watch": [0.1, 0.1]})
    async with http.get(WIDGETS, params={"watch": "1", "timeoutSeconds": "5"}) as response:
        async with asyncio.timeout(2):
            await cluster.watches.wait_for()
        started = time.monotonic()
        async with http.post(WIDGETS, json=widget("w1")) as created:
            assert created.status == 201
        write_done = time.monotonic() - started
        line = await response.content.readline()
        event_seen = time.monotonic() - started
    assert json.loads(line)["type"] == "ADDED"
    assert write_done >= 0.025
    assert event_seen >= write_done
