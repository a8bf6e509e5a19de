"""A SandboxWarmPool that cannot make progress says why (issues #29 and #32, docs/conditions.md
§3): ``Progressing=False`` with a reason and a person's message while the cause lasts, removed
when it ends; a Warning ``WarmPoolNotProgressing`` (upstream's Event reason) on each appearance
or change of reason, a Normal ``WarmPoolProgressing`` when it ends. And members whose Pod waits
on scheduling gates are left alone (upstream v1.0.7)."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from msgspec.structs import replace

from api.objects import Json
from events.envelope import ObjectKey
from services.pool.core.observation import PoolMemo, PoolSettings
from services.pool.core.plan import GRACE_SLACK, take_tokens
from services.runtime.reconcile.actions import Create, Delete, Patch, Plan
from tests.support.plans import actions_of
from tests.support.samples import stamp
from tests.unit.pool.world import NOW, NS, POOL, PoolWorld, pool, template, world

NO_IMAGE = "spec.podTemplate.spec.containers[0] has no image"


def deletes(plan: Plan) -> list[str]:
    return sorted(a.target.name for a in actions_of(plan, Delete))


def sandbox_creates(plan: Plan) -> int:
    return sum(1 for a in actions_of(plan, Create) if a.body["kind"] == "Sandbox")


def events(plan: Plan) -> list[tuple[str, str, str]]:
    return [
        (a.body["type"], a.body["reason"], a.body["note"])
        for a in actions_of(plan, Create)
        if a.body["kind"] == "Event"
    ]


def status_patch(plan: Plan) -> dict[str, Any] | None:
    for action in actions_of(plan, Patch):
        if action.subresource == "status":
            return dict(action.patch["status"])
    return None


def progressing(w: PoolWorld) -> Json | None:
    for entry in (w.objects[POOL].get("status") or {}).get("conditions") or ():
        if entry["type"] == "Progressing":
            return dict(entry)
    return None


def invalid(
    w: PoolWorld, name: str, message: str = NO_IMAGE, reason: str = "InvalidConfiguration"
) -> Json:
    member = w.member(name, ready_status="False", age=3600)
    member["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": reason, "message": message}
    ]
    w.add(member)
    return member


def scheduling(w: PoolWorld, name: str, scheduled: Json) -> None:
    """The member's ``PodScheduled`` condition, as the sandbox worker copies it from its Pod."""
    member = w.objects[ObjectKey("Sandbox", NS, name)]
    member["status"]["conditions"].append({"type": "PodScheduled", **scheduled})


def run(w: PoolWorld, memo: PoolMemo | None, settings: PoolSettings | None = None) -> Plan:
    """One pass, applied as the runtime would, a second before the next (Events are named by
    the clock)."""
    plan = w.plan(settings, memo=memo)
    w.apply(plan)
    w.now += timedelta(seconds=1)
    return plan


# --- 1. the template is missing -------------------------------------------------------------


def test_a_missing_template_is_said_once_and_cleared_when_it_appears() -> None:
    w = PoolWorld().add(pool(2))
    first = run(w, None)
    found = progressing(w)
    assert found is not None
    assert (found["status"], found["reason"]) == ("False", "TemplateNotFound")
    assert found["message"] == (
        'SandboxTemplate "tpl" not found in namespace "default": create it, or set '
        "spec.sandboxTemplateRef.name to a template that exists; until then the pool creates "
        "no sandboxes"
    )
    assert found["lastTransitionTime"] == stamp(NOW)
    assert events(first) == [
        ("Warning", "WarmPoolNotProgressing", "TemplateNotFound: " + found["message"])
    ]
    assert first.error is None, "not an error: no backoff"
    assert "not progressing: TemplateNotFound" in first.reason
    kinds = [type(a).__name__ for a in actions_of(first)]
    assert kinds.index("Patch") < kinds.index("Create"), "the status goes before its Event"

    again = run(w, first.memo)
    assert events(again) == [] and status_patch(again) is None, "said once, written once"

    w.add(template())
    fixed = run(w, again.memo)
    assert progressing(w) is None
    assert status_patch(fixed)["conditions"] is None, "removed by the merge patch's null"  # type: ignore[index]
    assert [e[:2] for e in events(fixed)] == [("Normal", "WarmPoolProgressing")]
    assert sandbox_creates(fixed) == 2, "the fill starts at once"
    assert fixed.memo is None or fixed.memo.stalled is None


