"""``plan_pool`` against the upstream tests of sandboxwarmpool_controller_test.go and
sandboxwarmpool_overcreation_test.go (docs/agent-sandbox.md §7.3): each test's docstring names
the upstream test whose behaviour it asserts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from api.keys import LABEL_LAUNCH_TYPE, LABEL_WARM_POOL_SANDBOX, name_hash
from events.envelope import ObjectKey
from services.pool.core.observation import PoolMemo, PoolSettings
from services.pool.core.plan import GRACE_SLACK, slow_start, take_tokens
from services.runtime.reconcile.actions import Create, Delete, Patch, Plan, Together
from services.runtime.reconcile.expectations import Expectations, Expected
from tests.support.plans import actions_of
from tests.unit.pool.world import NOW, NS, POOL, PoolWorld, pool, template, world


def sandbox_creates(plan: Plan) -> list[Create]:
    return [a for a in actions_of(plan, Create) if a.body["kind"] == "Sandbox"]


def deletes(plan: Plan) -> list[Delete]:
    return actions_of(plan, Delete)


def status_of(plan: Plan) -> dict[str, Any] | None:
    for action in actions_of(plan, Patch):
        if action.subresource == "status":
            return dict(action.patch["status"])
    return None


def events(plan: Plan) -> list[str]:
    return [a.body["reason"] for a in actions_of(plan, Create) if a.body["kind"] == "Event"]


def settle(w: PoolWorld, settings: PoolSettings | None = None, passes: int = 6) -> list[Plan]:
    """Plan and apply until a pass writes nothing (the bus catches up between passes)."""
    plans = []
    for _ in range(passes):
        plan = w.plan(settings)
        plans.append(plan)
        if not plan.actions:
            return plans
        w.apply(plan)
    raise AssertionError(f"no steady state in {passes} passes: {plans}")


# --- sizing -------------------------------------------------------------------------------


def test_fills_an_empty_pool_adds_deletes_and_stays_steady() -> None:
    """Upstream TestReconcilePool: nil replicas = 1; fills empty; adds; deletes excess; steady;
    0 replicas empties; status.replicas and selector."""
    w = world(replicas=None)
    assert len(sandbox_creates(w.plan())) == 1, "replicas absent means 1"

    w = world(replicas=3)
    first = w.plan()
    assert len(sandbox_creates(first)) == 3
    w.apply(first)
    w.add(pool(5, status={"replicas": 3}))
    assert len(sandbox_creates(w.plan())) == 2, "adds the difference"
    w.apply(w.plan())
    assert w.plan().actions[:1] == () or not sandbox_creates(w.plan())

    w.add(pool(2, status={"replicas": 5}))
    assert len(deletes(w.plan())) == 3, "deletes the excess"
    w.add(pool(0, status={"replicas": 5}))
    assert len(deletes(w.plan())) == 5, "0 replicas empties the pool"

    steady = world(replicas=2)
    plans = settle(steady)
    status = steady.objects[POOL]["status"]
    assert status["replicas"] == 2
    assert status["selector"] == f"{LABEL_WARM_POOL_SANDBOX}={name_hash('pool')}"
    assert not plans[-1].actions, "steady: nothing more to write"
    assert len(steady.creates()) == 2


def test_orphans_are_adopted_owned_counted_foreign_ignored() -> None:
    """Upstream TestReconcilePoolControllerRef: adopts orphans; counts owned; ignores foreign;
    mixed."""
    w = world(replicas=3)
    w.member("owned")
    orphan = w.member("orphan")
    orphan["metadata"]["ownerReferences"] = []
    w.add(orphan)
    foreign = w.member("foreign")
    foreign["metadata"]["ownerReferences"] = [
        {"kind": "SandboxClaim", "name": "c", "uid": "uid-c", "controller": True}
    ]
    w.add(foreign)
    plan = w.plan()
    adopt = [a for a in actions_of(plan) if isinstance(a, Patch) and a.subresource is None]
    assert [a.target.name for a in adopt] == ["orphan"]
    patch = adopt[0].patch["metadata"]
    assert patch["resourceVersion"] == orphan["metadata"]["resourceVersion"], "race-safe"
    assert patch["ownerReferences"][-1]["uid"] == "uid-pool"
    assert patch["labels"] == {LABEL_LAUNCH_TYPE: "warm"}
    assert adopt[0].on_conflict == "refresh"
    assert len(sandbox_creates(plan)) == 1, "owned + adopted = 2 of 3; the claimed one is not ours"


def test_a_member_without_the_warm_label_gets_it() -> None:
    w = world(replicas=1)
    member = w.member("m")
    del member["metadata"]["labels"][LABEL_LAUNCH_TYPE]
    w.add(member)
    (patch,) = [a for a in actions_of(w.plan()) if isinstance(a, Patch) and a.subresource is None]
    assert patch.patch["metadata"]["labels"] == {LABEL_LAUNCH_TYPE: "warm"}


def test_ready_replicas_count_only_ready_members() -> None:
    """Upstream TestReconcilePoolReadyReplicas: 0 / some / all / no condition."""
    for statuses, ready in (
        (("False", "False"), None),
        (("True", "False"), 1),
        (("True", "True"), 2),
        ((None, None), None),
    ):
        w = world(replicas=2)
        for index, status in enumerate(statuses):
            w.member(f"m{index}", ready_status=status, age=1)
        got = status_of(w.plan())
        assert got is not None and got.get("readyReplicas", None) == ready, statuses


def test_the_status_records_the_generation_seen() -> None:
    """Upstream TestReconcilePoolSetsObservedGeneration."""
    got = status_of(world(generation=7).plan())
    assert got is not None and got["observedGeneration"] == 7


def test_zero_values_are_cleared_in_the_status() -> None:
    """Upstream TestUpdateStatusClearsZeroValues: replicas and readyReplicas back to 0."""
    w = world(replicas=0, status={"replicas": 2, "readyReplicas": 2})
    got = status_of(w.plan())
    assert got is not None
    assert got["replicas"] is None and got["readyReplicas"] is None, "merge-patched away"


def test_an_unchanged_status_is_not_written() -> None:
    w = world(replicas=1)
    w.member("m")
    first = status_of(w.plan())
    assert first is not None
    w.add(pool(1, status={k: v for k, v in first.items() if v is not None}))
    assert status_of(w.plan()) is None


# --- slow start, batches, shaping ---------------------------------------------------------


def test_slow_start_batches_double_and_are_trimmed() -> None:
    """Upstream TestSlowStartBatch: 1, 2, 4, … trimmed (count 14); zero."""
    assert slow_start(14) == [1, 2, 4, 7]
    assert slow_start(0) == []
    assert slow_start(300) == [1, 2, 4, 8, 16, 32, 64, 128, 45]


def test_creates_go_in_slow_start_groups_capped_at_the_batch_size() -> None:
    """Upstream TestSlowStartBatch (stops at the first failure) and the max batch size: the
    plan's groups stop the runtime after the first failing group."""
    plan = world(replicas=14).plan()
    groups = [a for a in plan.actions if isinstance(a, Create | Together)]
    sizes = [len(g.actions) if isinstance(g, Together) else 1 for g in groups]
    assert sizes == [1, 2, 4, 7]
    capped = world(replicas=50).plan(PoolSettings(max_batch=10))
    assert len(sandbox_creates(capped)) == 10


