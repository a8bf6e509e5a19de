"""Pods, Services and PVCs watched through one label selector per key, merged per object.

The development cluster filters by label (its watches report an object that stops matching as
DELETED, as the API server does), so the watcher never reads an unrelated Pod, and an object
that moves from one selection to another is seen by two streams. Bookmarks are rare here (every
ten minutes, as slow as it gets): a deletion that the idle selections cannot decide is proved
by reading the object at its resourceVersion, and the tests would time out if it waited for
them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import pytest
from kubernetes_asyncio import client as k8s
from nats.aio.client import Client

from api.keys import LABEL_ADOPTABLE, LABEL_SANDBOX_NAME_HASH
from api.opensandbox import LABEL_POOL_NAME
from devtools.cluster import DevCluster, WatchSettings
from services.watcher.config import WatcherConfig
from services.watcher.resources import WATCHED_RESOURCES
from services.watcher.service import Watcher
from services.watcher.watching import WatchStats
from tests.component.watcher.harness import (
    ClusterHistory,
    Logged,
    ObjectId,
    by_object,
    labelled_pod,
    labelled_pvc,
    labelled_service,
    quiet_cluster,
    running_watcher,
    wait_caught_up,
    watcher_config,
)

PODS = ["Pod"]
SELECTS = {r.kind: r for r in WATCHED_RESOURCES}
CHANGE = {"ADDED": "added", "MODIFIED": "modified", "DELETED": "deleted"}


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    watch = WatchSettings(bookmark_interval=600.0, bookmark_before_deadline=0.3, idle_check=0.05)
    async with quiet_cluster(watch=watch) as running:
        yield running


def config(identity: str = "selections") -> WatcherConfig:
    return watcher_config(identity, inactivity_limit=120.0)


def one_watch(history: ClusterHistory, kinds: Iterable[str]) -> dict[ObjectId, list[tuple]]:
    """What a single unfiltered watch, filtered here, publishes: every commit while selected,
    and a deletion when an object is deleted or stops being selected."""
    expected: dict[ObjectId, list[tuple]] = {}
    published: set[ObjectId] = set()
    for commit in history.of(kinds):
        selected = commit.type != "DELETED" and SELECTS[commit.kind].selects(commit.marks)
        events = expected.setdefault(commit.object_id, [])
        if selected:
            events.append(
                (
                    commit.uid,
                    commit.rv,
                    CHANGE[commit.type] if commit.object_id in published else "added",
                )
            )
            published.add(commit.object_id)
        elif commit.object_id in published:
            events.append((commit.uid, commit.rv, "deleted"))
            published.discard(commit.object_id)
    return {object_id: events for object_id, events in expected.items() if events}


def seen(logged: list[Logged]) -> dict[ObjectId, list[tuple]]:
    return {
        object_id: [(e.uid, e.rv, e.change) for e in entries]
        for object_id, entries in by_object(logged).items()
    }


def pod_stats(watcher: Watcher) -> WatchStats:
    assert watcher.session is not None
    return next(w.stats for w in watcher.session.watchers if w.resource.kind == "Pod")


async def relabel(core: k8s.CoreV1Api, name: str, labels: dict[str, str | None]) -> None:
    """A merge patch of the labels: None removes one."""
    await core.patch_namespaced_pod(name, "default", {"metadata": {"labels": labels}})


async def test_adopted_pods_move_between_selections_in_order_without_a_deletion(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    """Twenty Pods created adoptable, then adopted in one patch each, then given back: the
    watch they leave reports them DELETED and the one they enter ADDED at the same
    resourceVersion, in whichever order the two streams happen to deliver (the development
    cluster serves its watches in the order they started, so both orders occur here)."""
    core = k8s.CoreV1Api(client)
    js = nc.jetstream()
    names = [f"warm-{index}" for index in range(20)]
    adopted = {LABEL_ADOPTABLE: None, LABEL_SANDBOX_NAME_HASH: "0123abcd"}
    released = {LABEL_ADOPTABLE: "true", LABEL_SANDBOX_NAME_HASH: None}
    async with running_watcher(nc, client, config()) as watcher:
        for name in names:
            await core.create_namespaced_pod(
                "default", labelled_pod(name, {LABEL_ADOPTABLE: "true"})
            )
        await wait_caught_up(js, history, PODS)
        for name in names:
            await relabel(core, name, adopted)
        await wait_caught_up(js, history, PODS)
        for name in names:
            await relabel(core, name, released)
        logged = await wait_caught_up(js, history, PODS)
        assert watcher.session is not None
        assert not any(w.merge.candidates() for w in watcher.session.watchers)
        waited = pod_stats(watcher).undecided
    assert seen(logged) == one_watch(history, PODS)
    assert all(
        [e.change for e in entries] == ["added", "modified", "modified"]
        for entries in by_object(logged).values()
    )
    assert len({e.event.id for e in logged}) == len(logged)
    assert waited > 0  # some DELETED came first, and the ADDED after it settled the matter


async def test_a_sandbox_pod_travels_without_the_spec_no_worker_reads(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    """A Sandbox's Pod is logged with its metadata, status and ``spec.nodeName`` only; an
    OpenSandbox Pod, whose spec a pause copies, whole; and a Pod that carries both kinds of
    label counts as an OpenSandbox Pod."""
    core = k8s.CoreV1Api(client)
    js = nc.jetstream()
    pods = {
        "sandbox-pod": {LABEL_SANDBOX_NAME_HASH: "0123abcd"},
        "pool-pod": {LABEL_POOL_NAME: "python"},
        "both": {LABEL_ADOPTABLE: "true", LABEL_POOL_NAME: "python"},
    }
    async with running_watcher(nc, client, config()):
        for name, labels in pods.items():
            body = labelled_pod(name, labels)
            body["spec"]["nodeName"] = "node-1"
            await core.create_namespaced_pod("default", body)
        logged = await wait_caught_up(js, history, PODS)
    specs = {entry.event.name: entry.event.data.object["spec"] for entry in logged}
    assert specs["sandbox-pod"] == {"nodeName": "node-1"}
    for name in ("pool-pod", "both"):
        assert specs[name]["containers"][0]["image"] == "python:3.12"
        assert specs[name]["nodeName"] == "node-1"
    assert all(entry.event.data.object.get("status") is not None for entry in logged)


async def test_an_unrelated_pod_is_never_read_nor_published(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    core = k8s.CoreV1Api(client)
    for index in range(30):
        await core.create_namespaced_pod("default", labelled_pod(f"web-{index}", {"app": "web"}))
    async with running_watcher(nc, client, config()) as watcher:
        for index in range(30):
            await relabel(core, f"web-{index}", {"step": "1"})
        for index in range(10):
            await core.delete_namespaced_pod(f"web-{index}", "default", grace_period_seconds=0)
        await core.create_namespaced_pod("default", labelled_pod("ours", {LABEL_POOL_NAME: "py"}))
        await relabel(core, "ours", {"step": "1"})
        logged = await wait_caught_up(nc.jetstream(), history, PODS)
        # The watch of Pods received the two events of "ours" and nothing of the other forty.
        stats = pod_stats(watcher)
        assert stats.events == 2
    assert {e.event.name for e in logged} == {"ours"}
    assert seen(logged) == one_watch(history, PODS)


async def test_a_pod_that_loses_all_our_labels_is_deleted_once_and_comes_back_when_relabelled(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    core = k8s.CoreV1Api(client)
    js = nc.jetstream()
    steps: list[dict[str, str | None]] = [
        {LABEL_SANDBOX_NAME_HASH: "0123abcd"},  # in two selections now
        {LABEL_POOL_NAME: None},  # leaves one of them: still ours
        {"step": "3"},
        {LABEL_SANDBOX_NAME_HASH: None},  # none of our keys: a deletion
        {"step": "5"},  # not ours: nothing
        {LABEL_ADOPTABLE: "true"},  # ours again: added
    ]
    async with running_watcher(nc, client, config()) as watcher:
        await core.create_namespaced_pod("default", labelled_pod("p", {LABEL_POOL_NAME: "py"}))
        await wait_caught_up(js, history, PODS)
        for labels in steps:
            await relabel(core, "p", labels)
            await wait_caught_up(js, history, PODS)
        await core.delete_namespaced_pod("p", "default", grace_period_seconds=0)
        logged = await wait_caught_up(js, history, PODS)
        # Both deletions left Pod selections idle that had not passed them: each was proved by
        # a read of the Pod at its resourceVersion, not by a bookmark ten minutes away.
        assert pod_stats(watcher).reads >= 2
    changes = [e.change for e in logged]
    # (The deletion of a Pod is a write of its deletionTimestamp first, then the removal.)
    assert changes[:6] == ["added", "modified", "modified", "modified", "deleted", "added"]
    assert changes.count("deleted") == 2 and changes[-1] == "deleted"
    assert seen(logged) == one_watch(history, PODS)
    assert not any(e.event.data.synthetic for e in logged)


async def test_services_and_pvcs_are_merged_the_same_way(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    """A Service with both keys is one stream and one deletion; a PVC adopted from one
    selection to the other and then deleted is added, modified and deleted once."""
    core = k8s.CoreV1Api(client)
    both = {LABEL_SANDBOX_NAME_HASH: "0123abcd", LABEL_ADOPTABLE: "true"}
    kinds = ["Service", "PersistentVolumeClaim"]
    async with running_watcher(nc, client, config()):
        await core.create_namespaced_service("default", labelled_service("s", both))
        for step in range(5):
            labels = {"metadata": {"labels": {"n": str(step)}}}
            await core.patch_namespaced_service("s", "default", labels)
        await core.delete_namespaced_service("s", "default")
        claim = labelled_pvc("c", {LABEL_ADOPTABLE: "true"})
        await core.create_namespaced_persistent_volume_claim("default", claim)
        adopt = {"metadata": {"labels": {LABEL_ADOPTABLE: None, LABEL_SANDBOX_NAME_HASH: "1"}}}
        await core.patch_namespaced_persistent_volume_claim("c", "default", adopt)
        await core.delete_namespaced_persistent_volume_claim("c", "default")
        logged = await wait_caught_up(nc.jetstream(), history, kinds)
    changes = {
        name: [e.change for e in entries] for (_, _, name), entries in by_object(logged).items()
    }
    assert changes["s"] == ["added"] + ["modified"] * 5 + ["deleted"]
    assert changes["c"][:2] == ["added", "modified"] and changes["c"].count("deleted") == 1
    assert changes["c"][-1] == "deleted"
    assert seen(logged) == one_watch(history, kinds)


async def test_a_restart_diffs_every_selection_and_deletes_only_what_none_of_them_lists(
    cluster: DevCluster, client: k8s.ApiClient, nc: Client, history: ClusterHistory
) -> None:
    core = k8s.CoreV1Api(client)
    js = nc.jetstream()
    for name in ("kept", "moved", "stripped", "deleted"):
        await core.create_namespaced_pod("default", labelled_pod(name, {LABEL_ADOPTABLE: "true"}))
    async with running_watcher(nc, client, config("first")):
        before = await wait_caught_up(js, history, PODS)
    # While no watcher runs: one Pod is adopted (it moves to another selection), one loses our
    # label, one is deleted, and one is left alone.
    await relabel(core, "moved", {LABEL_ADOPTABLE: None, LABEL_SANDBOX_NAME_HASH: "0123abcd"})
    await relabel(core, "stripped", {LABEL_ADOPTABLE: None})
    await core.delete_namespaced_pod("deleted", "default", grace_period_seconds=0)
    async with running_watcher(nc, client, config("second")):
        logged = await wait_caught_up(js, history, PODS)
    gap = [e for e in logged if e.seq > before[-1].seq]
    assert sorted((e.event.name, e.change, e.event.data.synthetic) for e in gap) == [
        ("deleted", "deleted", True),
        ("moved", "modified", False),
        ("stripped", "deleted", True),
    ]