def test_a_missing_template_names_the_members_it_keeps() -> None:
    w = world(2)
    w.member("a")
    del w.objects[ObjectKey("SandboxTemplate", NS, "tpl")]
    plan = run(w, None)
    assert progressing(w)["message"].endswith("; it keeps its 1 member(s)")  # type: ignore[index]
    assert deletes(plan) == [] and sandbox_creates(plan) == 0


def test_a_pool_scaled_to_zero_needs_no_template() -> None:
    """As upstream #1572: no warning and no condition for a pool that wants nothing."""
    w = PoolWorld().add(pool(0))
    plan = run(w, None)
    assert progressing(w) is None and events(plan) == []


# --- 2. the template makes invalid Sandboxes --------------------------------------------------


def test_invalid_members_are_one_condition_for_the_pool_held_until_the_template_is_fixed() -> None:
    w = world(2)
    invalid(w, "a")
    invalid(w, "b")
    first = run(w, None)
    found = progressing(w)
    assert found is not None and found["reason"] == "InvalidConfiguration"
    assert found["message"] == (
        'SandboxTemplate "tpl" makes sandboxes that cannot run (2 of 2 member(s) '
        f"Ready=False/InvalidConfiguration): {NO_IMAGE}. Fix the template; the pool then "
        "replaces these members"
    )
    assert [e[:2] for e in events(first)] == [("Warning", "WarmPoolNotProgressing")]
    assert deletes(first) == [], "held past the grace: a replacement would be just as invalid"
    assert sandbox_creates(first) == 0

    # The template is fixed: the invalid members go at once (OnReplenish too), and their
    # replacements, from the fixed template, come in the next pass.
    w.add(template(image="python:3.13"))
    fixed = run(w, first.memo)
    assert deletes(fixed) == ["a", "b"]
    assert progressing(w) is None
    assert [e[:2] for e in events(fixed)] == [("Normal", "WarmPoolProgressing")]
    refill = run(w, fixed.memo)
    assert sandbox_creates(refill) == 2
    assert events(refill) == []


def test_the_reasons_former_name_counts_too() -> None:
    w = world(1)
    invalid(w, "a", reason="InvalidSpec")
    run(w, None)
    assert progressing(w)["reason"] == "InvalidConfiguration"  # type: ignore[index]


def test_a_young_invalid_member_is_said_at_once_and_valid_ones_are_not_counted() -> None:
    w = world(3)
    young = w.member("young", ready_status="False", age=5)
    young["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": "InvalidConfiguration", "message": "x"}
    ]
    w.add(young)
    w.member("ok")
    w.member("starting", ready_status="False", age=5)
    plan = run(w, None)
    assert "(1 of 3 member(s)" in progressing(w)["message"]  # type: ignore[index]
    assert plan.requeue_after == pytest.approx(295 + GRACE_SLACK), "the starting one's deadline"


def test_a_changed_message_keeps_the_transition_time_and_makes_no_event() -> None:
    w = world(2)
    invalid(w, "a")
    first = run(w, None)
    later = copy.deepcopy(w)
    later.now = NOW + timedelta(minutes=5)
    invalid(later, "b")
    second = run(later, first.memo)
    found = progressing(later)
    assert found is not None and "(2 of 2 member(s)" in found["message"]
    assert found["lastTransitionTime"] == stamp(NOW)
    assert events(second) == []


# --- precedence, old memos, the Unschedulable hold ---------------------------------------------


def unschedulable(w: PoolWorld, name: str) -> None:
    w.member(name, ready_status="False", age=400)
    scheduling(
        w,
        name,
        {
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient cpu.",
        },
    )


