"""Node-spread (``node_spread``, ``queued_nodes``): the order in which a claim takes from the
nodes of its pool's queue, mirroring the NodeSpread half of upstream's
TestSandboxClaimAdoptionStrategy; the FIFO half ("picks oldest ready sandbox", "skips unready
for a younger ready") is in test_plan.py, and the taker's pulls against a real nats-server in
tests/component/runtime/test_take_and_replicas.py."""

from __future__ import annotations

from datetime import timedelta

from api.keys import name_hash
from api.objects import Json
from services.claim.core.spread import node_spread, queued_nodes
from services.domain.agentsandbox.warmqueue import WarmQueue
from services.runtime.cache import ObjectCache
from tests.unit.claim.world import NOW, NS, POOL, TEMPLATE, condition, member, pool


def on(node: str, name: str, *, ready_minutes_ago: int = 1, **kwargs: object) -> Json:
    sandbox = member(name, **kwargs)  # type: ignore[arg-type]
    sandbox["status"]["nodeName"] = node
    sandbox["status"]["conditions"] = [condition(at=NOW - timedelta(minutes=ready_minutes_ago))]
    return sandbox


def test_the_node_with_the_most_members_left_comes_first() -> None:
    """TestSandboxClaimAdoptionStrategy ("picks sandbox on the node with most remaining"):
    node-b holds two of the three, so a claim takes from node-b although node-a's member was
    queued first."""
    members = [
        on("node-a", "a-1", ready_minutes_ago=9),
        on("node-b", "b-1", ready_minutes_ago=3),
        on("node-b", "b-2", ready_minutes_ago=2),
    ]
    assert node_spread(members, POOL) == ("node-b", "node-a")


def test_among_nodes_with_as_many_left_the_earliest_queued_comes_first() -> None:
    members = [
        on("node-a", "a-1", ready_minutes_ago=2),
        on("node-b", "b-1", ready_minutes_ago=7),
        on("node-c", "c-1", ready_minutes_ago=4),
    ]
    assert node_spread(members, POOL) == ("node-b", "node-c", "node-a")


def test_only_members_the_pool_would_queue_count() -> None:
    """Not Ready, being deleted, another pool's, or without a node: not counted (a member
    without a node is no node's; the taker reaches it after every node)."""
    other_pool = pool("other", uid="other-uid")
    members = [
        on("node-a", "a-1"),
        on("node-b", "b-1"),
        on("node-b", "b-2", deleting=True),
        on("node-b", "b-3", of_pool=other_pool),
        member("nodeless"),
    ]
    members[1]["status"]["conditions"] = [condition(status="False")]
    assert node_spread(members, POOL) == ("node-a",)
    assert node_spread([], POOL) == ()


def test_the_taker_reads_the_pools_members_from_the_cache() -> None:
    cache = ObjectCache()
    the_pool = pool()
    for obj in (the_pool, on("node-a", "a-1"), on("node-b", "b-1"), on("node-b", "b-2")):
        cache.observe("added", obj)
    queue = WarmQueue(NS, name_hash(TEMPLATE), POOL)
    assert queued_nodes(queue, cache) == ("node-b", "node-a")
    assert queued_nodes(WarmQueue(NS, name_hash(TEMPLATE), "gone"), cache) == ()


def test_a_member_without_a_ready_time_counts_as_queued_last() -> None:
    late = on("node-a", "a-1")
    del late["status"]["conditions"][0]["lastTransitionTime"]
    assert node_spread([late, on("node-b", "b-1")], POOL) == ("node-b", "node-a")
