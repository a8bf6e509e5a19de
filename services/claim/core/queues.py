"""``plan_queue``: a warm queue's life from the claim worker's side (the side that makes its
durable consumer): the queue of a pool goes when the pool goes, or when the pool moves to
another template (upstream leaks a pool's queue until its template is deleted).

The memo remembers which queue the pool had, so that the deletion of a pool seen only after a
restart still finds its queue.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from api.keys import name_hash
from api.objects import Json, metadata_of
from events.envelope import ObjectKey
from services.domain.agentsandbox.warmpool import template_ref_name
from services.domain.agentsandbox.warmqueue import DropQueue, WarmQueue
from services.runtime.reconcile.actions import Plan

__all__ = ["QueueMemo", "QueueObservation", "plan_queue"]


class QueueMemo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    template_hash: str


class QueueObservation(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    pool: Json | None
    memo: QueueMemo | None = None


def plan_queue(obs: QueueObservation, now: datetime) -> Plan:
    del now
    key = ObjectKey("SandboxWarmPool", obs.namespace, obs.name)
    pool = obs.pool
    live = pool is not None and not metadata_of(pool).get("deletionTimestamp")
    ref = template_ref_name(pool) if pool is not None and live else ""
    wanted = QueueMemo(template_hash=name_hash(ref)) if ref else None
    if obs.memo == wanted:
        return Plan(reason="the queue is the pool's", memo=wanted)
    actions: tuple[DropQueue, ...] = ()
    if obs.memo is not None:
        old = WarmQueue(obs.namespace, obs.memo.template_hash, obs.name)
        why = "the pool moved to another template" if wanted else "the pool is gone"
        actions = (DropQueue(old, key, why=why),)
    return Plan(actions=actions, reason="the pool's queue changed", memo=wanted)