def test_a_replenish_hold_defers_the_refill_and_a_new_drop_rearms_it() -> None:
    """Upstream TestReconcilePoolReplenishDelay: 0 = immediate; delay defers; drops re-arm;
    GC still runs."""
    settings = PoolSettings(replenish_delay=10.0)
    w = world(replicas=3)
    w.member("a")
    w.member("b")
    held = w.plan(settings)
    assert not sandbox_creates(held) and held.requeue_after == 10.0
    assert held.memo is not None and held.memo.hold_since == NOW
    w.now = NOW + timedelta(seconds=4)
    del w.objects[ObjectKey("Sandbox", NS, "b")]
    rearmed = w.plan(settings, memo=held.memo)
    assert rearmed.memo is not None and rearmed.memo.hold_since == w.now, "a further drop"
    w.now = NOW + timedelta(seconds=15)
    done = w.plan(settings, memo=rearmed.memo)
    assert len(sandbox_creates(done)) == 2
    assert len(sandbox_creates(world(replicas=3).plan(PoolSettings()))) == 3, "0: at once"


def test_refill_tokens() -> None:
    """Upstream TestTakeRefillTokens: rate 0 bypass; want ≤ 0 passthrough; a new bucket is full;
    accrual capped at 1 s; fractional rates; refund capped."""
    assert take_tokens(PoolMemo(), 0, 50, NOW)[0] == 50
    assert take_tokens(PoolMemo(), 5, 0, NOW)[0] == 0
    granted, memo, wait = take_tokens(PoolMemo(), 5, 50, NOW)
    assert granted == 5 and memo.tokens == 0 and wait == pytest.approx(0.2)
    later = NOW + timedelta(seconds=30)
    granted, memo, _ = take_tokens(memo, 5, 50, later)
    assert granted == 5, "accrual is capped at one second's worth"
    granted, memo, wait = take_tokens(PoolMemo(), 0.5, 3, NOW)
    assert granted == 1 and wait == pytest.approx(2.0), "fractional rate, bucket of one"


