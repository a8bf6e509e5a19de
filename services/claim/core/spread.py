"""Node-spread: which node's part of a warm queue a claim takes from (upstream's
``NodeSpread`` pick, docs/agent-sandbox.md §3.5).

Count the queued members of the pool per node; take from the node with the most left, and
among nodes with as many, from the one whose member was queued first. Adopting from the
fullest node keeps what stays warm spread over the nodes, so one node's loss or pressure
takes fewer of the next claims' sandboxes. Members with no node are no node's: the taker
comes to them after every node (upstream: FIFO only when no member has a node).

The counts come from the claim worker's cache at the moment of the take, as upstream's queue
picks at the moment of its pop: a queued member is one its pool would queue
(:func:`~services.pool.core.members.adoptable_pool`). The queue itself stays the authority:
an entry the cache does not show yet is still found (see :mod:`services.runtime.reconcile.warm`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from api.objects import Json, condition_of, metadata_of
from events.envelope import ObjectKey
from services.domain.agentsandbox.warmpool import adoptable_pool
from services.domain.agentsandbox.warmqueue import WarmQueue
from services.runtime.cache import ObjectCache
from services.runtime.times import parse_time

__all__ = ["node_spread", "queued_nodes"]

_NEVER = datetime.max


def _queued_since(sandbox: Json) -> datetime:
    """When the pool queued ``sandbox``: when it became Ready."""
    ready = condition_of(sandbox, "Ready")
    moment = parse_time(ready.get("lastTransitionTime")) if ready is not None else None
    return moment.replace(tzinfo=None) if moment is not None else _NEVER


def node_spread(members: Iterable[Json], pool: str) -> tuple[str, ...]:
    """The nodes of ``pool``'s queued members, most members first, then the earliest queued."""
    counts: dict[str, int] = {}
    earliest: dict[str, datetime] = {}
    for sandbox in members:
        if adoptable_pool(sandbox) != pool:
            continue
        node = str((sandbox.get("status") or {}).get("nodeName") or "")
        if not node:
            continue
        counts[node] = counts.get(node, 0) + 1
        since = _queued_since(sandbox)
        if since < earliest.get(node, _NEVER):
            earliest[node] = since
    return tuple(sorted(counts, key=lambda node: (-counts[node], earliest.get(node, _NEVER), node)))


def queued_nodes(queue: WarmQueue, cache: ObjectCache) -> tuple[str, ...]:
    """:func:`node_spread` of ``queue``'s pool as ``cache`` shows it (the taker's ``spread``)."""
    pool = cache.get(ObjectKey("SandboxWarmPool", queue.namespace, queue.pool))
    if pool is None:
        return ()
    uid = str(metadata_of(pool).get("uid") or "")
    return node_spread(cache.owned_by("Sandbox", uid), queue.pool) if uid else ()
