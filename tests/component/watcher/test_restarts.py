"""What a watcher that starts again publishes: the gap, once, and nothing it already published.

The watchers here run in-process and are stopped cleanly; the SIGKILL of a separate process is
in tests/e2e/watcher. What a predecessor published is put on the log by hand where a test needs
it to be older than the duplicate window.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import nats
import pytest
from kubernetes_asyncio import client as k8s
from nats.aio.client import Client

from devtools.natsd import NatsServer
from events.codec import decode_event
from events.subjects import state_subject
from events.types import observed_event
from services.runtime.bus import BusConfig, ensure_bus, publish_event
from services.watcher.streams import last_message
from tests.component.watcher.harness import (
    ClusterHistory,
    by_object,
    event_log,
    example,
    running_watcher,
    wait_caught_up,
    watcher_config,
)
from tests.support.waiting import until

SANDBOXES = ("agents.x-k8s.io", "v1beta1", "default", "sandboxes")
MERGE = "application/merge-patch+json"


@pytest.fixture
async def custom(client: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(client)


async def relabel(custom: k8s.CustomObjectsApi, name: str, value: str) -> None:
    patch = {"metadata": {"labels": {"step": value}}}
    await custom.patch_namespaced_custom_object(*SANDBOXES, name, patch, _content_type=MERGE)


async def test_changes_made_while_down_are_published_once_for_their_latest_state(
    client: k8s.ApiClient,
    custom: k8s.CustomObjectsApi,
    nc: Client,
    history: ClusterHistory,
) -> None:
    for name in ("kept", "changed", "deleted", "recreated"):
        await custom.create_namespaced_custom_object(*SANDBOXES, example("Sandbox", name))
    async with running_watcher(nc, client, watcher_config("first")):
        before = await wait_caught_up(nc.jetstream(), history, ["Sandbox"])
    old = {e.event.name: e for e in before}

    # The watcher is down: three updates of one object, a deletion, a deletion and re-creation
    # under the same name, and an object created and deleted without ever being seen.
    for step in range(3):
        await relabel(custom, "changed", str(step))
    await custom.delete_namespaced_custom_object(*SANDBOXES, "deleted")
    await custom.delete_namespaced_custom_object(*SANDBOXES, "recreated")
    await custom.create_namespaced_custom_object(*SANDBOXES, example("Sandbox", "recreated"))
    await custom.create_namespaced_custom_object(*SANDBOXES, example("Sandbox", "ephemeral"))
    await custom.delete_namespaced_custom_object(*SANDBOXES, "ephemeral")

    # Small list pages: the relist walks continue tokens.
    async with running_watcher(nc, client, watcher_config("second", list_page_size=2)):
        logged = await wait_caught_up(
            nc.jetstream(), history, ["Sandbox"], unseen=[("Sandbox", "default", "ephemeral")]
        )
    gap = [e for e in logged if e.seq > before[-1].seq]
    summary = sorted((e.event.name, e.change, e.event.data.synthetic) for e in gap)
    assert summary == [
        ("changed", "modified", False),
        ("deleted", "deleted", True),
        ("recreated", "added", False),
        ("recreated", "deleted", True),
    ]
    final = {c.name: c for c in history.of(["Sandbox"])}
    by_name = {(e.event.name, e.change): e for e in gap}
    assert by_name["changed", "modified"].rv == final["changed"].rv
    # A synthetic deletion carries the last state that was published, with its id.
    deleted = by_name["deleted", "deleted"]
    assert deleted.event.id == old["deleted"].event.id.replace(":added", ":deleted")
    assert deleted.event.data.object == old["deleted"].event.data.object
    # The re-created object's predecessor is deleted first, then the new one is added.
    recreated = [e for e in gap if e.event.name == "recreated"]
    assert [e.change for e in recreated] == ["deleted", "added"]
    assert recreated[0].uid != recreated[1].uid


async def test_what_a_predecessor_published_is_not_repeated_and_a_deletion_since_is_owed(
    client: k8s.ApiClient,
    custom: k8s.CustomObjectsApi,
    nc: Client,
    history: ClusterHistory,
) -> None:
    """The log holds what a predecessor published, and the duplicate window is long gone. A
    restart must neither publish those changes again nor forget them: one object unchanged
    since (nothing to publish), one deleted since (a synthetic deletion is owed). The state
    table, derived by the server, ends with each object's last event."""
    js = nc.jetstream()
    bus = BusConfig(duplicate_window=0.2)
    await ensure_bus(js, bus)
    for name in ("unchanged", "gone"):
        await custom.create_namespaced_custom_object(*SANDBOXES, example("Sandbox", name))
    for name in ("unchanged", "gone"):
        obj = await custom.get_namespaced_custom_object(*SANDBOXES, name)
        await publish_event(js, observed_event("added", obj, time=datetime.now(UTC)), bus)
    await custom.delete_namespaced_custom_object(*SANDBOXES, "gone")
    await asyncio.sleep(0.3)  # past the duplicate window: deduplication cannot help

    async with running_watcher(nc, client, watcher_config()) as watcher:
        logged = await wait_caught_up(js, history, ["Sandbox"])
        assert watcher.session is not None and watcher.session.recovered is not None
        assert {key.name for key in watcher.session.recovered.view} == {"unchanged", "gone"}
    events = {
        name: [(e.change, e.event.data.synthetic) for e in entries]
        for (_, _, name), entries in by_object(logged).items()
    }
    assert events == {
        "unchanged": [("added", False)],
        "gone": [("added", False), ("deleted", True)],
    }
    for entries in by_object(logged).values():
        key = entries[-1].object_id

        async def copied(key: tuple[str, str, str] = key, last: str = entries[-1].event.id) -> bool:
            state = await last_message(js, "SANDBUS_STATE", state_subject(*key))
            return state is not None and decode_event(state.data or b"").id == last

        await until(copied, within=10)


