"""The status window (``SANDBUS_SANDBOX_STATUS_WINDOW``): a status write that only reports a
starting Pod's progress is held back, so that a Pod Ready within the window costs one status
write instead of four; whatever else the status says is written at once.

Each test drives the worker's reconciler pass by pass against the fake cluster, keeping its
memo as the worker's shell does (the helpers of the write-behind tests).
"""

from __future__ import annotations

from typing import Any

import pytest

from api.keys import ANNOTATION_POD_NAME
from api.objects import Json
from services.runtime.reconcile.actions import Patch, Plan
from services.runtime.worker_api import Observed, Reconciler
from services.sandbox.core.status import only_progress
from services.sandbox.service import DEFAULT_STATUS_WINDOW, STATUS_WINDOW_ENV, seconds_from
from services.sandbox.worker import sandbox_reconciler, sandbox_worker
from tests.support.plans import actions_of
from tests.support.samples import conditions_by_type
from tests.unit.sandbox.passes import at, memo_of, reconcile
from tests.unit.sandbox.samples import FakeCluster, owned_pod, pod, sandbox

WINDOW = 2.0


def status_writes(cluster: FakeCluster) -> int:
    return sum(1 for w in cluster.writes if isinstance(w, Patch) and w.subresource == "status")


def set_pod(cluster: FakeCluster, **state: Any) -> None:
    """The Pod as the kubelet reports it next (``samples.pod``'s arguments)."""
    current = cluster.get("Pod", "sb")
    assert current is not None
    changed = owned_pod(uid=current["metadata"]["uid"], **state)
    changed["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
    cluster.add(changed)


def ready_of(cluster: FakeCluster) -> tuple[str, str] | None:
    sb = cluster.get("Sandbox", "sb")
    assert sb is not None
    ready = conditions_by_type(sb).get("Ready")
    return (ready["status"], ready["reason"]) if ready else None


def starting(window: float = WINDOW) -> tuple[Reconciler[Any], FakeCluster, Plan]:
    """A new Sandbox's first pass: its Pod is created."""
    reconciler = sandbox_reconciler(status_window=window)
    cluster = FakeCluster().add(sandbox())
    return reconciler, cluster, reconcile(reconciler, cluster, at(0))


def test_a_pod_ready_within_the_window_costs_one_status_write() -> None:
    reconciler, cluster, created = starting()
    assert [(type(a).__name__, a.target.kind) for a in created.actions] == [
        ("Create", "Pod"),
        ("Create", "Event"),  # SandboxPodCreated
    ]
    assert created.requeue_after == WINDOW, "back when the window ends, whatever the Pod does"
    assert memo_of(reconciler, cluster).status_held_since == at(0)
    for moment, state in (
        (0.1, {"phase": "Pending", "ready": None, "ips": (), "node": None}),
        (0.3, {"phase": "Pending", "ready": None, "ips": (), "scheduled": {"status": "True"}}),
        (0.6, {"phase": "Running", "ready": False}),
    ):
        set_pod(cluster, **state)
        held = reconcile(reconciler, cluster, at(moment))
        assert held.actions == ()
        assert held.requeue_after == pytest.approx(WINDOW - moment)
        assert memo_of(reconciler, cluster).status_held_since == at(0), "one clock, not reset"
    assert status_writes(cluster) == 0 and ready_of(cluster) is None
    set_pod(cluster, phase="Running", ready=True)
    became_ready = reconcile(reconciler, cluster, at(0.9))
    assert status_writes(cluster) == 1
    assert ready_of(cluster) == ("True", "DependenciesReady")
    assert became_ready.memo is None and became_ready.requeue_after is None
    sb = cluster.get("Sandbox", "sb")
    assert sb is not None and "annotations" not in sb["metadata"], "no pod-name write either"


def test_without_a_window_every_change_is_written_as_upstream_does() -> None:
    reconciler, cluster, created = starting(window=0)
    assert created.requeue_after == 0 and created.memo is None
    reconcile(reconciler, cluster, at(0))
    for moment, state in (
        (0.1, {"phase": "Pending", "ready": None, "ips": (), "scheduled": {"status": "True"}}),
        (0.2, {"phase": "Running", "ready": False}),
        (0.3, {"phase": "Running", "ready": True}),
    ):
        set_pod(cluster, **state)
        reconcile(reconciler, cluster, at(moment))
    assert status_writes(cluster) == 4


def test_a_pod_slower_than_the_window_has_its_progress_written_when_it_ends() -> None:
    reconciler, cluster, _ = starting()
    set_pod(cluster, phase="Pending", ready=None, ips=())
    assert reconcile(reconciler, cluster, at(1.0)).actions == ()
    late = reconcile(reconciler, cluster, at(WINDOW))  # the requeue at the end of the window
    assert status_writes(cluster) == 1
    assert ready_of(cluster) == ("False", "DependenciesNotReady")
    assert late.memo is None
    # The next change of progress starts a new window: at most one such write per window.
    set_pod(cluster, phase="Running", ready=False)
    again = reconcile(reconciler, cluster, at(WINDOW + 0.5))
    assert again.actions == () and again.requeue_after == pytest.approx(WINDOW)
    assert memo_of(reconciler, cluster).status_held_since == at(WINDOW + 0.5)


def test_losing_readiness_is_written_at_once() -> None:
    reconciler = sandbox_reconciler(status_window=WINDOW)
    cluster = FakeCluster().add(sandbox(annotations={ANNOTATION_POD_NAME: "sb"}), owned_pod())
    reconcile(reconciler, cluster, at(0))
    assert ready_of(cluster) == ("True", "DependenciesReady")
    set_pod(cluster, phase="Running", ready=False)
    lost = reconcile(reconciler, cluster, at(0.1))
    assert ready_of(cluster) == ("False", "DependenciesNotReady")
    assert lost.memo is None


@pytest.mark.parametrize("reason", ["Unschedulable", "SchedulingGated"])
def test_a_pod_that_cannot_be_scheduled_is_written_at_once(reason: str) -> None:
    """A Pod that cannot be scheduled, or waits on its gates, is not on its way to Ready: the
    user sees it at once, and a warm pool holds the member instead of replacing it."""
    reconciler, cluster, _ = starting()
    set_pod(
        cluster,
        phase="Pending",
        ready=None,
        ips=(),
        node=None,
        scheduled={"status": "False", "reason": reason, "message": "0/3 nodes are available"},
    )
    written = reconcile(reconciler, cluster, at(0.1))
    assert status_writes(cluster) == 1 and written.memo is None
    sb = cluster.get("Sandbox", "sb")
    assert sb is not None
    assert conditions_by_type(sb)["PodScheduled"]["reason"] == reason


def test_an_error_is_written_at_once() -> None:
    """A write the API server refused is reported in the status of the next pass, window or
    not: the user needs to see it."""
    reconciler = sandbox_reconciler(status_window=WINDOW)
    cluster = FakeCluster().add(sandbox())
    error = 'create Pod/default/sb: Forbidden (403): exceeded quota "pods"'
    observed = reconciler.observe(next(iter(cluster.objects)), _observed(cluster, last_error=error))
    plan = reconciler.plan(observed, at(0))
    written = [a for a in actions_of(plan) if isinstance(a, Patch) and a.subresource == "status"]
    assert written and plan.memo is None


def test_a_suspension_is_written_at_once() -> None:
    reconciler = sandbox_reconciler(status_window=WINDOW)
    cluster = FakeCluster().add(sandbox(operatingMode="Suspended"))
    reconcile(reconciler, cluster, at(0))
    assert ready_of(cluster) == ("False", "SandboxSuspended")


def _observed(cluster: FakeCluster, **fields: Any) -> Observed:
    return Observed(cluster.cache(), **fields)


@pytest.mark.parametrize(
    ("value", "seconds"), [(None, DEFAULT_STATUS_WINDOW), ("", DEFAULT_STATUS_WINDOW), ("0", 0.0)]
)
def test_the_status_window_setting_is_seconds(value: str | None, seconds: float) -> None:
    assert seconds_from(STATUS_WINDOW_ENV, value, DEFAULT_STATUS_WINDOW) == seconds


@pytest.mark.parametrize("value", ["-1", "soon", "nan"])
def test_a_status_window_that_is_not_seconds_stops_the_service(value: str) -> None:
    with pytest.raises(ValueError, match=STATUS_WINDOW_ENV):
        seconds_from(STATUS_WINDOW_ENV, value, DEFAULT_STATUS_WINDOW)


# --- which Pod changes wait for the pass that ends the window -------------------------------

STARTING = {"phase": "Pending", "ready": None, "ips": (), "node": None}
BOUND = {"phase": "Pending", "ready": None, "ips": (), "scheduled": {"status": "True"}}
RUNNING = {"phase": "Running", "ready": False}


def _with_metadata(pod: Json, **fields: Any) -> Json:
    return {**pod, "metadata": {**pod["metadata"], **fields}}


@pytest.mark.parametrize(
    ("before", "after"),
    [(STARTING, BOUND), (BOUND, RUNNING), (STARTING, RUNNING)],
    ids=["scheduled", "running", "both at once"],
)
def test_a_pod_on_its_way_to_ready_makes_only_progress(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    old, new = owned_pod(**before), owned_pod(**after)
    new = _with_metadata(new, resourceVersion="21", managedFields=[{"manager": "kubelet"}])
    assert only_progress(old, new)


@pytest.mark.parametrize(
    ("after", "why"),
    [
        (owned_pod(phase="Running", ready=True), "it became Ready"),
        (owned_pod(phase="Failed", ready=False), "it ended"),
        (owned_pod(phase="Succeeded", ready=False), "it completed"),
        (owned_pod(deleting=True, **RUNNING), "it is being deleted"),
        (owned_pod(labels={"team": "a"}, **RUNNING), "its labels changed"),
        (owned_pod(annotations={"note": "x"}, **RUNNING), "its annotations changed"),
        (pod(**RUNNING), "it lost its owner"),
        (owned_pod(uid="another", **RUNNING), "it is another Pod of the same name"),
        (
            owned_pod(
                phase="Pending",
                ready=None,
                ips=(),
                node=None,
                scheduled={"status": "False", "reason": "Unschedulable"},
            ),
            "the scheduler turned it down",
        ),
        (
            owned_pod(
                phase="Pending",
                ready=None,
                ips=(),
                node=None,
                scheduled={"status": "False", "reason": "SchedulingGated"},
            ),
            "it waits on its scheduling gates",
        ),
    ],
)
def test_every_other_change_of_a_pod_is_acted_on_at_once(after: Json, why: str) -> None:
    assert not only_progress(owned_pod(**STARTING), after), why


def test_a_change_of_a_pods_spec_other_than_its_node_is_acted_on_at_once() -> None:
    before = owned_pod(**STARTING)
    after = owned_pod(**BOUND)
    after["spec"] = {**after["spec"], "activeDeadlineSeconds": 30}
    assert not only_progress(before, after)


def test_the_sandbox_worker_lets_progress_wait_only_with_a_window() -> None:
    """The runtime folds a change into the key's pass already scheduled within the patience
    returned here: the pass that ends the status window (``requeue_after`` above)."""
    before, after = owned_pod(**STARTING), owned_pod(**RUNNING)
    patient = sandbox_worker(status_window=WINDOW).patience["Pod"]
    assert patient(before, after) == WINDOW
    assert patient(before, owned_pod(phase="Running", ready=True)) == 0
    assert sandbox_worker(status_window=0).patience["Pod"](before, after) == 0
