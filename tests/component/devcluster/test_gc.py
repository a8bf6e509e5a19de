"""Owner-reference garbage collection (docs/devcluster.md §2 row 19) against a real in-process
DevCluster.

The collector runs as its own client of the API (started here directly, so the tests can see its
pass counter); the cluster's built-in kubelet is off, and dependents that must linger carry a
test finalizer the test removes itself, so every wait below ends on an observable event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from devtools.cluster.controllers.gc import GarbageCollector, GcConfig
from devtools.cluster.controllers.informer import SharedInformers
from devtools.cluster.http.faults import FaultRule
from tests.component.devcluster.rest import Json, create, watch_until

HOLD = "test.sandbus.io/hold"


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    settings = SimulationSettings(kubelet=False, garbage_collector=False)
    async with DevCluster(
        port=0, crd_dirs=None, latency=LatencyModel.zero(), simulation=settings
    ) as running:
        yield running


@pytest.fixture
async def gc(cluster: DevCluster) -> AsyncIterator[GarbageCollector]:
    async with GarbageCollector(cluster.url, GcConfig(delay=0.01, rediscovery_interval=0.2)) as c:
        yield c


@pytest.fixture
async def http(cluster: DevCluster) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=cluster.url) as session:
        yield session


def configmaps(namespace: str = "default") -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps"


async def create_namespace(http: aiohttp.ClientSession, name: str) -> None:
    await create(http, "/api/v1/namespaces", {"metadata": {"name": name}})


async def configmap(
    http: aiohttp.ClientSession,
    name: str,
    *,
    namespace: str = "default",
    owners: list[Json] | None = None,
    finalizers: list[str] | None = None,
) -> Json:
    metadata: Json = {"name": name, "ownerReferences": owners or [], "finalizers": finalizers or []}
    return await create(http, configmaps(namespace), {"metadata": metadata})


def ref(owner: Json, *, block: bool = False) -> Json:
    return {
        "apiVersion": owner.get("apiVersion", "v1"),
        "kind": owner.get("kind", "ConfigMap"),
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": block,
    }


async def get(http: aiohttp.ClientSession, path: str) -> Json | None:
    async with http.get(path) as response:
        if response.status == 404:
            return None
        body: Json = await response.json()
        return body


async def delete(http: aiohttp.ClientSession, path: str, policy: str | None = None) -> Json:
    options = {"propagationPolicy": policy} if policy else {}
    async with http.delete(path, json=options) as response:
        body: Json = await response.json()
        assert response.status == 200, body
        return body


def gone(obj: Json | None) -> bool:
    return obj is None


async def release(http: aiohttp.ClientSession, path: str) -> None:
    """Drop the test's hold finalizer."""
    async with http.patch(
        path,
        json={"metadata": {"finalizers": None}},
        headers={"Content-Type": "application/merge-patch+json"},
    ) as response:
        assert response.status == 200, await response.text()


# ----------------------------------------------------------------------------- background


async def test_deleting_an_owner_removes_its_dependents(
    gc: GarbageCollector, http: aiohttp.ClientSession
) -> None:
    owner = await configmap(http, "owner")
    await configmap(http, "dep-1", owners=[ref(owner)])
    await configmap(http, "dep-2", owners=[ref(owner)])
    await delete(http, f"{configmaps()}/owner")
    await watch_until(http, configmaps(), "dep-1", gone)
    await watch_until(http, configmaps(), "dep-2", gone)


async def test_dependent_goes_only_when_all_owners_are_gone(
    gc: GarbageCollector, http: aiohttp.ClientSession
) -> None:
    first = await configmap(http, "first")
    second = await configmap(http, "second")
    await configmap(http, "shared", owners=[ref(first), ref(second)])
    await delete(http, f"{configmaps()}/first")
    # The dead reference is removed; the object stays with its live owner.
    seen = await watch_until(
        http,
        configmaps(),
        "shared",
        lambda o: o is not None and len(o["metadata"].get("ownerReferences", [])) == 1,
    )
    remaining = seen[-1]
    assert remaining is not None
    assert remaining["metadata"]["ownerReferences"][0]["uid"] == second["metadata"]["uid"]
    await delete(http, f"{configmaps()}/second")
    await watch_until(http, configmaps(), "shared", gone)


