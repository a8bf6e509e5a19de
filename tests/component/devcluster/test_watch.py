"""Rows 2-6 of docs/devcluster.md §2 and the watch table of §3: the watch protocol."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from api.objects import Json
from devtools.cluster import DevCluster
from tests.component.devcluster.samples import GROUP, MERGE, PLURAL, VERSION, create_widget, pod

WIDGETS = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"


async def read_events(http: aiohttp.ClientSession, path: str, **params: str) -> list[Json]:
    """Every event of one watch request, until the server ends the stream."""
    events = []
    async with http.get(path, params={"watch": "true", **params}) as response:
        assert response.status == 200
        async for line in response.content:
            if line.strip():
                events.append(json.loads(line))
    return events


def summary(events: list[Json]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]


async def test_list_then_watch_delivers_every_later_change_in_order(
    custom: k8s.CustomObjectsApi, http: aiohttp.ClientSession
) -> None:
    """Row 2 (api-concepts #semantics-for-watch): watch from the list RV sends each change with
    RV > X in RV order and no synthetic ADDED for what the list already returned."""
    await create_widget(custom, "a")
    await create_widget(custom, "b")
    listed = await custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    rv = listed["metadata"]["resourceVersion"]
    await create_widget(custom, "c")
    await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "a", {"spec": {"size": 5}}, _content_type=MERGE
    )
    await custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "b")
    events = await read_events(http, WIDGETS, resourceVersion=rv, timeoutSeconds="1")
    assert summary(events) == [("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b")]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] == int(rv) + 1


@pytest.mark.parametrize("rv", [None, "0"])
async def test_watch_without_resource_version_starts_with_synthetic_added(
    custom: k8s.CustomObjectsApi, http: aiohttp.ClientSession, rv: str | None
) -> None:
    """Row 2: RV unset or "0" = "Get State and Start at Most Recent/Any": ADDED per object."""
    await create_widget(custom, "a")
    await create_widget(custom, "b")
    params = {"timeoutSeconds": "1"} | ({"resourceVersion": rv} if rv is not None else {})
    events = await read_events(http, WIDGETS, **params)
    assert summary(events) == [("ADDED", "a"), ("ADDED", "b")]


async def test_watch_wire_format(custom: k8s.CustomObjectsApi, http: aiohttp.ClientSession) -> None:
    """Row 3 (api-concepts #efficient-detection-of-changes): 200, application/json, chunked, one
    {type, object} document per line; DELETED carries the last state with the deletion RV."""
    created = await create_widget(custom, "a")
    rv = created["metadata"]["resourceVersion"]
    deleting = asyncio.create_task(
        custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a")
    )
    async with http.get(
        WIDGETS, params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "1"}
    ) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/json"
        assert response.headers["Transfer-Encoding"] == "chunked"
        raw = await response.read()
    await deleting
    lines = raw.decode().splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert set(event) == {"type", "object"}
    assert event["type"] == "DELETED"
    assert event["object"]["spec"] == created["spec"]
    assert int(event["object"]["metadata"]["resourceVersion"]) == int(rv) + 1


async def test_selector_transitions_become_added_and_deleted(
    core: k8s.CoreV1Api, http: aiohttp.ClientSession
) -> None:
    """Row 3 (cacher convertToWatchEvent): stops matching → DELETED with the previous state and
    the new RV; starts matching → ADDED."""
    created = await core.create_namespaced_pod("default", pod("p", labels={"tier": "web"}))
    rv = created.metadata.resource_version

    async def relabel(value: str) -> None:
        await core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"tier": value}}})

    await relabel("db")
    await relabel("web")
    events = await read_events(
        http,
        "/api/v1/namespaces/default/pods",
        resourceVersion=rv,
        labelSelector="tier=web",
        timeoutSeconds="1",
    )
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]
    gone = events[0]["object"]
    assert gone["metadata"]["labels"] == {"tier": "web"}  # the previous state
    assert int(gone["metadata"]["resourceVersion"]) == int(rv) + 1  # the new RV
    assert events[1]["object"]["metadata"]["labels"] == {"tier": "web"}


async def test_too_old_resource_version_is_an_error_event_on_a_200(
    cluster: DevCluster, custom: k8s.CustomObjectsApi, http: aiohttp.ClientSession
) -> None:
    """Row 4 (watch_cache.go, cacher.go newErrWatcher): HTTP 200 plus one ERROR event with the
    410 Expired Status, then EOF."""
    first = await create_widget(custom, "a")
    await create_widget(custom, "b")
    compacted = cluster.faults.compact()
    old = first["metadata"]["resourceVersion"]
    events = await read_events(http, WIDGETS, resourceVersion=old)
    assert events == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {old} ({compacted})",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]


async def test_history_ring_is_bounded_by_count(
    cluster: DevCluster, custom: k8s.CustomObjectsApi, http: aiohttp.ClientSession
) -> None:
    """Row 4: the watch cache is capacity-bounded; a resume from before the oldest kept event
    gets 410, a resume from inside the window still works."""
    cluster.store.history_size = 3
    first = await create_widget(custom, "a")
    for name in "bcde":
        await create_widget(custom, name)
    events = await read_events(http, WIDGETS, resourceVersion=first["metadata"]["resourceVersion"])
    assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410
    recent = cluster.store.resource_version - 2
    events = await read_events(http, WIDGETS, resourceVersion=str(recent), timeoutSeconds="1")
    assert summary(events) == [("ADDED", "d"), ("ADDED", "e")]


async def test_history_ring_is_bounded_by_age(
    cluster: DevCluster, custom: k8s.CustomObjectsApi, http: aiohttp.ClientSession
) -> None:
    """Row 4: events older than the fresh duration (75 s upstream) are dropped."""
    skew = [0.0]
    cluster.store._clock = lambda: time.monotonic() + skew[0]
    first = await create_widget(custom, "a")
    skew[0] = 76.0  # the history keeps 75 s (DefaultEventFreshDuration)
    await create_widget(custom, "b")
    before_first = str(int(first["metadata"]["resourceVersion"]) - 1)
    events = await read_events(http, WIDGETS, resourceVersion=before_first, timeoutSeconds="1")
    assert [e["type"] for e in events] == ["ERROR"]
    kept = await read_events(
        http, WIDGETS, resourceVersion=first["metadata"]["resourceVersion"], timeoutSeconds="1"
    )
    assert summary(kept) == [("ADDED", "b")]


async def test_python_client_raises_410_on_expired_watch(
    cluster: DevCluster, custom: k8s.CustomObjectsApi
) -> None:
    """§3: with timeout_seconds the client raises ApiException(410) at once on ERROR 410."""
    first = await create_widget(custom, "a")
    await create_widget(custom, "b")
    cluster.faults.compact()
    with pytest.raises(ApiException) as caught:
        async with watch.Watch() as w:
            async for _ in w.stream(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                "default",
                PLURAL,
                resource_version=first["metadata"]["resourceVersion"],
                timeout_seconds=2,
            ):
                pass
    assert caught.value.status == 410


async def test_bookmarks_only_when_allowed_and_one_before_the_deadline(
    custom: k8s.CustomObjectsApi, http: aiohttp.ClientSession
) -> None:
    """Row 5 (cacher.go): bookmarks only with allowWatchBookmarks; one just before the deadline;
    the object is {kind, apiVersion, metadata.resourceVersion}."""
    created = await create_widget(custom, "a")
    rv = created["metadata"]["resourceVersion"]
    events = await read_events(
        http, WIDGETS, resourceVersion=rv, allowWatchBookmarks="true", timeoutSeconds="1"
    )
    assert events == [
        {
            "type": "BOOKMARK",
            "object": {
                "kind": "Widget",
                "apiVersion": "example.com/v1",
                "metadata": {"resourceVersion": rv},
            },
        }
    ]
    assert await read_events(http, WIDGETS, resourceVersion=rv, timeoutSeconds="1") == []


async def test_bookmark_cadence_is_configurable(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    """Row 5: periodic bookmarks (upstream: defaultBookmarkFrequency = 1 min)."""
    cluster.watch_settings.bookmark_interval = 0.2
    events = await read_events(
        http, WIDGETS, resourceVersion="1", allowWatchBookmarks="true", timeoutSeconds="1"
    )
    assert len(events) >= 4
    assert {e["type"] for e in events} == {"BOOKMARK"}


async def test_python_client_passes_bookmarks_through(
    custom: k8s.CustomObjectsApi,
) -> None:
    """§3: BOOKMARK reaches the caller as a dict and moves the watch's resource_version."""
    created = await create_widget(custom, "a")
    seen = []
    async with watch.Watch() as w:
        async for event in w.stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            PLURAL,
            resource_version=created["metadata"]["resourceVersion"],
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        ):
            seen.append(event)
    assert [e["type"] for e in seen] == ["BOOKMARK"]
    assert w.resource_version == created["metadata"]["resourceVersion"]


async def test_timeout_seconds_ends_the_stream_cleanly(http: aiohttp.ClientSession) -> None:
    """Row 6 (handlers/get.go): clean EOF after timeoutSeconds."""
    started = time.monotonic()
    events = await read_events(http, WIDGETS, resourceVersion="1", timeoutSeconds="1")
    elapsed = time.monotonic() - started
    assert events == []
    assert 0.9 <= elapsed < 10  # ended by its 1 s timeout, even on a loaded machine


async def test_watch_without_timeout_gets_a_deadline_of_30_to_60_minutes(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    """Row 6: without timeoutSeconds the deadline is in [minRequestTimeout, 2x) = 30-60 min."""
    async with http.get(WIDGETS, params={"watch": "true"}) as response:
        assert response.status == 200
        async with asyncio.timeout(2):
            (live,) = await cluster.watches.wait_for()
        deadline = live._deadline() - time.monotonic()
        assert 1800 <= deadline < 3600


async def test_future_resource_version_waits_then_errors_504(http: aiohttp.ClientSession) -> None:
    """Row 17 for watches (cacher waitUntilFreshAndBlock): ERROR with 504 Timeout and the
    ResourceVersionTooLarge cause."""
    events = await read_events(http, WIDGETS, resourceVersion="999999")
    assert len(events) == 1
    status = events[0]["object"]
    assert events[0]["type"] == "ERROR"
    assert (status["code"], status["reason"]) == (504, "Timeout")
    assert status["message"].startswith("Timeout: Too large resource version: 999999, current: ")
    assert status["details"]["causes"] == [
        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
    ]


async def test_python_client_stops_iteration_at_timeout(custom: k8s.CustomObjectsApi) -> None:
    """§3: a clean EOF with timeout_seconds ends the async iteration."""
    started = time.monotonic()
    async with watch.Watch() as w:
        events = [
            e
            async for e in w.stream(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                "default",
                PLURAL,
                timeout_seconds=1,
            )
        ]
    assert events == []
    assert time.monotonic() - started < 10  # ended by its 1 s timeout, even on a loaded machine


async def test_send_initial_events_ends_with_annotated_bookmark(
    custom: k8s.CustomObjectsApi, http: aiohttp.ClientSession
) -> None:
    """Row 25 (api-concepts #streaming-lists): initial ADDED events then a bookmark annotated
    k8s.io/initial-events-end."""
    await create_widget(custom, "a")
    events = await read_events(
        http,
        WIDGETS,
        sendInitialEvents="true",
        resourceVersionMatch="NotOlderThan",
        allowWatchBookmarks="true",
        timeoutSeconds="1",
    )
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