def test_a_max_refill_rate_paces_the_fill() -> None:
    """Upstream TestReconcilePoolMaxRefillRate: paced with a token-timed requeue."""
    settings = PoolSettings(max_refill_rate=2.0)
    w = world(replicas=10)
    first = w.plan(settings)
    assert len(sandbox_creates(first)) == 2
    assert first.requeue_after == pytest.approx(0.5)


# --- expectations (the over-creation guard) ------------------------------------------------


def pending(*names: str, answered: bool = True) -> Expectations:
    """Creates of ours the bus has not shown yet (``answered``: the API server's answer came,
    so their uids are known)."""
    return Expectations(
        owner_uid="uid-pool",
        entries=tuple(
            Expected(
                verb="create",
                kind="Sandbox",
                namespace=NS,
                name=n,
                uid=f"uid-{n}" if answered else "",
                since=NOW,
            )
            for n in names
        ),
    )


def test_no_creates_while_our_creates_are_not_on_the_bus() -> None:
    """Upstream TestReconcilePool_NoOverCreationWithStaleCache: with the view lagging (the
    members not yet listed), a pass that still expects creates makes none; five such passes
    create nothing more."""
    w = world(replicas=3)
    first = w.plan()
    names = [c.body["metadata"]["name"] for c in sandbox_creates(first)]
    assert len(names) == 3
    lagging = [w.plan(expectations=pending(*names)) for _ in range(5)]
    assert all(not sandbox_creates(plan) for plan in lagging)
    assert all(plan.requeue_after for plan in lagging)


def test_creates_without_an_answer_are_issued_again_under_their_names() -> None:
    """A pool worker killed between its write-ahead and the answers (or a create that timed
    out): the next pass issues exactly those creates again, under the same names, and no new
    one; an answered create is only waited for."""
    w = world(replicas=3)
    first = w.plan()
    names = [c.body["metadata"]["name"] for c in sandbox_creates(first)]
    w.apply(Plan(actions=(sandbox_creates(first)[0],)))  # one made it before the kill
    lost = pending(*names, answered=False)
    again = w.plan(expectations=lost, memo=first.memo)
    assert sorted(c.body["metadata"]["name"] for c in sandbox_creates(again)) == sorted(names[1:])


def test_member_names_are_the_pools_own_and_never_reused() -> None:
    """Names look like the API server's (``<pool>-`` and five characters) but come from the
    pool's uid and a counter in its memo, so a lost answer can be retried by name."""
    w = world(replicas=2)
    first = w.plan()
    names = [c.body["metadata"]["name"] for c in sandbox_creates(first)]
    assert all(n.startswith("pool-") and len(n) == len("pool-") + 5 for n in names)
    assert len(set(names)) == 2 and first.memo is not None and first.memo.next_member == 2
    assert all("generateName" not in c.body["metadata"] for c in sandbox_creates(first))
    w.apply(first)
    w.add(pool(4, status={"replicas": 2}))
    more = [c.body["metadata"]["name"] for c in sandbox_creates(w.plan(memo=first.memo))]
    assert len(more) == 2 and not set(more) & set(names)


def test_terminating_members_count_against_the_target() -> None:
    """Upstream TestReconcilePool_TerminatingCountsAgainstTarget."""
    w = world(replicas=2)
    w.member("a")
    going = w.member("b")
    going["metadata"]["deletionTimestamp"] = "2026-05-04T09:59:00Z"
    w.add(going)
    assert not sandbox_creates(w.plan()), "the terminating member blocks its replacement"
    expecting = Expectations(
        owner_uid="uid-pool",
        entries=(
            Expected(verb="delete", kind="Sandbox", namespace=NS, name="a", uid="uid-a", since=NOW),
        ),
    )
    w2 = world(replicas=1)
    w2.member("a")
    assert not sandbox_creates(w2.plan(expectations=expecting))


