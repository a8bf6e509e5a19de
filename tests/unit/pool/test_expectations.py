"""Upstream's warmpool_expectations_test.go, and the over-creation tests of
sandboxwarmpool_overcreation_test.go that need the runtime, mapped onto the runtime's
expectations (services/runtime/reconcile/expectations.py) and the pool planner.

Upstream keeps, per pool, a count of pending creates, a set of pending delete uids and one
``raisedAt``; ``TryExpectCreations`` is a check-and-record under a lock. Here the pool worker
keeps an :class:`Expectations` per pool (``expect`` write-ahead from the plan's own creates and
deletes, ``answered`` from the API server's answers, ``settle`` against what the bus shows),
and the planner is the gate: while anything is expected it creates nothing. Each docstring
names the upstream test whose behaviour it asserts."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

from api.objects import Json
from api.workqueue import WorkQueue
from events.envelope import ObjectKey
from events.types import DecisionMade
from services.pool.worker import pool_reconciler, pool_worker
from services.runtime.kube import KubeError
from services.runtime.kube_events import event_about
from services.runtime.reconcile.actions import Create, Delete, Plan, flattened
from services.runtime.reconcile.expectations import (
    DEFAULT_TTL,
    Expectations,
    answered,
    expect,
    settle,
)
from services.runtime.worker_api import WorkerDefinition, WorkerSettings
from tests.support.plans import actions_of
from tests.unit.pool.fakes import PoolRig
from tests.unit.pool.world import NOW, NS, POOL, pool, world

OWNER = "uid-pool"


def sandbox_creates(plan: Plan) -> list[Create]:
    return [a for a in actions_of(plan, Create) if a.body["kind"] == "Sandbox"]


def deletes(plan: Plan) -> list[Delete]:
    return actions_of(plan, Delete)


def view(*objs: Json) -> dict[ObjectKey, Json]:
    """What the bus shows, for ``settle``."""
    return {ObjectKey(o["kind"], NS, o["metadata"]["name"]): o for o in objs}


# --- the lifecycle of creates ---------------------------------------------------------------


def test_raised_creates_block_creates_until_the_bus_shows_them() -> None:
    """Upstream TestWarmPoolExpectations_CreateLifecycle: raising blocks; a second raise is
    refused; observed → satisfied. Here the raise is the plan's own creates, recorded before
    they run; while they are expected the next plan makes no new one (before the answers it
    only issues the same ones again, by name), so nothing more is raised."""
    w = world(replicas=3)
    first = w.plan()
    raised = expect(None, OWNER, flattened(first.actions), NOW)
    assert raised is not None and raised.pending("Sandbox") == 3

    unanswered = w.plan(expectations=raised, memo=first.memo)
    assert {c.target for c in sandbox_creates(unanswered)} == {
        c.target for c in sandbox_creates(first)
    }, "no answers yet: the same creates again, by name, and no new one"
    assert expect(raised, OWNER, flattened(unanswered.actions), NOW) == raised, "one entry each"

    w.apply(first)
    made = [w.objects[c.target] for c in sandbox_creates(first)]
    learned = answered(raised, made, [])
    assert learned is not None and learned.unanswered("Sandbox") == set(), "uids known"
    assert not sandbox_creates(w.plan(expectations=learned, memo=first.memo)), "raised blocks"
    partly = settle(learned, view(*made[:2]).get, NOW)
    assert partly is not None and partly.pending("Sandbox") == 1
    assert settle(learned, view(*made).get, NOW) is None, "all observed: satisfied"
    assert not sandbox_creates(w.plan(memo=first.memo)), "steady once the bus shows them"


def test_a_plan_without_creates_of_our_own_records_nothing() -> None:
    """Upstream TestWarmPoolExpectations_TryExpectRejectsNonPositive: n ≤ 0 is refused and
    leaves no state. A plan with no create of an object the pool controls (a full pool; an
    Event, which no one owns) leaves no record."""
    w = world(replicas=1)
    w.member("a")
    full = w.plan()
    assert not sandbox_creates(full)
    assert expect(None, OWNER, flattened(full.actions), NOW) is None
    assert expect(None, OWNER, (), NOW) is None
    event = event_about(
        pool(), reason="WarmPoolNotProgressing", note="n", type="Warning", now=NOW, controller="c"
    )
    assert expect(None, OWNER, [Create(event)], NOW) is None


def test_refused_creates_drop_their_entries() -> None:
    """Upstream TestWarmPoolExpectations_LowerCreationsForFailedCreates: lowering for failed
    creates, clamped at 0."""
    creates = sandbox_creates(world(replicas=3).plan())
    raised = expect(None, OWNER, creates, NOW)
    assert raised is not None
    lowered = answered(raised, [], [creates[0].body])
    assert lowered is not None and lowered.pending("Sandbox") == 2
    assert answered(lowered, [], [creates[0].body]) == lowered, "clamped: the same one again"
    assert answered(raised, [], [c.body for c in creates]) is None


async def test_a_refused_create_and_those_never_attempted_are_not_waited_for() -> None:
    """Upstream TestWarmPoolExpectations_LowerCreationsForFailedCreates through the worker:
    the first slow-start batch is refused (422), the plan stops there, and neither it nor the
    creates after it are expected: the next pass fills the pool. A create that got no answer
    is different: it may have happened, so it stays expected and is issued again by name."""
    rig = PoolRig.of(world(replicas=3))
    first_name = sandbox_creates(world(replicas=3).plan())[0].target.name
    rig.api.errors[("create", first_name)] = KubeError(422, "Invalid", "no")
    failed = await rig.worker.reconcile(POOL)
    assert failed.error is not None and rig.api.created() == []
    assert rig.worker.observed(POOL, NOW).expectations is None

    del rig.api.errors[("create", first_name)]
    await rig.worker.reconcile(POOL)
    assert len(rig.api.created()) == 3, "not wedged"

    rig = PoolRig.of(world(replicas=3))
    rig.api.errors[("create", first_name)] = KubeError(0, "Timeout", "no answer")
    await rig.worker.reconcile(POOL)
    left = rig.worker.observed(POOL, NOW).expectations
    assert left is not None and left.unanswered("Sandbox") == {first_name}
    del rig.api.errors[("create", first_name)]
    await rig.worker.reconcile(POOL)
    assert [k.name for k in rig.api.created()] == [first_name], "only that one, under its name"


# --- deletes --------------------------------------------------------------------------------


def test_pending_deletions_block_creates_and_count_as_terminating() -> None:
    """Upstream TestWarmPoolExpectations_DeleteLifecycle: pending deletions block creates;
    IsPendingDeletion makes a still-cached deleted member count as terminating (and it is not
    deleted a second time)."""
    w = world(replicas=3)
    w.member("a")
    stuck = w.member("stuck", ready_status="False", age=400)
    first = w.plan()
    assert [(d.target.name, d.uid) for d in deletes(first)] == [("stuck", "uid-stuck")]
    raised = expect(None, OWNER, flattened(first.actions), NOW)
    assert raised is not None and raised.pending("Sandbox", "delete") == 1

    cached = settle(raised, view(stuck).get, NOW)
    assert cached == raised, "still on the bus: still expected"
    second = w.plan(expectations=cached, memo=first.memo)
    assert not sandbox_creates(second), "1 active + 1 terminating < 3, but a delete is pending"
    assert not deletes(second), "not deleted twice"
    assert "1 active, 1 terminating" in second.reason

    assert settle(raised, view().get, NOW) is None, "the bus shows it gone"
    reborn = {**stuck, "metadata": {**stuck["metadata"], "uid": "uid-another"}}
    assert settle(raised, view(reborn).get, NOW) is None, "a new incarnation is not the one"
    del w.objects[ObjectKey("Sandbox", NS, "stuck")]
    assert len(sandbox_creates(w.plan(memo=first.memo))) == 2


def test_a_delete_without_a_uid_records_nothing() -> None:
    """Upstream TestWarmPoolExpectations_EmptyUIDIgnored."""
    key = ObjectKey("Sandbox", NS, "a")
    assert expect(None, OWNER, [Delete(key)], NOW) is None
    assert expect(None, OWNER, [Delete(key, uid="")], NOW) is None


# --- timeouts -------------------------------------------------------------------------------


def test_expectations_lapse_after_five_minutes() -> None:
    """Upstream TestWarmPoolExpectations_Timeout: expires after 5 min; an expired deletion is
    not pending (the member counts as active again)."""
    assert timedelta(minutes=5) == DEFAULT_TTL
    assert WorkerSettings().expectations_ttl == 300.0
    w = world(replicas=1)
    member = w.member("a")
    raised = expect(None, OWNER, sandbox_creates(world(replicas=1).plan()), NOW)
    raised = expect(raised, OWNER, [Delete(ObjectKey("Sandbox", NS, "a"), uid="uid-a")], NOW)
    assert raised is not None and len(raised.entries) == 2
    assert settle(raised, view(member).get, NOW + DEFAULT_TTL) == raised, "not before"
    assert "0 active, 1 terminating" in w.plan(expectations=raised).reason
    lapsed = settle(raised, view(member).get, NOW + DEFAULT_TTL + timedelta(seconds=1))
    assert lapsed is None
    assert "1 active, 0 terminating" in w.plan(expectations=lapsed).reason


def test_the_gate_stays_closed_until_five_minutes_after_the_last_raise() -> None:
    """Upstream TestWarmPoolExpectations_TimeoutRefreshedByNewRaises: the timeout counts from
    the last raise. Upstream has one ``raisedAt`` per pool, refreshed by every raise; here each
    entry keeps its own ``since`` and lapses 5 min after it was raised. Since the planner
    creates nothing while any entry is pending, the gate opens at the same moment: 5 min after
    the last raise. Only the older entry itself goes earlier (its object no longer counts),
    which is closer to what is known about it."""
    w = world(replicas=3)
    later = NOW + timedelta(minutes=3)
    early = expect(None, OWNER, [Delete(ObjectKey("Sandbox", NS, "x"), uid="uid-x")], NOW)
    both = expect(early, OWNER, [Delete(ObjectKey("Sandbox", NS, "y"), uid="uid-y")], later)
    x = {"kind": "Sandbox", "metadata": {"name": "x", "namespace": NS, "uid": "uid-x"}}
    y = {"kind": "Sandbox", "metadata": {"name": "y", "namespace": NS, "uid": "uid-y"}}
    bus = view(x, y).get  # neither delete ever shows on the bus

    at_six = settle(both, bus, NOW + timedelta(minutes=6))
    assert at_six is not None and [e.name for e in at_six.entries] == ["y"]
    assert not sandbox_creates(w.plan(expectations=at_six)), "still closed by y"
    opened = settle(both, bus, later + DEFAULT_TTL + timedelta(seconds=1))
    assert opened is None
    assert len(sandbox_creates(w.plan(expectations=opened))) == 3

    creates = sandbox_creates(w.plan())
    once = expect(None, OWNER, creates, NOW)
    again = expect(once, OWNER, creates, later)
    assert once is not None and again == once, "the same create again keeps its first time"


# --- owners ---------------------------------------------------------------------------------


def test_another_incarnation_expects_nothing_of_ours() -> None:
    """Upstream TestWarmPoolExpectations_Forget: forgetting one pool leaves the others. Here
    expectations belong to one owner uid: a raise for another uid starts afresh."""
    creates = sandbox_creates(world(replicas=2).plan())
    ours = expect(None, OWNER, creates, NOW)
    assert ours is not None
    theirs = expect(ours, "uid-recreated", [Delete(ObjectKey("Sandbox", NS, "a"), uid="u")], NOW)
    assert theirs is not None and theirs.owner_uid == "uid-recreated"
    assert [e.verb for e in theirs.entries] == ["delete"], "none of the old owner's"


async def test_a_recreated_pool_starts_with_no_expectations() -> None:
    """Upstream TestWarmPoolExpectations_Forget through the worker: a pool deleted (state
    forgotten) and created again under the same name, with a new uid, is not held back by what
    its predecessor was waiting for."""
    rig = PoolRig.of(world(replicas=3))
    await rig.worker.reconcile(POOL)
    assert len(rig.api.created()) == 3
    assert rig.worker.observed(POOL, NOW).expectations is not None, "lagging: still expected"

    rig.show(pool(3), change="deleted")
    await rig.worker.reconcile(POOL)
    assert rig.js.memos[-1][1] == b"null", "a deleted pool's memory is forgotten"

    recreated = pool(3)
    recreated["metadata"].update(uid="uid-pool-2", resourceVersion="50")
    rig.api.store[POOL] = recreated
    rig.show(recreated)
    assert rig.worker.observed(POOL, NOW).expectations is None
    await rig.worker.reconcile(POOL)
    assert len(rig.api.created()) == 6, "the new pool fills itself at once"


async def test_a_recreated_pool_is_not_held_by_its_predecessors_entries() -> None:
    """The same, when the deletion and the new pool arrive together (the worker never
    reconciled the pool in between, so nothing was forgotten): entries of another owner uid
    are not this pool's."""
    rig = PoolRig.of(world(replicas=3))
    await rig.worker.reconcile(POOL)
    recreated = pool(3)
    recreated["metadata"].update(uid="uid-pool-2", resourceVersion="50")
    rig.api.store[POOL] = recreated
    rig.show(pool(3), change="deleted")
    rig.show(recreated)
    assert rig.worker.observed(POOL, NOW).expectations is None
    await rig.worker.reconcile(POOL)
    made = rig.api.created()
    assert len(made) == 6 and len(set(made)) == 6, "three new members, under new names"


