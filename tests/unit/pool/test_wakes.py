"""Which keys a change wakes in the pool worker (``services.pool.worker.wakes``), against
upstream's watches of the SandboxWarmPool controller (docs/agent-sandbox.md §4.1)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from api.keys import LABEL_SANDBOX_TEMPLATE_REF_HASH, LABEL_WARM_POOL_SANDBOX, name_hash
from api.objects import Json
from events.envelope import ObjectKey
from services.pool.worker import POOL_COALESCE, pool_worker, wakes
from services.runtime.cache import ObjectCache
from tests.unit.pool.fakes import PoolRig
from tests.unit.pool.world import NOW, NS, POOL, pool, template, world

MEMBER = ObjectKey("Sandbox", NS, "m")


def woken(kind: str, obj: Json, *known: Json) -> list[ObjectKey]:
    cache = ObjectCache(label_indexes=[("Sandbox", LABEL_WARM_POOL_SANDBOX)])
    for item in known:
        cache.observe("added", item)
    return list(wakes(kind, obj, cache))


def named_pool(name: str, template_ref: str, namespace: str = NS) -> Json:
    body = pool(template_ref=template_ref)
    body["metadata"].update(name=name, namespace=namespace, uid=f"uid-{name}")
    return body


def sandbox(owner: dict[str, Any] | None = None, *, label: str | None = None) -> Json:
    meta: dict[str, Any] = {"name": "m", "namespace": NS, "uid": "uid-m", "resourceVersion": "1"}
    if owner is not None:
        meta["ownerReferences"] = [{"controller": True, **owner}]
    if label is not None:
        meta["labels"] = {LABEL_WARM_POOL_SANDBOX: label}
    return {"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": meta}


POOL_OWNER = {
    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
    "kind": "SandboxWarmPool",
    "name": "pool",
    "uid": "uid-pool",
}
CLAIM_OWNER = {
    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
    "kind": "SandboxClaim",
    "name": "c",
    "uid": "uid-c",
}


def test_a_template_wakes_exactly_the_pools_that_reference_it() -> None:
    """Upstream TestFindWarmPoolsForTemplate: a template's change maps to the pools whose
    sandboxTemplateRef names it, in its namespace only."""
    pools = [
        named_pool("a", "tpl"),
        named_pool("b", "tpl"),
        named_pool("c", "other"),
        named_pool("d", "tpl", namespace="elsewhere"),
    ]
    assert woken("SandboxTemplate", template("tpl"), *pools) == [
        ObjectKey("SandboxWarmPool", NS, "a"),
        ObjectKey("SandboxWarmPool", NS, "b"),
    ]
    assert woken("SandboxTemplate", template("unused"), *pools) == []
    assert woken("SandboxTemplate", template("tpl")) == [], "no pools, nothing"


def test_a_pool_wakes_itself() -> None:
    assert woken("SandboxWarmPool", pool()) == [POOL]


def adoptable(body: Json) -> Json:
    """``body`` Ready and carrying the template-ref hash too: a member a claim may adopt."""
    body = copy.deepcopy(body)
    body["metadata"]["labels"][LABEL_SANDBOX_TEMPLATE_REF_HASH] = name_hash("tpl")
    body["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    return body


def test_a_sandbox_its_pool_controls_wakes_the_pool() -> None:
    """Upstream TestWarmPoolSandboxEventHandler_ObservesOwnedEvents: owned events reach the
    pool."""
    owned = sandbox(POOL_OWNER, label=name_hash("pool"))
    assert woken("Sandbox", owned, pool()) == [POOL], "once"
    assert woken("Sandbox", sandbox(POOL_OWNER)) == [POOL], "by the owner, even unlisted"


def test_an_adoptable_member_wakes_its_member_key_too() -> None:
    """The member key keeps the warm queue: it wakes while the member is adoptable (the runtime
    asks with the state before a change as well, so the change that ends it wakes it too). A
    member on its way to Ready, or one a claim holds, has nothing for its queue entry."""
    member = adoptable(sandbox(POOL_OWNER, label=name_hash("pool")))
    assert woken("Sandbox", member, pool()) == [MEMBER, POOL]
    starting = copy.deepcopy(member)
    starting["status"]["conditions"][0]["status"] = "False"
    assert MEMBER not in woken("Sandbox", starting, pool())
    going = copy.deepcopy(member)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert MEMBER not in woken("Sandbox", going, pool()), "being deleted: not adoptable"


def test_unowned_and_foreign_sandboxes_wake_nothing() -> None:
    """Upstream TestWarmPoolSandboxEventHandler_ObservesOwnedEvents: unowned and foreign
    (another controller's, a claim's after adoption: the pool's label removed) are ignored."""
    assert woken("Sandbox", sandbox(), pool()) == []
    assert woken("Sandbox", adoptable(sandbox(CLAIM_OWNER, label="x")), pool()) == []
    other = dict(POOL_OWNER, kind="ReplicaSet")
    assert woken("Sandbox", sandbox(other), pool()) == []
    assert woken("Sandbox", sandbox(label=name_hash("no-such-pool")), pool()) == []


def test_an_orphan_carrying_a_pools_label_wakes_that_pool() -> None:
    """Upstream adopts orphans it lists by its label: the orphan's change wakes the pool whose
    name hashes to the label value (and no other pool)."""
    orphan = sandbox(label=name_hash("pool"))
    assert woken("Sandbox", orphan, pool(), named_pool("b", "tpl")) == [POOL]
    foreign_labelled = sandbox(CLAIM_OWNER, label=name_hash("pool"))
    assert POOL in woken("Sandbox", foreign_labelled, pool()), "the pool decides to ignore it"


def pod_of(sandbox_name: str, *, api_version: str = "agents.x-k8s.io/v1beta1") -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": sandbox_name,
            "namespace": NS,
            "uid": f"pod-{sandbox_name}",
            "resourceVersion": "1",
            "ownerReferences": [
                {
                    "apiVersion": api_version,
                    "kind": "Sandbox",
                    "name": sandbox_name,
                    "uid": f"uid-{sandbox_name}",
                    "controller": True,
                }
            ],
        },
    }