def test_a_pass_that_deletes_never_creates() -> None:
    """Upstream TestReconcilePool_TemplateRefUpdate_SameSpec (Recreate): a renamed template
    reference replaces every member even with an identical spec; replacements come on the pass
    after the deletes."""
    w = world(replicas=2, strategy="Recreate")
    w.member("a")
    w.member("b")
    w.add(pool(2, template_ref="renamed", strategy="Recreate"), template("renamed"))
    plan = w.plan()
    assert len(deletes(plan)) == 2 and not sandbox_creates(plan)
    w.apply(plan)
    replacements = sandbox_creates(w.plan())
    assert len(replacements) == 2
    labels = replacements[0].body["metadata"]["labels"]
    assert labels["agents.x-k8s.io/sandbox-template-ref-hash"] == name_hash("renamed")


# --- stuck members ------------------------------------------------------------------------


def test_a_member_stuck_past_its_grace_is_replaced_and_a_young_one_kept() -> None:
    """Upstream TestReconcilePoolGCStuckSandboxes and
    TestReconcilePool_YoungNotReadyArmsGraceRequeue: non-Ready older than the grace is deleted
    (replacement next pass); within grace kept, with the pass brought forward to its deadline."""
    w = world(replicas=2)
    w.member("old", ready_status="False", age=301)
    w.member("young", ready_status="False", age=100)
    plan = w.plan()
    assert [d.target.name for d in deletes(plan)] == ["old"]
    assert deletes(plan)[0].uid == "uid-old"
    assert not sandbox_creates(plan)
    assert plan.requeue_after == pytest.approx(200 + GRACE_SLACK)
    assert "stuck GC" in plan.reason


def test_unschedulable_members_are_held_and_reported_once() -> None:
    """Upstream TestReconcilePool_UnschedulableStuckGC and
    TestReconcilePool_QuietClusterSelfScheduledGraceEvaluation: an unschedulable member is
    held; a scheduled-but-stuck one and one whose Pod is missing are replaced; exactly one
    WarmPoolNotProgressing, then WarmPoolProgressing when it clears."""
    w = world(replicas=3)
    for name in ("held", "stuck", "podless"):
        w.member(name, ready_status="False", age=400)
    # Each member's PodScheduled condition, as the sandbox worker copies it from its Pod.
    w.objects[ObjectKey("Sandbox", NS, "held")]["status"]["conditions"].append(
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    )
    w.objects[ObjectKey("Sandbox", NS, "stuck")]["status"]["conditions"].append(
        {"type": "PodScheduled", "status": "True"}
    )
    settings = PoolSettings(unschedulable_recheck=60.0)
    first = w.plan(settings)
    assert sorted(d.target.name for d in deletes(first)) == ["podless", "stuck"]
    assert events(first) == ["WarmPoolNotProgressing"]
    assert first.requeue_after == 60.0
    again = w.plan(settings, memo=first.memo)
    assert events(again) == [], "reported once per transition"
    del w.objects[ObjectKey("Sandbox", NS, "held")]
    cleared = w.plan(settings, memo=first.memo)
    assert events(cleared) == ["WarmPoolProgressing"]


def test_grace_and_recheck_are_configurable_with_upstream_defaults() -> None:
    """Upstream TestReconcilePool_ConfigurableGraceAndRecheck and TestWarmPoolDefaults."""
    assert (PoolSettings().readiness_grace, PoolSettings().unschedulable_recheck) == (300.0, 60.0)
    w = world(replicas=1)
    w.member("m", ready_status="False", age=20)
    assert deletes(w.plan(PoolSettings(readiness_grace=10)))
    assert not deletes(w.plan(PoolSettings(readiness_grace=30)))


# --- deletion priority, rollout, templates ------------------------------------------------


def test_scale_down_deletes_not_ready_first_then_the_newest() -> None:
    w = world(replicas=2)
    w.member("old-ready", age=500)
    w.member("new-ready", age=10)
    w.member("mid-ready", age=100)
    w.member("not-ready", ready_status="False", age=200)
    plan = w.plan()
    assert [d.target.name for d in deletes(plan)] == ["not-ready", "new-ready"]
    assert all(d.uid for d in deletes(plan)), "each with its uid precondition"
    assert "scale-down" in plan.reason