async def test_a_slow_nats_pauses_the_watch_instead_of_buffering_without_limit(
    client: k8s.ApiClient,
    custom: k8s.CustomObjectsApi,
    nats_server: NatsServer,
    history: ClusterHistory,
) -> None:
    nc = await nats.connect(nats_server.url, max_reconnect_attempts=-1)
    try:
        config = watcher_config(max_pending=8, shards=4)
        async with running_watcher(nc, client, config) as watcher:
            assert nats_server.pid is not None
            os.kill(nats_server.pid, signal.SIGSTOP)  # NATS stops answering, connections stay
            try:
                for index in range(60):
                    await custom.create_namespaced_custom_object(
                        *SANDBOXES, example("Sandbox", f"s{index}")
                    )
                session = watcher.session
                assert session is not None and session.publisher is not None
                publisher = session.publisher

                async def full() -> bool:
                    return publisher.pending == config.max_pending

                await until(full, within=10.0, interval=0.1)
                await asyncio.sleep(0.5)
                # Bounded: the queue is full and stays full; the watch waits for room.
                assert publisher.pending == config.max_pending
                sandbox_watcher = next(w for w in session.watchers if w.resource.kind == "Sandbox")
                assert sandbox_watcher.stats.decided < 60
            finally:
                os.kill(nats_server.pid, signal.SIGCONT)
            logged = await wait_caught_up(nc.jetstream(), history, ["Sandbox"], within=60.0)
        assert len(logged) == 60
        assert len({e.event.id for e in logged}) == 60
    finally:
        await nc.close()


@pytest.fixture
async def small_payload_nc(tmp_path: Path) -> AsyncIterator[Client]:
    """A NATS whose operator left max_payload below what the API server accepts."""
    async with NatsServer(store_dir=tmp_path / "small-nats", max_payload=256 * 1024) as server:
        connection = await nats.connect(server.url)
        yield connection
        await connection.close()


async def test_an_event_too_large_for_nats_is_dead_lettered_with_its_reason(
    client: k8s.ApiClient,
    custom: k8s.CustomObjectsApi,
    small_payload_nc: Client,
    history: ClusterHistory,
) -> None:
    nc = small_payload_nc
    huge = example("Sandbox", "huge")
    container = huge["spec"]["podTemplate"]["spec"]["containers"][0]
    container["env"] = [{"name": "BLOB", "value": "x" * (nc.max_payload + 1000)}]
    await custom.create_namespaced_custom_object(*SANDBOXES, huge)
    await custom.create_namespaced_custom_object(*SANDBOXES, example("Sandbox", "small"))
    js = nc.jetstream()
    async with running_watcher(nc, client, watcher_config()) as watcher:
        assert watcher.stats.dead_lettered == 1
    logged = await event_log(js)
    assert [e.event.name for e in logged] == ["small"]
    dead = await js.get_last_msg("SANDBUS_DLQ", "sandbus.dlq.events.sandbox.default.huge")
    assert dead.headers is not None
    assert "max_payload" in dead.headers["Sandbus-Dlq-Reason"]
    assert dead.headers["Sandbus-Dlq-Rejected-By"] == "watcher"
    assert b'"name":"huge"' in (dead.data or b"")