def test_the_pods_of_sandboxes_are_not_followed_and_wake_nothing() -> None:
    """The Unschedulable hold and the scheduling gates read the member's own PodScheduled
    condition: a Sandbox's Pod is nothing to the pool worker, which turns it away before
    decoding it; the Pods an OpenSandbox Pool controls it follows."""
    follows = pool_worker().follows["Pod"]
    assert not follows(pod_of("m"))
    assert woken("Pod", pod_of("m"), sandbox(POOL_OWNER, label=name_hash("pool"))) == []
    pools_pod = copy.deepcopy(pod_of("p", api_version="sandbox.opensandbox.io/v1alpha1"))
    pools_pod["metadata"]["ownerReferences"][0]["kind"] = "Pool"
    assert follows(pools_pod)
    foreign_pool = copy.deepcopy(pod_of("p", api_version="example.com/v1"))
    foreign_pool["metadata"]["ownerReferences"][0]["kind"] = "Pool"
    assert not follows(foreign_pool)


async def woken_keys(rig: PoolRig) -> set[ObjectKey]:
    """The keys the worker's queue holds once its coalescing window has passed (a pool's wakes
    wait a moment for the rest of a burst), taken out of it."""
    keys = set()
    await asyncio.sleep(2 * POOL_COALESCE)
    while len(rig.worker.queue):
        key, _ = await rig.worker.queue.get()
        rig.worker.queue.done(key)
        keys.add(key)
    return keys


async def test_owned_events_settle_the_pools_expectations() -> None:
    """Upstream TestWarmPoolSandboxEventHandler_ObservesOwnedEvents: owned add and delete
    events lower the pool's expectations before the pool is enqueued. Here the event wakes the
    pool, and the pass it wakes settles its expectations against the bus: a member shown
    added is no longer an expected create; a member shown deleted, no longer an expected
    delete."""
    rig = PoolRig.of(world(replicas=2))
    await rig.worker.reconcile(POOL)
    made_keys = rig.api.created()
    made = [rig.api.store[key] for key in made_keys]
    assert len(made) == 2
    await woken_keys(rig)

    rig.show(made[0])
    assert await woken_keys(rig) == {POOL}, "the event woke the pool (the member is not Ready)"
    pending = rig.worker.observed(POOL, NOW).expectations
    assert pending is not None and pending.pending_names("Sandbox") == {made[1]["metadata"]["name"]}
    rig.show(made[1])
    assert rig.worker.observed(POOL, NOW).expectations is None

    rig.api.store[POOL]["spec"]["replicas"] = 1
    rig.show(rig.api.store[POOL], change="modified")
    decision = await rig.worker.reconcile(POOL)
    assert [a.verb for a in decision.actions if a.verb == "delete"] == ["delete"]
    assert rig.worker.observed(POOL, NOW).expectations is not None, "the delete is expected"
    (gone,) = [a.target.name for a in decision.actions if a.verb == "delete"]
    rig.show(next(m for m in made if m["metadata"]["name"] == gone), change="deleted")
    assert rig.worker.observed(POOL, NOW).expectations is None
