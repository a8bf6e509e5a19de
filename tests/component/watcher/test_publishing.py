"""Every change of every watched kind reaches the event log once, in order, as a proper CloudEvent.

A real nats-server and the development cluster; the watcher runs in-process. The cluster's own
record of commits is the reference the event log is compared with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
from kubernetes_asyncio import client as k8s
from nats.aio.client import Client

from api.keys import LABEL_ADOPTABLE, LABEL_SANDBOX_NAME_HASH
from api.opensandbox import LABEL_POOL_NAME, LABEL_SANDBOX_SNAPSHOT_NAME
from devtools.cluster import DevCluster
from events.subjects import event_subject, state_subject
from services.watcher.resources import CUSTOM_RESOURCES
from tests.component.watcher.harness import (
    ClusterHistory,
    by_object,
    event_log,
    example,
    labelled_job,
    labelled_pod,
    labelled_pvc,
    labelled_service,
    running_watcher,
    wait_caught_up,
    watcher_config,
)
from tests.support.statetable import state_table_copied

MERGE = "application/merge-patch+json"
SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
BUILTIN_KINDS = ("Pod", "Service", "PersistentVolumeClaim", "Job")
ALL_KINDS = tuple(r.kind for r in CUSTOM_RESOURCES) + BUILTIN_KINDS


async def exercise_custom(custom: k8s.CustomObjectsApi, kind: str, name: str) -> None:
    resource = next(r for r in CUSTOM_RESOURCES if r.kind == kind)
    args = (resource.group, resource.version, "default", resource.plural)
    await custom.create_namespaced_custom_object(*args, example(kind, name))
    for step in range(2):
        await custom.patch_namespaced_custom_object(
            *args, name, {"metadata": {"labels": {"step": str(step)}}}, _content_type=MERGE
        )
    await custom.delete_namespaced_custom_object(*args, name)


async def exercise_builtins(client: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(client)
    batch = k8s.BatchV1Api(client)
    ours = {LABEL_SANDBOX_NAME_HASH: "0123abcd"}
    patch = {"metadata": {"labels": {"step": "1"}}}
    await core.create_namespaced_pod("default", labelled_pod("p-ours", ours))
    await core.create_namespaced_pod("default", labelled_pod("p-pool", {LABEL_POOL_NAME: "py"}))
    await core.create_namespaced_pod("default", labelled_pod("p-foreign", {"app": "web"}))
    await core.patch_namespaced_pod("p-ours", "default", patch)
    await core.patch_namespaced_pod("p-foreign", "default", patch)
    await core.delete_namespaced_pod("p-ours", "default", grace_period_seconds=0)
    await core.delete_namespaced_pod("p-foreign", "default", grace_period_seconds=0)
    await core.create_namespaced_service("default", labelled_service("s-ours", ours))
    await core.patch_namespaced_service("s-ours", "default", patch)
    await core.delete_namespaced_service("s-ours", "default")
    await core.create_namespaced_persistent_volume_claim(
        "default", labelled_pvc("c-ours", {LABEL_ADOPTABLE: "true"})
    )
    await core.patch_namespaced_persistent_volume_claim("c-ours", "default", patch)
    await core.delete_namespaced_persistent_volume_claim("c-ours", "default")
    await batch.create_namespaced_job(
        "default", labelled_job("j-ours", {LABEL_SANDBOX_SNAPSHOT_NAME: "snap"})
    )
    await batch.create_namespaced_job("default", labelled_job("j-foreign", {"app": "x"}))
    await batch.patch_namespaced_job("j-ours", "default", patch)
    await batch.delete_namespaced_job("j-ours", "default", propagation_policy="Orphan")


def expected_changes(history: ClusterHistory) -> dict[tuple[str, str, str], list[tuple[str, str]]]:
    """(rv, change) per object, for every commit of an object that carries our labels."""
    from services.watcher.resources import WATCHED_RESOURCES

    selects = {r.kind: r for r in WATCHED_RESOURCES}
    expected: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for commit in history.of(ALL_KINDS):
        resource = selects[commit.kind]
        if not resource.selects(commit.marks):
            continue
        change = {"ADDED": "added", "MODIFIED": "modified", "DELETED": "deleted"}[commit.type]
        expected.setdefault(commit.object_id, []).append((commit.rv, change))
    return expected


async def test_every_change_of_every_kind_is_published_once_in_order(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    async with running_watcher(nc, client, watcher_config()) as watcher:
        custom = k8s.CustomObjectsApi(client)
        for kind in (r.kind for r in CUSTOM_RESOURCES):
            await exercise_custom(custom, kind, f"{kind.lower()}.one")
        await exercise_builtins(client)
        logged = await wait_caught_up(nc.jetstream(), history, ALL_KINDS)

        expected = expected_changes(history)
        seen = {
            object_id: [(e.rv, e.change) for e in entries]
            for object_id, entries in by_object(logged).items()
        }
        assert seen == expected
        assert {kind for kind, _, _ in seen} == set(ALL_KINDS)
        assert ("Pod", "default", "p-foreign") not in seen
        assert ("Job", "default", "j-foreign") not in seen
        assert watcher.stats.duplicates == 0
        assert not any(e.event.data.synthetic for e in logged)
    # An outside subscriber that knows only schemas/ accepts every event.
    for entry in logged:
        document = json.loads(entry.payload)
        schema = json.loads((SCHEMAS / f"{document['type']}.json").read_text())
        jsonschema.Draft202012Validator(schema).validate(document)


async def test_events_are_well_formed_cloudevents_with_dedup_id_and_trace_context(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    custom = k8s.CustomObjectsApi(client)
    sandbox = example("Sandbox", "trace.me")
    carrier = '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}'
    sandbox["metadata"]["annotations"] = {"opentelemetry.io/trace-context": carrier}
    async with running_watcher(nc, client, watcher_config()):
        await custom.create_namespaced_custom_object(
            "agents.x-k8s.io", "v1beta1", "default", "sandboxes", sandbox
        )
        [entry] = await wait_caught_up(nc.jetstream(), history, ["Sandbox"])
    event = entry.event
    obj: dict[str, Any] = event.data.object
    uid, rv = obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]
    assert event.id == f"{uid}:{rv}:added" == entry.msg_id
    assert event.type == "io.sandbus.object.added.v1"
    assert event.source == "/sandbus/watcher"
    assert event.subject == "Sandbox/default/trace.me"
    assert (event.kind, event.namespace, event.name) == ("Sandbox", "default", "trace.me")
    assert event.specversion == "1.0" and event.datacontenttype == "application/json"
    assert event.time.tzinfo is not None
    assert "managedFields" not in obj["metadata"]
    assert obj["apiVersion"] == "agents.x-k8s.io/v1beta1" and obj["kind"] == "Sandbox"
    # The event joins the trace the object carries, with a span of its own.
    assert event.traceparent is not None
    assert str(event.traceparent).startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
    assert not str(event.traceparent).endswith("-00f067aa0ba902b7-01")
    assert entry.headers["traceparent"] == event.traceparent
    # The server copies the same event into the state table, under the object's state subject.
    js = nc.jetstream()
    key = ("Sandbox", "default", "trace.me")
    logged = await js.get_last_msg("SANDBUS_EVENTS", event_subject(*key))
    await state_table_copied(js, 1)
    state = await js.get_last_msg("SANDBUS_STATE", state_subject(*key))
    assert state.data == logged.data


async def test_a_restart_with_nothing_changed_publishes_nothing(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    custom = k8s.CustomObjectsApi(client)
    args = ("agents.x-k8s.io", "v1beta1", "default", "sandboxes")
    for index in range(5):
        await custom.create_namespaced_custom_object(*args, example("Sandbox", f"s{index}"))
    async with running_watcher(nc, client, watcher_config("first")):
        before = await wait_caught_up(nc.jetstream(), history, ["Sandbox"])
    await state_table_copied(nc.jetstream(), 5)
    async with running_watcher(nc, client, watcher_config("second")) as second:
        assert second.session is not None and second.session.ready.is_set()
        after = await event_log(nc.jetstream())
        # The second read the state table, and the event log only after what it holds.
        assert second.session.scanned_from == before[-1].seq + 1
    assert len(before) == 5
    assert after == before