async def test_owner_in_another_namespace_counts_as_absent(
    gc: GarbageCollector, http: aiohttp.ClientSession
) -> None:
    await create_namespace(http, "team-a")
    await create_namespace(http, "team-b")
    owner = await configmap(http, "owner", namespace="team-a")
    await configmap(http, "stray", namespace="team-b", owners=[ref(owner)])
    await watch_until(http, configmaps("team-b"), "stray", gone)
    assert await get(http, f"{configmaps('team-a')}/owner") is not None


async def test_a_freshly_created_pair_is_left_alone(
    gc: GarbageCollector, http: aiohttp.ClientSession
) -> None:
    """The owner's watch event may arrive after the dependent's: the GC must not race it."""
    for index in range(5):
        owner = await configmap(http, f"o{index}")
        await configmap(http, f"d{index}", owners=[ref(owner)])
    await gc.settle()
    for index in range(5):
        assert await get(http, f"{configmaps()}/d{index}") is not None


async def test_custom_resource_owners_are_collected_after_rediscovery(
    gc: GarbageCollector, http: aiohttp.ClientSession
) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    await create(http, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    widgets = "/apis/example.com/v1/namespaces/default/widgets"
    await watch_until(
        http,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "widgets.example.com",
        lambda crd: any(
            c["type"] == "Established" and c["status"] == "True"
            for c in ((crd or {}).get("status") or {}).get("conditions") or []
        ),
    )
    widget = await create(
        http, widgets, {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    )
    await configmap(http, "widget-config", owners=[ref(widget)])
    async with asyncio.timeout(5):
        await gc.wait_watching("example.com", "Widget")
    await gc.settle()
    assert await get(http, f"{configmaps()}/widget-config") is not None
    await delete(http, f"{widgets}/w")
    await watch_until(http, configmaps(), "widget-config", gone)


# ----------------------------------------------------------------------------- foreground


async def test_foreground_waits_for_blocking_dependents(
    gc: GarbageCollector, http: aiohttp.ClientSession
) -> None:
    owner = await configmap(http, "owner")
    await configmap(http, "blocking", owners=[ref(owner, block=True)], finalizers=[HOLD])
    await configmap(http, "loose", owners=[ref(owner, block=False)], finalizers=[HOLD])
    deleting = await delete(http, f"{configmaps()}/owner", policy="Foreground")
    assert deleting["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in deleting["metadata"]["finalizers"]
    # Both dependents are deleted (held by the test's finalizer)...
    for name in ("blocking", "loose"):
        await watch_until(
            http,
            configmaps(),
            name,
            lambda o: o is not None and bool(o["metadata"].get("deletionTimestamp")),
        )
    # ...and the owner waits for the blocking one only.
    await gc.settle()
    assert await get(http, f"{configmaps()}/owner") is not None
    await release(http, f"{configmaps()}/blocking")
    await watch_until(http, configmaps(), "owner", gone)
    assert await get(http, f"{configmaps()}/loose") is not None
    await release(http, f"{configmaps()}/loose")
    await watch_until(http, configmaps(), "loose", gone)


async def test_foreground_propagates_down_a_chain(
    gc: GarbageCollector, http: aiohttp.ClientSession
) -> None:
    top = await configmap(http, "top")
    middle = await configmap(http, "middle", owners=[ref(top, block=True)])
    await configmap(http, "leaf", owners=[ref(middle, block=True)], finalizers=[HOLD])
    await delete(http, f"{configmaps()}/top", policy="Foreground")
    seen = await watch_until(
        http,
        configmaps(),
        "middle",
        lambda o: o is not None and "foregroundDeletion" in o["metadata"].get("finalizers", []),
    )
    assert seen[-1] is not None
    await gc.settle()
    assert await get(http, f"{configmaps()}/top") is not None
    await release(http, f"{configmaps()}/leaf")
    await watch_until(http, configmaps(), "top", gone)
    assert await get(http, f"{configmaps()}/middle") is None


# ----------------------------------------------------------------------------- orphan


async def test_orphan_leaves_dependents_without_the_reference(
    gc: GarbageCollector, http: aiohttp.ClientSession
) -> None:
    owner = await configmap(http, "owner")
    other = await configmap(http, "other")
    await configmap(http, "kept", owners=[ref(owner, block=True), ref(other)])
    await configmap(http, "lonely", owners=[ref(owner)])
    await delete(http, f"{configmaps()}/owner", policy="Orphan")
    await watch_until(http, configmaps(), "owner", gone)
    kept = await get(http, f"{configmaps()}/kept")
    lonely = await get(http, f"{configmaps()}/lonely")
    assert kept is not None and lonely is not None
    assert [r["uid"] for r in kept["metadata"]["ownerReferences"]] == [other["metadata"]["uid"]]
    assert "ownerReferences" not in lonely["metadata"]
    await gc.settle()
    assert await get(http, f"{configmaps()}/lonely") is not None


async def test_a_refused_orphaning_write_is_made_again(
    cluster: DevCluster, gc: GarbageCollector, http: aiohttp.ClientSession
) -> None:
    # The collector plans for what changed: a write it failed must come back on the retry,
    # though the dependent's own plan has nothing to do (its owner is being orphaned).
    owner = await configmap(http, "owner")
    await configmap(http, "lonely", owners=[ref(owner)])
    refused = cluster.faults.add(
        FaultRule(
            "error", verb="patch", name="lonely", field_manager=gc.config.field_manager, count=1
        )
    )
    await delete(http, f"{configmaps()}/owner", policy="Orphan")
    await watch_until(http, configmaps(), "owner", gone)
    lonely = await get(http, f"{configmaps()}/lonely")
    assert refused.fired == 1
    assert lonely is not None and "ownerReferences" not in lonely["metadata"]


# ----------------------------------------------------------------------------- switches


async def test_disabled_collector_does_nothing(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    async with GarbageCollector(cluster.url, GcConfig(enabled=False)) as collector:
        owner = await configmap(http, "owner")
        await configmap(http, "dep", owners=[ref(owner)])
        await delete(http, f"{configmaps()}/owner")
        assert collector.passes == 0
        assert await get(http, f"{configmaps()}/dep") is not None


async def test_the_cluster_runs_the_collector_by_default() -> None:
    settings = SimulationSettings(kubelet=False)
    async with (
        DevCluster(port=0, crd_dirs=None, latency=LatencyModel.zero(), simulation=settings) as c,
        aiohttp.ClientSession(base_url=c.url) as http,
    ):
        owner = await configmap(http, "owner")
        await configmap(http, "dep", owners=[ref(owner)])
        await delete(http, f"{configmaps()}/owner")
        await watch_until(http, configmaps(), "dep", gone)


async def test_the_kubelet_and_the_collector_share_one_watch_of_the_pods() -> None:
    """Both read every Pod, through one watch (SharedInformers): a Pod whose owner is deleted
    is still collected, and the kubelet still finishes its graceful deletion."""
    settings = SimulationSettings(pod_ready_delay=0.01)
    async with (
        DevCluster(port=0, crd_dirs=None, latency=LatencyModel.zero(), simulation=settings) as c,
        aiohttp.ClientSession(base_url=c.url) as http,
    ):
        owner = await configmap(http, "owner")
        pod = {
            "metadata": {"name": "dep", "ownerReferences": [ref(owner)]},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]},
        }
        await create(http, "/api/v1/namespaces/default/pods", pod)
        await delete(http, f"{configmaps()}/owner")
        await watch_until(http, "/api/v1/namespaces/default/pods", "dep", gone)
        # Both have read the Pod by now (the collector deleted it, the kubelet ended it).
        pod_watches = [
            watch.info.user_agent
            for watch in c.watches.active()
            if watch.info.resource == "pods" and watch.info.user_agent.startswith("devcluster-")
        ]
        assert pod_watches == [SharedInformers.USER_AGENT]