# --- one key at a time ----------------------------------------------------------------------


async def test_a_key_being_reconciled_is_not_handed_to_a_second_task() -> None:
    """Upstream TestWarmPoolExpectations_ConcurrentTryExpect (one winner among concurrent
    raises) and TestWarmPoolExpectations_ConcurrentMixedOps (race-free under load). Upstream
    needs a lock because several reconciles of one pool, and the watch handlers, touch its
    record at once. Here a pool's expectations are read and written only by the reconcile of its
    own key, and the work queue never hands a key that is being reconciled to a second task:
    adds meanwhile only mark it to be reconciled once more afterwards. One writer per key at a
    time: no lock."""
    queue: WorkQueue[ObjectKey] = WorkQueue()
    queue.add(POOL)
    key, _ = await queue.get()
    for _ in range(3):
        queue.add(POOL)
    second = asyncio.create_task(queue.get())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not second.done() and len(queue) == 0 and queue.processing == {POOL}
    queue.done(key)
    assert (await asyncio.wait_for(second, 1))[0] == POOL, "once more, afterwards"
    queue.done(POOL)
    assert queue.idle()


async def test_parallel_workers_create_exactly_replicas() -> None:
    """Upstream TestReconcilePool_NoOverCreationConcurrent: the gate holds under parallel
    reconciles. Five worker tasks; while the first pass of the pool is in its creates, the pool
    is asked for again and again (adds and bus events): no second task takes it, the one pass
    after it sees its own creates expected, and the pool gets exactly ``replicas``."""
    w = world(replicas=3)
    rig = PoolRig.of(w, settings=WorkerSettings(written_ttl=0, concurrency=5))
    rig.api.hold_creates = asyncio.Event()
    tasks = [asyncio.create_task(rig.worker._work()) for _ in range(5)]
    try:
        await asyncio.wait_for(rig.api.creating_seen.wait(), 5)
        for _ in range(4):
            rig.worker.queue.add(POOL)
        rig.show(w.objects[ObjectKey("SandboxTemplate", NS, "tpl")], change="modified")
        assert rig.worker.queue.processing == {POOL} and len(rig.worker.queue) == 0
        assert rig.api.creating == 1
        rig.api.hold_creates.set()
        await asyncio.wait_for(rig.worker.settled(), 5)
    finally:
        rig.worker.queue.shutdown()
        await asyncio.gather(*tasks)
    assert len(rig.api.created()) == 3
    decided = [d for d in rig.js.decisions() if isinstance(d, DecisionMade)]
    assert [d.data.key.name for d in decided] == ["pool", "pool"], "the pass, then one more"