def test_unschedulable_members_are_a_condition_with_the_schedulers_words() -> None:
    w = world(1)
    unschedulable(w, "held")
    plan = run(w, None)
    found = progressing(w)
    assert found is not None and found["reason"] == "Unschedulable"
    assert found["message"] == (
        "1 member(s) cannot be scheduled (0/3 nodes are available: 3 Insufficient cpu.): the "
        "pool holds them instead of replacing them, and looks again every 60 s"
    )
    assert [e[:2] for e in events(plan)] == [("Warning", "WarmPoolNotProgressing")]
    assert plan.requeue_after == 60.0


def test_a_change_of_reason_is_announced_again() -> None:
    """Upstream #1572's review: the cause flipping must not go unsaid."""
    w = world(1)
    unschedulable(w, "held")
    first = run(w, None)
    del w.objects[ObjectKey("SandboxTemplate", NS, "tpl")]
    second = run(w, first.memo)
    assert progressing(w)["reason"] == "TemplateNotFound"  # type: ignore[index]
    assert [e[2].split(":")[0] for e in events(second)] == ["TemplateNotFound"]


def test_an_earlier_versions_memo_stands_for_unschedulable() -> None:
    w = world(1)
    unschedulable(w, "held")
    old = PoolMemo(not_progressing=True)
    plan = run(w, old)
    assert events(plan) == [], "already announced by the earlier version"
    assert plan.memo is not None and plan.memo.stalled == "Unschedulable"
    assert not plan.memo.not_progressing
    clear = world(1)
    clear.member("fine")
    assert [e[:2] for e in events(run(clear, old))] == [("Normal", "WarmPoolProgressing")]


def test_other_conditions_are_kept() -> None:
    w = PoolWorld().add(
        pool(1, status={"conditions": [{"type": "Other", "status": "True", "reason": "X"}]})
    )
    run(w, None)
    types = [c["type"] for c in w.objects[POOL]["status"]["conditions"]]
    assert types == ["Other", "Progressing"]
    w.add(template())
    run(w, None)
    assert [c["type"] for c in w.objects[POOL]["status"]["conditions"]] == ["Other"]


# --- 3. scheduling gates ------------------------------------------------------------------


def test_a_member_waiting_on_scheduling_gates_is_left_alone() -> None:
    """Upstream v1.0.7: a Pod with ``spec.schedulingGates`` (PodScheduled=False/
    SchedulingGated) is not stuck, however old; nor is the pool not progressing."""
    w = world(2)
    w.member("gated", ready_status="False", age=3600)
    w.member("stuck", ready_status="False", age=3600)
    scheduling(w, "gated", {"status": "False", "reason": "SchedulingGated", "message": "gated"})
    scheduling(w, "stuck", {"status": "True"})
    plan = run(w, None)
    assert deletes(plan) == ["stuck"]
    assert progressing(w) is None and events(plan) == []
    assert plan.requeue_after is None, "nothing to look at again: the gate's lift wakes the pool"


def test_a_member_let_go_by_its_gate_gets_its_grace_from_its_scheduling() -> None:
    w = world(1)
    w.member("was-gated", ready_status="False", age=3600)
    scheduling(
        w,
        "was-gated",
        {"status": "True", "lastTransitionTime": stamp(NOW - timedelta(seconds=100))},
    )
    plan = w.plan()
    assert deletes(plan) == []
    assert plan.requeue_after == pytest.approx(200 + GRACE_SLACK)
    late = w.plan(PoolSettings(readiness_grace=60))
    assert deletes(late) == ["was-gated"]


def test_the_refill_bucket_keeps_the_member_numbering() -> None:
    granted, memo, _ = take_tokens(PoolMemo(next_member=7, stalled="X"), 1.0, 1, NOW)
    assert granted == 1 and memo.next_member == 7 and memo.stalled == "X"


# --- creates the API server refuses --------------------------------------------------------

QUOTA = (
    "create Sandbox/default/pool-x7k2q: Forbidden (403): sandboxes.agents.x-k8s.io "
    '"pool-x7k2q" is forbidden: exceeded quota: sandboxes, requested: count/sandboxes=1'
)


