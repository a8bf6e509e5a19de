"""The warm queues' producer side (``plan_member``), against the rows of upstream's
queue/simple_sandbox_queue_test.go and the claim controller's queue feeders that it takes over.

Upstream's queue is in memory: ``Add`` appends a key unless it is there, ``RemoveItem`` drops
one, ``Get``/``GetWithStrategy`` pop. Here the queue is durable, one JetStream subject per
sandbox (``sandbus.warm.<ns>.<template-ref-hash>.<pool>.<sandbox>``), and the pool worker
produces it: each member gets exactly one entry while it is adoptable, and loses it when it is
not. The rows map so:

- TestSynchronizedQueue_Deduplication (the same key pushed 3 times, stored once): here, a
  member seen three times is enqueued once (the memo remembers it), and the stream would
  refuse a second entry on the subject anyway.
- TestSimpleSandboxQueue_RemoveItem_GhostPodFix (removal, no slot left behind) and the
  feeders' Delete handler (TestSandboxEventHandler_Delete_RemovesGhostPods): here, a member
  deleted, adopted by a claim or no longer Ready has its entry purged.
- The consumer side belongs to the claim worker, not built yet: TestSimpleSandboxQueue_
  BasicOperations (FIFO order: the stream's order), TestSimpleSandboxQueue_GetWithStrategy
  (picking one entry by strategy), TestSimpleSandboxQueue_RemoveQueue_MemoryLeakFix (dropping
  a whole queue when its pool goes), TestGetNamespacedWarmPoolName and
  TestSimpleSandboxQueue_NoLegacyFallback (which queue a claim reads: here the subject filter
  ``warm_queue_filter``).

One difference on purpose: upstream queues a member as soon as the pool creates it and checks
readiness at pop time; here only a Ready member is queued, so a claim never pops one it
cannot use yet.
"""

from __future__ import annotations

import copy

import msgspec

from api.keys import LABEL_SANDBOX_TEMPLATE_REF_HASH, LABEL_WARM_POOL_SANDBOX, name_hash
from api.objects import Json
from events.codec import decode_event, nats_subject
from events.envelope import ObjectKey
from events.subjects import warm_subject
from events.types import WarmQueued
from services.domain.agentsandbox.warmqueue import Enqueue, Purge
from services.pool.core.members import MemberMemo, MemberObservation, plan_member
from services.runtime.reconcile.actions import Plan
from tests.support.plans import actions_of
from tests.unit.pool.fakes import PoolRig
from tests.unit.pool.world import NOW, NS, world

SUBJECT = warm_subject(NS, name_hash("tpl"), "pool", "", "m")
"""The entry of a member whose node is not known."""
MEMBER = ObjectKey("Sandbox", NS, "m")


def member(ready_status: str | None = "True", *, deleting: bool = False) -> Json:
    sandbox = world().member("m", ready_status=ready_status)
    if deleting:
        sandbox["metadata"]["deletionTimestamp"] = "2026-05-04T09:59:00Z"
    return sandbox


def plan(sandbox: Json | None, memo: MemberMemo | None = None) -> Plan:
    return plan_member(MemberObservation(namespace=NS, name="m", sandbox=sandbox, memo=memo), NOW)


def enqueued(p: Plan) -> list[WarmQueued]:
    return [a.entry for a in actions_of(p) if isinstance(a, Enqueue)]


def purged(p: Plan) -> list[str]:
    return [a.subject for a in actions_of(p) if isinstance(a, Purge)]


def test_a_ready_member_is_queued_on_its_subject() -> None:
    sandbox = member()
    p = plan(sandbox)
    (entry,) = enqueued(p)
    assert not purged(p)
    assert f"sandbus.warm.default.{name_hash('tpl')}.pool.=.m" == SUBJECT
    assert p.memo == MemberMemo(uid="uid-m", subject=SUBJECT)
    assert (entry.kind, entry.namespace, entry.name) == ("Sandbox", NS, "m")
    assert entry.data.uid == "uid-m"
    assert entry.data.resource_version == sandbox["metadata"]["resourceVersion"]
    assert entry.data.template_hash == name_hash("tpl") and entry.data.pool == "pool"