# --- a lagging bus --------------------------------------------------------------------------


UNGATED_POOL = dataclasses.replace(pool_reconciler(), expects=False)
"""The pool without expectations: what upstream had before #1215."""


async def test_a_lagging_bus_does_not_make_the_pool_over_create() -> None:
    """Upstream TestReconcilePool_NoOverCreationWithStaleCache through the worker: five
    reconciles of a pool of 3 whose bus never shows the members (and whose own answers do not
    outlive their pass: ``written_ttl=0``) make 3 creates; without the gate, 15."""
    gated = PoolRig.of(world(replicas=3))
    for _ in range(5):
        await gated.worker.reconcile(POOL)
    assert len(gated.api.created()) == 3

    definition = pool_worker()
    ungated = PoolRig.of(
        world(replicas=3),
        definition=WorkerDefinition(
            name=definition.name,
            reconcilers=(UNGATED_POOL,),
            watched_kinds=definition.watched_kinds,
            wakes=definition.wakes,
            label_indexes=definition.label_indexes,
        ),
    )
    for _ in range(5):
        await ungated.worker.reconcile(POOL)
    assert len(ungated.api.created()) == 15


async def test_a_delete_answered_not_found_clears_its_expectation_at_once() -> None:
    """Upstream TestReconcilePool_ExcessDeleteNotFoundLowersExpectation: an excess delete that
    finds the member already gone is observed at once, so the pool is not wedged while the bus
    still shows the member; a delete that succeeded is expected until the bus shows it."""
    w = world(replicas=1)
    w.member("old", age=500)
    newest = w.member("newest", age=10)
    rig = PoolRig.of(w)
    del rig.api.store[ObjectKey("Sandbox", NS, "newest")]  # gone; the bus has not said so
    decision = await rig.worker.reconcile(POOL)
    assert [(a.verb, a.target.name) for a in decision.actions if a.verb == "delete"] == [
        ("delete", "newest")
    ]
    assert any("already gone" in a.detail for a in decision.actions)
    assert rig.worker.observed(POOL, NOW).expectations is None

    rig.show(pool(3), change="modified")
    rig.api.store[POOL] = pool(3)
    more = await rig.worker.reconcile(POOL)
    assert more.error is None and len(rig.api.created()) == 1, "2 on the bus, 3 wanted"

    w2 = world(replicas=1)
    w2.member("old", age=500)
    w2.member("newest", age=10)
    answered_rig = PoolRig.of(w2)
    await answered_rig.worker.reconcile(POOL)
    pending = answered_rig.worker.observed(POOL, NOW).expectations
    assert isinstance(pending, Expectations) and pending.pending("Sandbox", "delete") == 1
    answered_rig.show(newest, change="deleted")
    assert answered_rig.worker.observed(POOL, NOW).expectations is None
