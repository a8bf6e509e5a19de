"""``plan_member``: the warm queues' producer side, one pool member at a time (docs/agent-sandbox.md
§5, upstream ``sandboxEventHandler``; the queue itself is durable here, not memory).

A member is *adoptable* while a SandboxWarmPool controls it, it is not being deleted, it carries
the pool and template-ref-hash labels, and it is Ready: what a claim can take and use at once.
Then it has exactly one entry on its queue, ``sandbus.warm.<ns>.<template-ref-hash>.<pool>.
<node>.<sandbox>``, the entry naming the incarnation (uid, resourceVersion) that was adoptable
and the node it runs on (``status.nodeName``; the sandbox worker writes it with Ready). When it
stops being adoptable (deleted, adopted by a claim, no longer Ready) its entry is purged: a
claim worker drops a ghost it pops anyway, but an entry that stays would be popped for nothing.
A member that comes back Ready on another node moves to that node's part of the queue.

The memo remembers which incarnation was queued on which subject, so a pass over an unchanged
member writes nothing, and the purge knows its subject after the labels are gone.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from api.keys import LABEL_SANDBOX_TEMPLATE_REF_HASH
from api.objects import Json, labels_of, metadata_of
from events.codec import nats_subject
from events.envelope import ObjectKey
from events.types import WarmEntry, warm_queued_event
from services.domain.agentsandbox.warmpool import adoptable_pool
from services.domain.agentsandbox.warmqueue import Enqueue, Purge
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.actions import Plan

__all__ = ["MemberMemo", "MemberObservation", "observe_member", "plan_member"]

SOURCE = "/sandbus/pool"


class MemberMemo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    uid: str
    subject: str


class MemberObservation(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    sandbox: Json | None
    memo: MemberMemo | None = None


def observe_member(
    key: ObjectKey, cache: ObjectCache, memo: MemberMemo | None
) -> MemberObservation:
    return MemberObservation(
        namespace=key.namespace, name=key.name, sandbox=cache.get(key), memo=memo
    )


def plan_member(obs: MemberObservation, now: datetime) -> Plan:
    key = ObjectKey("Sandbox", obs.namespace, obs.name)
    sandbox = obs.sandbox
    pool = adoptable_pool(sandbox)
    if pool is None or sandbox is None:
        if obs.memo is None:
            return Plan(reason="not adoptable")
        return Plan(
            actions=(Purge(obs.memo.subject, key, why="no longer adoptable"),),
            reason="not adoptable any more: its queue entry goes",
        )
    meta = metadata_of(sandbox)
    uid = str(meta.get("uid") or "")
    entry = warm_queued_event(
        "Sandbox",
        obs.namespace,
        obs.name,
        WarmEntry(
            uid=uid,
            resource_version=str(meta.get("resourceVersion") or ""),
            template_hash=str(labels_of(sandbox)[LABEL_SANDBOX_TEMPLATE_REF_HASH]),
            pool=pool,
            node=str((sandbox.get("status") or {}).get("nodeName") or "") or None,
        ),
        time=now,
        source=SOURCE,
    )
    subject = nats_subject(entry)
    if obs.memo is not None and obs.memo.uid == uid and obs.memo.subject == subject:
        return Plan(reason=f"queued on {obs.memo.subject}", memo=obs.memo)
    actions: list[Enqueue | Purge] = []
    if obs.memo is not None:
        # Even on the same subject: the stream refuses a second entry there, so the earlier
        # incarnation's would stay and stand for this one.
        actions.append(Purge(obs.memo.subject, key, why="an earlier incarnation's or node's entry"))
    actions.append(Enqueue(entry, why="adoptable: Ready and held by its pool"))
    return Plan(
        actions=tuple(actions),
        reason=f"adoptable from pool {pool}",
        memo=MemberMemo(uid=uid, subject=subject),
    )