def test_a_member_seen_three_times_is_queued_once() -> None:
    """Upstream TestSynchronizedQueue_Deduplication: the same key pushed 3 times is stored once.
    Seen again (even changed: a new resourceVersion), the same incarnation writes nothing."""
    sandbox = member()
    first = plan(sandbox)
    memo = first.memo
    entries = enqueued(first)
    for version in ("900", "901"):
        again = copy.deepcopy(sandbox)
        again["metadata"]["resourceVersion"] = version
        p = plan(again, memo)
        assert p.actions == () and p.memo == memo, "nothing written, the memo kept"
        entries += enqueued(p)
        memo = p.memo
    assert len(entries) == 1


async def test_through_the_worker_a_member_seen_three_times_is_one_entry_and_one_memo() -> None:
    """Upstream TestSynchronizedQueue_Deduplication through the pool worker: three passes over
    a Ready member put one entry on the warm stream and write its memo once."""
    w = world(replicas=1)
    sandbox = w.member("m")
    rig = PoolRig.of(w)
    for _ in range(3):
        await rig.worker.reconcile(MEMBER)
    assert list(rig.js.warm) == [SUBJECT]
    entry = decode_event(rig.js.warm[SUBJECT])
    assert isinstance(entry, WarmQueued) and entry.data.uid == sandbox["metadata"]["uid"]
    assert [s for s, _ in rig.js.memos] == ["sandbus.memo.pool.sandbox.default.m"]
    memo = msgspec.json.decode(rig.js.memos[0][1])["memo"]
    assert memo == {"uid": "uid-m", "subject": SUBJECT}


def test_a_member_that_is_not_ready_is_not_queued() -> None:
    for status in ("False", "Unknown", None):
        p = plan(member(ready_status=status))
        assert p.actions == () and p.memo is None, status


def test_only_a_member_its_pool_holds_and_labels_is_queued() -> None:
    """Upstream isAdoptable: not deleting; both labels; controlled by a SandboxWarmPool."""
    orphan = member()
    orphan["metadata"]["ownerReferences"] = []
    claimed = member()
    claimed["metadata"]["ownerReferences"] = [
        {"kind": "SandboxClaim", "name": "c", "uid": "uid-c", "controller": True}
    ]
    unlabelled = [member(), member()]
    del unlabelled[0]["metadata"]["labels"][LABEL_WARM_POOL_SANDBOX]
    del unlabelled[1]["metadata"]["labels"][LABEL_SANDBOX_TEMPLATE_REF_HASH]
    deleting = member(deleting=True)
    for sandbox in (orphan, claimed, *unlabelled, deleting, None):
        assert plan(sandbox).actions == (), sandbox


def test_a_member_that_stops_being_adoptable_has_its_entry_purged() -> None:
    """Upstream TestSimpleSandboxQueue_RemoveItem_GhostPodFix and the feeders' Delete handler:
    a member deleted (being deleted, or gone), adopted by a claim (its controller changed and
    the pool's labels removed) or no longer Ready leaves no entry behind; the purge uses the
    remembered subject, since the labels it was made from may be gone, and the memo goes."""
    memo = plan(member()).memo
    assert memo is not None
    adopted = member()
    adopted["metadata"]["ownerReferences"] = [
        {"kind": "SandboxClaim", "name": "c", "uid": "uid-c", "controller": True}
    ]
    del adopted["metadata"]["labels"][LABEL_WARM_POOL_SANDBOX]
    deleting = member(deleting=True)
    for sandbox in (None, deleting, adopted, member(ready_status="False")):
        p = plan(sandbox, memo)
        assert purged(p) == [SUBJECT] and not enqueued(p), sandbox
        assert p.memo is None, "forgotten"
    assert plan(None).actions == (), "nothing remembered, nothing to purge"