def test_a_member_is_deleted_only_as_the_pool_saw_it() -> None:
    """Every delete of a member (scale-down, rollout, a stuck one replaced) carries the
    member's resourceVersion as it was planned from: a claim that adopts it in between moves
    that on, and the API then refuses the delete instead of taking the Sandbox from its claim
    (found by the chaos soak, bench/soak.py)."""
    w = world(replicas=1, strategy="Recreate")
    members = [w.member("a", age=500), w.member("b", age=10)]
    w.add(template(image="python:3.13"))
    planned = deletes(w.plan())
    versions = {m["metadata"]["name"]: m["metadata"]["resourceVersion"] for m in members}
    assert planned and {d.target.name: d.resource_version for d in planned} == {
        d.target.name: versions[d.target.name] for d in planned
    }
    w = world(replicas=1)
    members = [w.member("a", age=500), w.member("b", age=10)]
    (scaled_down,) = deletes(w.plan())
    assert scaled_down.resource_version == members[1]["metadata"]["resourceVersion"]


def test_a_template_change_replaces_members_under_recreate_only() -> None:
    """Upstream TestReconcilePool_TemplateUpdateRollout: Recreate replaces all images;
    OnReplenish keeps; "" behaves as OnReplenish."""
    for strategy, replaced in (("Recreate", 2), ("OnReplenish", 0), ("", 0), (None, 0)):
        w = world(replicas=2, strategy=strategy)
        w.member("a")
        w.member("b")
        w.add(template(image="python:3.13"))
        assert len(deletes(w.plan())) == replaced, strategy


def test_a_missing_template_creates_nothing_and_keeps_members() -> None:
    w = PoolWorld().add(pool(3))
    plan = w.plan()
    assert not sandbox_creates(plan) and not deletes(plan)
    assert "template does not exist" in plan.reason
    assert plan.error is None


def test_a_pool_being_deleted_or_gone_is_left_alone() -> None:
    gone = PoolWorld().add(template())
    assert gone.plan().actions == ()
    w = world()
    deleting = pool()
    deleting["metadata"]["deletionTimestamp"] = "2026-05-04T09:00:00Z"
    w.add(deleting)
    assert w.plan().actions == ()


def test_decisions_say_why() -> None:
    w = world(replicas=2)
    assert "fill" in w.plan().reason
    w.member("a")
    w.add(pool(2, status={"replicas": 2}))
    assert "replenish" in w.plan().reason


def test_the_pool_key_is_the_decision_subject() -> None:
    assert ObjectKey("SandboxWarmPool", NS, "pool") == POOL


def test_a_dns_policy_change_rolls_out_under_recreate_in_two_passes() -> None:
    """Upstream TestReconcilePool_TemplateUpdate_DNSPolicy: under Recreate, changing the
    template's dnsPolicy (Unmanaged network policy, so no secure DNS default) replaces every
    member: the first pass deletes, the next creates the replacements with the new policy."""
    spec = {"networkPolicyManagement": "Unmanaged"}
    w = PoolWorld().add(pool(2, strategy="Recreate"), template(**spec))
    tpl = w.objects[ObjectKey("SandboxTemplate", NS, "tpl")]
    tpl["spec"]["podTemplate"]["spec"]["dnsPolicy"] = "Default"
    w.member("a")
    w.member("b")
    assert not deletes(w.plan()), "members match the template"
    tpl["spec"]["podTemplate"]["spec"]["dnsPolicy"] = "ClusterFirst"
    first = w.plan()
    assert len(deletes(first)) == 2 and not sandbox_creates(first)
    w.apply(first)
    second = w.plan()
    created = sandbox_creates(second)
    assert len(created) == 2
    assert all(
        c.body["spec"]["podTemplate"]["spec"]["dnsPolicy"] == "ClusterFirst" for c in created
    )


def test_the_replenish_hold_follows_the_members() -> None:
    """Upstream TestObserveMembersForReplenish: disabled (delay 0) keeps no state; the hold arms
    when the pool is short, re-arms when it shrinks further, and is forgotten once the pool is
    full again; and stuck GC runs while the hold lasts (TestReconcilePoolReplenishDelay)."""
    assert world(replicas=3).plan(PoolSettings()).memo is None or (
        world(replicas=3).plan(PoolSettings()).memo.hold_since is None  # type: ignore[union-attr]
    )
    settings = PoolSettings(replenish_delay=30.0, readiness_grace=10.0)
    w = world(replicas=2)
    w.member("a")
    w.member("stuck", ready_status="False", age=60)
    armed = w.plan(settings)
    assert [d.target.name for d in deletes(armed)] == ["stuck"], "GC runs during the hold"
    w.apply(armed)
    held = w.plan(settings, memo=armed.memo)
    assert held.memo is not None and held.memo.hold_since is not None
    assert not sandbox_creates(held)
    w.member("b")
    full = w.plan(settings, memo=held.memo)
    assert full.memo is None or full.memo.hold_since is None, "full again: the hold is forgotten"