def test_refused_creates_are_said_in_the_apis_words_until_one_goes_through() -> None:
    w = world(2)
    first = w.plan(last_error=QUOTA)
    found = status_patch(first)["conditions"][0]  # type: ignore[index]
    assert (found["type"], found["status"], found["reason"]) == (
        "Progressing",
        "False",
        "FailedCreate",
    )
    assert found["message"] == (
        "the API server refuses the pool's Sandboxes: sandboxes.agents.x-k8s.io is forbidden: "
        "exceeded quota: sandboxes, requested: count/sandboxes=1 (Forbidden, 403). Fix what "
        "refuses them (the template, a quota, an admission policy); the pool tries again with "
        "backoff"
    )
    assert [e[:2] for e in events(first)] == [("Warning", "WarmPoolNotProgressing")]
    kinds = [(type(a).__name__, getattr(a, "body", {}).get("kind")) for a in actions_of(first)]
    assert kinds.index(("Create", "Sandbox")) > kinds.index(("Patch", None)), (
        "the status goes before the creates that may be refused again"
    )
    assert first.memo is not None and first.memo.refused and first.memo.creating

    # A pass that waits (no error, nothing created) keeps it: the refusal is not over.
    waiting = w.plan(memo=replace(first.memo, creating=False))
    assert events(waiting) == [] and status_patch(waiting) is not None
    assert status_patch(waiting)["conditions"][0]["reason"] == "FailedCreate"  # type: ignore[index]

    # The creates of the pass after it went through (no error): the condition goes.
    w.objects[POOL]["status"]["conditions"] = [found]
    done = w.plan(memo=first.memo)
    assert status_patch(done)["conditions"] is None  # type: ignore[index]
    assert [e[:2] for e in events(done)] == [("Normal", "WarmPoolProgressing")]
    assert done.memo is None or done.memo.refused is None


def test_other_errors_are_not_a_refusal() -> None:
    for error in (
        "create Sandbox/default/pool-x7k2q: InternalError (500): etcd is unhappy",
        "patch SandboxWarmPool/default/pool: Conflict (409): the object has been modified",
    ):
        plan = world(2).plan(last_error=error)
        assert events(plan) == [], error


BROKEN = "create Sandbox/default/pool-x7k2q: InternalError (500): etcd is unhappy"


def test_creates_that_keep_failing_are_said_once_the_failures_persist() -> None:
    """A 5xx is retried without alarm until the runtime says the passes have failed in a row
    for a while (``failure_persists``); then the pool says so, in the server's words, until a
    pass that creates is followed by one without an error."""
    w = world(2)
    assert events(w.plan(last_error=BROKEN)) == [], "not yet: it may pass"
    first = w.plan(last_error=BROKEN, failure_persists=True)
    found = status_patch(first)["conditions"][0]  # type: ignore[index]
    assert (found["status"], found["reason"]) == ("False", "FailedCreate")
    assert found["message"] == (
        "the pool's Sandbox creates keep failing: etcd is unhappy (InternalError, 500). The "
        "pool tries again with backoff; if it lasts, look at the API server"
    )
    assert [e[:2] for e in events(first)] == [("Warning", "WarmPoolNotProgressing")]
    assert first.memo is not None and first.memo.failing and first.memo.creating

    # Failing again: still said; a refusal then says it is one.
    w.objects[POOL]["status"]["conditions"] = [found]
    again = w.plan(memo=first.memo, last_error=BROKEN, failure_persists=True)
    assert "conditions" not in (status_patch(again) or {}) and events(again) == []
    refused = w.plan(memo=first.memo, last_error=QUOTA, failure_persists=True)
    assert refused.memo is not None and not refused.memo.failing
    message = status_patch(refused)["conditions"][0]["message"]  # type: ignore[index]
    assert message.startswith("the API server refuses the pool's Sandboxes: ")

    # The creates went through: the condition goes.
    done = w.plan(memo=first.memo)
    assert status_patch(done)["conditions"] is None  # type: ignore[index]
    assert done.memo is None or done.memo.refused is None