def test_a_new_incarnation_replaces_the_entry_of_the_old_one() -> None:
    """A member recreated under its name (a new uid) before the worker looked again: the old
    incarnation's entry goes and the new one is queued; on the same subject too, since the
    stream would refuse the new entry while the old one is there."""
    memo = MemberMemo(uid="uid-old", subject=SUBJECT)
    p = plan(member(), memo)
    assert [type(a) for a in p.actions] == [Purge, Enqueue], "the purge first"
    assert purged(p) == [SUBJECT]
    assert enqueued(p)[0].data.uid == "uid-m"
    assert p.memo == MemberMemo(uid="uid-m", subject=SUBJECT)

    moved = MemberMemo(
        uid="uid-old", subject=warm_subject(NS, name_hash("old-tpl"), "pool", "", "m")
    )
    p = plan(member(), moved)
    assert purged(p) == [moved.subject] and len(enqueued(p)) == 1


def test_a_member_is_queued_under_its_node_and_moves_with_it() -> None:
    """The entry names the node the member runs on (its subject too), so claims can take from
    the node with the most members left; a member Ready again on another node moves there."""
    sandbox = member()
    sandbox["status"]["nodeName"] = "node-1"
    p = plan(sandbox)
    (entry,) = enqueued(p)
    on_node_1 = warm_subject(NS, name_hash("tpl"), "pool", "node-1", "m")
    assert entry.data.node == "node-1" and p.memo == MemberMemo(uid="uid-m", subject=on_node_1)
    assert plan(sandbox, p.memo).actions == (), "unchanged: nothing written"

    sandbox["status"]["nodeName"] = "node-2"
    moved = plan(sandbox, p.memo)
    assert purged(moved) == [on_node_1]
    assert [nats_subject(e) for e in enqueued(moved)] == [
        warm_subject(NS, name_hash("tpl"), "pool", "node-2", "m")
    ]


async def test_through_the_worker_a_new_incarnation_is_what_the_queue_holds() -> None:
    """The same through the pool worker, against a warm stream that refuses a second entry per
    subject: after the member is recreated, the entry on its subject names the new uid."""
    w = world(replicas=1)
    old = w.member("m")
    rig = PoolRig.of(w)
    await rig.worker.reconcile(MEMBER)
    new = copy.deepcopy(old)
    new["metadata"].update(uid="uid-m-2", resourceVersion="700")
    rig.show(new, change="modified")
    decision = await rig.worker.reconcile(MEMBER)
    assert decision.error is None
    entry = decode_event(rig.js.warm[SUBJECT])
    assert isinstance(entry, WarmQueued) and entry.data.uid == "uid-m-2"


async def test_through_the_worker_an_adopted_member_leaves_the_queue() -> None:
    """Upstream TestSimpleSandboxQueue_RemoveItem_GhostPodFix through the pool worker: a claim
    adopts the member (the bus shows it under the claim, without the pool's label); its entry
    is purged from the warm stream and its memo becomes a tombstone."""
    w = world(replicas=1)
    sandbox = w.member("m")
    rig = PoolRig.of(w)
    await rig.worker.reconcile(MEMBER)
    assert SUBJECT in rig.js.warm
    adopted = copy.deepcopy(sandbox)
    adopted["metadata"]["ownerReferences"] = [
        {"kind": "SandboxClaim", "name": "c", "uid": "uid-c", "controller": True}
    ]
    del adopted["metadata"]["labels"][LABEL_WARM_POOL_SANDBOX]
    adopted["metadata"]["resourceVersion"] = "800"
    rig.show(adopted, change="modified")
    await rig.worker.reconcile(MEMBER)
    assert rig.js.warm == {} and rig.js.purged == [SUBJECT]
    assert rig.js.memos[-1] == ("sandbus.memo.pool.sandbox.default.m", b"null")
