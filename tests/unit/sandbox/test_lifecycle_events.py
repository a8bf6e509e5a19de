"""The Kubernetes Events of a Sandbox's lifecycle (upstream v1.0.4, #1532): one per transition,
decided by the planner from what it observed, so a pass that finds a step already done
announces nothing again; Normal for the good steps, Warning for SandboxPodCreateFailed and
PodFailed; none at all with the switch off (``SANDBUS_SANDBOX_EVENTS=false``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec
import pytest

from api.objects import Json
from events.envelope import ObjectKey
from services.runtime.reconcile.actions import Create, Patch, Plan
from services.runtime.worker_api import Observed
from services.sandbox.core.plan import plan_sandbox
from services.sandbox.core.status import REASON_DEPENDENCIES_NOT_READY
from services.sandbox.service import EVENTS_ENV, definition
from tests.support.samples import stamp
from tests.unit.sandbox.samples import (
    NOW,
    FakeCluster,
    observation,
    owned_pod,
    sandbox,
)

REFUSED = 'create Pod/default/sb: Forbidden (403): pods "sb" is forbidden: exceeded quota'


def events_of(cluster: FakeCluster) -> list[tuple[str, str]]:
    """The Events written so far, in order, as (type, reason)."""
    return [
        (w.body["type"], w.body["reason"])
        for w in cluster.writes
        if isinstance(w, Create) and w.body.get("kind") == "Event"
    ]


def planned_events(plan: Plan) -> list[Json]:
    return [a.body for a in plan.actions if isinstance(a, Create) and a.target.kind == "Event"]


def set_pod(cluster: FakeCluster, **state: Any) -> None:
    """The Pod as the kubelet reports it next (``samples.pod``'s arguments)."""
    current = cluster.get("Pod", "sb")
    assert current is not None
    changed = owned_pod(uid=current["metadata"]["uid"], **state)
    changed["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
    cluster.add(changed)


def edit_spec(cluster: FakeCluster, **spec: Any) -> None:
    stored = cluster.get("Sandbox", "sb")
    assert stored is not None
    stored["spec"].update(spec)
    stored["metadata"]["generation"] += 1


def converge(cluster: FakeCluster, now: datetime = NOW, **observed: Any) -> None:
    """``FakeCluster.converge`` with observation settings (``events``)."""
    for _ in range(8):
        plan = plan_sandbox(cluster.observe(**observed), now)
        if cluster.execute(plan) and (plan.requeue_after is None or plan.requeue_after > 0):
            return
    raise AssertionError("no convergence")


def started(**observed: Any) -> FakeCluster:
    """A new Sandbox whose Pod was created and then got Running and Ready."""
    cluster = FakeCluster().add(sandbox())
    converge(cluster, **observed)
    set_pod(cluster)
    converge(cluster, NOW + timedelta(seconds=1), **observed)
    return cluster


def test_a_new_sandbox_announces_its_pod_then_its_readiness_once() -> None:
    cluster = started()
    assert events_of(cluster) == [("Normal", "SandboxPodCreated"), ("Normal", "SandboxReady")]
    # Passes that find it Ready (a redelivery, a restart, another of its objects changing)
    # announce nothing more.
    for later in (2, 3):
        assert planned_events(plan_sandbox(cluster.observe(), NOW + timedelta(seconds=later))) == []


def test_the_events_name_the_sandbox_and_say_what_happened() -> None:
    cluster = FakeCluster().add(sandbox())
    plan = plan_sandbox(cluster.observe(), NOW)
    kinds = [(a.target.kind, a.step) for a in plan.actions]
    assert kinds == [("Pod", "reconcilePod"), ("Event", "reconcilePod")], "right after the create"
    (event,) = planned_events(plan)
    assert event["regarding"]["kind"] == "Sandbox" and event["regarding"]["name"] == "sb"
    assert event["reportingController"] == "sandbox-controller"
    assert (event["type"], event["reason"], event["action"]) == (
        "Normal",
        "SandboxPodCreated",
        "PodCreation",
    )
    assert event["note"] == 'Created Pod "sb"'


def test_readiness_is_announced_after_the_status_write_that_says_so() -> None:
    cluster = FakeCluster().add(sandbox())
    converge(cluster)
    set_pod(cluster)
    plan = plan_sandbox(cluster.observe(), NOW)
    assert [(a.target.kind, getattr(a, "subresource", None)) for a in plan.actions] == [
        ("Sandbox", "status"),
        ("Event", None),
    ]
    (ready,) = planned_events(plan)
    assert ready["reason"] == "SandboxReady" and ready["note"] == "Sandbox is ready: Pod is Ready"


def test_losing_readiness_and_getting_it_back_is_announced_again() -> None:
    cluster = started()
    set_pod(cluster, ready=False)
    converge(cluster, NOW + timedelta(seconds=2))
    set_pod(cluster)
    converge(cluster, NOW + timedelta(seconds=3))
    assert [reason for _, reason in events_of(cluster)].count("SandboxReady") == 2


def test_suspending_and_resuming() -> None:
    cluster = started()
    edit_spec(cluster, operatingMode="Suspended")
    converge(cluster, NOW + timedelta(seconds=2))
    assert cluster.get("Pod", "sb") is None
    converge(cluster, NOW + timedelta(seconds=3))
    assert events_of(cluster)[2:] == [("Normal", "SandboxSuspended")]
    converge(cluster, NOW + timedelta(seconds=4))
    assert events_of(cluster)[2:] == [("Normal", "SandboxSuspended")], "once"

    edit_spec(cluster, operatingMode="Running")
    converge(cluster, NOW + timedelta(seconds=5))
    set_pod(cluster)
    converge(cluster, NOW + timedelta(seconds=6))
    assert events_of(cluster)[3:] == [("Normal", "SandboxPodCreated"), ("Normal", "SandboxReady")]


def test_a_pod_ended_by_the_suspension_is_not_announced_as_ended() -> None:
    """The kubelet gives a deleted Pod a terminal phase before it goes; under a suspension that
    is the suspension's doing, not the workload's: SandboxSuspended, no PodSucceeded."""
    cluster = started()
    edit_spec(cluster, operatingMode="Suspended")
    set_pod(cluster, phase="Succeeded", ready=False, deleting=True)
    converge(cluster, NOW + timedelta(seconds=2))
    del cluster.objects[ObjectKey("Pod", "default", "sb")]
    converge(cluster, NOW + timedelta(seconds=3))
    assert events_of(cluster)[2:] == [("Normal", "SandboxSuspended")]


def test_an_error_that_comes_and_goes_does_not_announce_the_end_again() -> None:
    cluster = started()
    set_pod(cluster, phase="Failed", ready=False)
    converge(cluster, NOW + timedelta(seconds=2))
    stored = cluster.get("Sandbox", "sb")
    assert stored is not None
    # A pass in between reported an error (Ready=ReconcilerError; Finished stays).
    ready = next(c for c in stored["status"]["conditions"] if c["type"] == "Ready")
    ready.update(reason="ReconcilerError", message="Error seen: boom")
    converge(cluster, NOW + timedelta(seconds=4))
    stored = cluster.get("Sandbox", "sb")
    assert stored is not None
    assert [c["reason"] for c in stored["status"]["conditions"] if c["type"] == "Ready"] == [
        "PodFailed"
    ]
    assert events_of(cluster)[2:] == [("Warning", "PodFailed")]


@pytest.mark.parametrize(
    ("phase", "announced"),
    [("Succeeded", ("Normal", "PodSucceeded")), ("Failed", ("Warning", "PodFailed"))],
)
def test_the_end_of_the_pod_is_announced_once(phase: str, announced: tuple[str, str]) -> None:
    cluster = started()
    set_pod(cluster, phase=phase, ready=False)
    converge(cluster, NOW + timedelta(seconds=2))
    converge(cluster, NOW + timedelta(seconds=3))
    assert events_of(cluster)[2:] == [announced]


@pytest.mark.parametrize(("policy", "announced"), [("Retain", True), ("Delete", False)])
def test_expiry_is_announced_under_retain(policy: str, announced: bool) -> None:
    cluster = started()
    edit_spec(cluster, shutdownTime=stamp(NOW + timedelta(seconds=5)), shutdownPolicy=policy)
    later = NOW + timedelta(seconds=6)
    mark = plan_sandbox(cluster.observe(), later)
    assert [e["reason"] for e in planned_events(mark)] == (["SandboxExpired"] if announced else [])
    assert isinstance(mark.actions[0], Patch), "after the status write that marks it"
    cluster.execute(mark)
    converge(cluster, later + timedelta(milliseconds=1))
    if announced:
        converge(cluster, later + timedelta(seconds=1))
        assert events_of(cluster)[2:] == [("Normal", "SandboxExpired")]
        (event,) = [
            w.body
            for w in cluster.writes
            if isinstance(w, Create) and w.body.get("reason") == "SandboxExpired"
        ]
        assert event["action"] == "Expiry" and "shutdownPolicy Retain" in event["note"]
    else:
        assert cluster.get("Sandbox", "sb") is None
        assert events_of(cluster)[2:] == []


def test_a_refused_pod_create_is_a_warning_with_the_refusal() -> None:
    plan = plan_sandbox(observation(sandbox(), last_error=REFUSED), NOW)
    failed, created = planned_events(plan)
    assert (failed["type"], failed["reason"], failed["action"]) == (
        "Warning",
        "SandboxPodCreateFailed",
        "PodCreation",
    )
    assert failed["note"] == (
        'Failed to create Pod "sb": Forbidden (403): pods "sb" is forbidden: exceeded quota'
    )
    assert created["reason"] == "SandboxPodCreated", "announced if the retry succeeds"
    assert failed["metadata"]["name"] != created["metadata"]["name"]
    targets = [a.target.kind for a in plan.actions]
    assert targets == ["Sandbox", "Event", "Pod", "Event"], "reported before the retry"


@pytest.mark.parametrize(
    "error",
    [
        "patch status Sandbox/default/sb: InternalError (500): etcd timeout",
        "create Service/default/sb: Invalid (422): spec.ports",
        "create Pod/default/other: Forbidden (403): quota",
    ],
)
def test_another_refused_write_is_no_pod_create_failure(error: str) -> None:
    plan = plan_sandbox(observation(sandbox(), last_error=error), NOW)
    assert "SandboxPodCreateFailed" not in [e["reason"] for e in planned_events(plan)]


def test_progress_is_no_transition_to_announce() -> None:
    """A starting Pod's progress is not a step: held back by the status window or written,
    it is announced by nothing."""
    cluster = FakeCluster().add(sandbox())
    converge(cluster, status_window=5.0)
    set_pod(cluster, phase="Running", ready=False)
    held = plan_sandbox(cluster.observe(status_window=5.0, status_held_since=NOW), NOW)
    assert held.actions == ()
    written = plan_sandbox(cluster.observe(), NOW)
    status = [a for a in written.actions if isinstance(a, Patch)]
    assert status and planned_events(written) == []
    ready = status[0].patch["status"]["conditions"][-1]
    assert ready["reason"] == REASON_DEPENDENCIES_NOT_READY


def test_the_switch_off_writes_no_event_at_all() -> None:
    cluster = started(events=False)
    assert cluster.get("Pod", "sb") is not None
    edit_spec(cluster, operatingMode="Suspended")
    converge(cluster, NOW + timedelta(seconds=2), events=False)
    converge(cluster, NOW + timedelta(seconds=3), events=False)
    assert events_of(cluster) == []
    refused = msgspec.structs.replace(observation(sandbox(), last_error=REFUSED), events=False)
    assert planned_events(plan_sandbox(refused, NOW)) == []
    two = FakeCluster().add(sandbox(), owned_pod("sb"), owned_pod("sb-2", hashed_for="sb"))
    assert planned_events(plan_sandbox(two.observe(events=False), NOW)) == []
    assert [e["reason"] for e in planned_events(plan_sandbox(two.observe(), NOW))] == [
        "MultiplePods"
    ]


@pytest.mark.parametrize(
    ("value", "on"), [(None, True), ("", True), ("true", True), ("false", False)]
)
def test_the_setting(monkeypatch: pytest.MonkeyPatch, value: str | None, on: bool) -> None:
    """``SANDBUS_SANDBOX_EVENTS``: on unless ``false``, as upstream's events are on unless
    ``--disable-sandbox-events``."""
    if value is None:
        monkeypatch.delenv(EVENTS_ENV, raising=False)
    else:
        monkeypatch.setenv(EVENTS_ENV, value)
    (reconciler, _) = definition().reconcilers
    cache = FakeCluster().add(sandbox()).cache()
    observed = reconciler.observe(ObjectKey("Sandbox", "default", "sb"), Observed(cache))
    assert observed.events is on


def test_a_setting_that_is_not_a_bool_stops_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENTS_ENV, "sometimes")
    with pytest.raises(ValueError, match=EVENTS_ENV):
        definition()
