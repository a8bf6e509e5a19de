"""The optional write-behind window for the owned Pod's metadata patch (docs/agent-sandbox.md
§2.5; upstream controllers/writebehind_coalesce_test.go).

The fixture is the state right after a warm adoption: the Sandbox is claim-owned and its
template no longer carries the pool's metadata, while its live Pod still has the warm-pool
label and the autoscaler's safe-to-evict marker, which the metadata patch strips.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from msgspec.structs import replace

from api.keys import (
    ANNOTATION_POD_NAME,
    ANNOTATION_PROPAGATED_ANNOTATIONS,
    LABEL_ADOPTABLE,
    LABEL_WARM_POOL_SANDBOX,
    name_hash,
)
from events.types import Outcome
from services.runtime.reconcile.actions import Patch, Plan
from services.runtime.reconcile.worker import Worker
from services.runtime.worker_api import Reconciler
from services.sandbox.core.plan import WRITE_BEHIND_BOUND, plan_sandbox
from services.sandbox.service import WRITE_BEHIND_ENV, write_behind
from services.sandbox.worker import sandbox_reconciler, sandbox_worker
from tests.support.fakebus import FakeJetStream
from tests.support.plans import actions_of
from tests.support.samples import conditions_by_type, stamp
from tests.unit.sandbox.passes import SB, at, memo_of, reconcile
from tests.unit.sandbox.samples import (
    NOW,
    ClusterApi,
    FakeCluster,
    observation,
    owned_pod,
    pod,
    sandbox,
)

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
CLAIM = {
    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
    "kind": "SandboxClaim",
    "name": "wb-claim",
    "uid": "wb-claim-uid",
    "controller": True,
}


def after_adoption(**spec: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A claim-owned Sandbox tracking its Pod, and the Pod still dressed as a pool member."""
    sb = sandbox(owner=CLAIM, annotations={ANNOTATION_POD_NAME: "sb"}, **spec)
    live = owned_pod(
        labels={LABEL_WARM_POOL_SANDBOX: name_hash("wb-pool")},
        annotations={SAFE_TO_EVICT: "true", ANNOTATION_PROPAGATED_ANNOTATIONS: SAFE_TO_EVICT},
    )
    return sb, live


def settle(reconciler: Reconciler[Any], cluster: FakeCluster, now: datetime) -> Plan:
    for _ in range(8):
        plan = reconcile(reconciler, cluster, now)
        if plan.requeue_after != 0:
            return plan
    raise AssertionError("no convergence")


def pod_patches(cluster: FakeCluster) -> int:
    return sum(1 for w in cluster.writes if isinstance(w, Patch) and w.target.kind == "Pod")


def metadata(cluster: FakeCluster) -> tuple[dict[str, str], dict[str, str]]:
    live = cluster.get("Pod", "sb")
    assert live is not None
    return live["metadata"]["labels"], live["metadata"].get("annotations", {})


def test_write_behind_disabled_is_synchronous() -> None:
    """Upstream TestWriteBehindDisabledIsSynchronous: with window 0 the Pod metadata patch is
    written in the pass that finds it, exactly once, with the status after it in the same pass,
    and a second pass writes no Pod."""
    cluster = FakeCluster().add(*after_adoption())
    reconciler = sandbox_reconciler()
    first = reconcile(reconciler, cluster, NOW)
    assert pod_patches(cluster) == 1
    patches = [a for a in first.actions if isinstance(a, Patch)]
    assert [(a.target.kind, a.subresource) for a in patches] == [
        ("Pod", None),
        ("Sandbox", "status"),
    ]
    assert first.requeue_after != 0
    labels, annotations = metadata(cluster)
    assert SAFE_TO_EVICT not in annotations and LABEL_WARM_POOL_SANDBOX not in labels
    settle(reconciler, cluster, NOW)
    assert pod_patches(cluster) == 1
    assert memo_of(reconciler, cluster) is None


def test_a_held_pod_patch_coalesces_and_is_written_once_after_the_window() -> None:
    """Upstream TestRequeueDeferralCoalescesAdoptionPodPatch: with a window (an hour, bounded to
    1 s) no Pod patch is written inside it and the pass asks to come back within 1 s; a
    redelivery inside the window holds the same patch without restarting the clock; the pass
    after the window writes one patch, identical to synchronous mode; and readiness is not
    gated on it: the holding pass writes the status synchronous mode writes."""
    synchronous = FakeCluster().add(*after_adoption())
    settle(sandbox_reconciler(), synchronous, NOW)
    want_metadata = metadata(synchronous)
    sync_sandbox = synchronous.get("Sandbox", "sb")
    assert sync_sandbox is not None
    want_ready = conditions_by_type(sync_sandbox)["Ready"]
    assert want_ready["status"] == "True"

    cluster = FakeCluster().add(*after_adoption())
    reconciler = sandbox_reconciler(write_behind=3600.0)
    first = reconcile(reconciler, cluster, NOW)
    assert pod_patches(cluster) == 0
    assert first.requeue_after is not None and 0 < first.requeue_after <= WRITE_BEHIND_BOUND
    assert metadata(cluster)[1][SAFE_TO_EVICT] == "true", "the Pod is untouched in the window"
    held_sandbox = cluster.get("Sandbox", "sb")
    assert held_sandbox is not None
    assert conditions_by_type(held_sandbox)["Ready"] == want_ready, "the status is not held back"

    second = reconcile(reconciler, cluster, at(0.3))
    assert pod_patches(cluster) == 0
    assert second.requeue_after is not None
    assert 0 < second.requeue_after < first.requeue_after, "the window is not restarted"
    assert second.requeue_after == first.requeue_after - 0.3

    reconcile(reconciler, cluster, at(first.requeue_after))
    assert pod_patches(cluster) == 1
    assert metadata(cluster) == want_metadata
    assert memo_of(reconciler, cluster) is None, "the flushing pass stops the clock"

    settle(reconciler, cluster, at(2))
    assert pod_patches(cluster) == 1
    assert memo_of(reconciler, cluster) is None


def test_a_lost_clock_restarts_the_window_and_loses_no_write() -> None:
    """Upstream TestRequeueDeferralCrashRecovery (with a window): a worker that lost its memo
    (the runtime keeps it on the bus, so this is the worst case) has lost only the time the
    hold began; it holds the patch again for a fresh window, recomputed from the objects, and
    then writes it."""
    cluster = FakeCluster().add(*after_adoption())
    reconcile(sandbox_reconciler(write_behind=0.25), cluster, NOW)
    assert pod_patches(cluster) == 0

    restarted = sandbox_reconciler(write_behind=0.25)
    again = reconcile(restarted, cluster, at(0.1))
    assert pod_patches(cluster) == 0
    assert again.requeue_after == 0.25
    reconcile(restarted, cluster, at(0.35))
    assert pod_patches(cluster) == 1
    labels, annotations = metadata(cluster)
    assert SAFE_TO_EVICT not in annotations and LABEL_WARM_POOL_SANDBOX not in labels


def test_adopting_an_unowned_pod_is_never_held_back() -> None:
    """Ownership transfers stay synchronous: only the relabelling of an owned Pod waits."""
    unowned = pod(labels={LABEL_ADOPTABLE: "true"})
    obs = observation(sandbox(), pods=(unowned,))
    synchronous = plan_sandbox(obs, NOW)
    windowed = plan_sandbox(replace(obs, write_behind=1.0), NOW)
    assert windowed.actions == synchronous.actions
    patch = next(a for a in actions_of(windowed) if isinstance(a, Patch) and a.target.kind == "Pod")
    assert patch.patch["metadata"]["ownerReferences"][0]["uid"] == "sandbox-uid-1"


def test_a_retry_after_a_failed_write_is_not_held_back() -> None:
    """A pass that follows a refused write writes the Pod patch at once: holding it again would
    only delay the retry."""
    sb, live = after_adoption()
    error = "patch Pod/default/sb: InternalError (500): etcd timeout"
    obs = replace(observation(sb, pods=(live,), last_error=error), write_behind=1.0)
    assert any(
        isinstance(a, Patch) and a.target.kind == "Pod" for a in actions_of(plan_sandbox(obs, NOW))
    )


def test_the_hold_and_the_expiry_recheck_take_the_earlier_time() -> None:
    """A Sandbox that expires in an hour is rechecked then; holding a patch brings that in."""
    sb, live = after_adoption(shutdownTime=stamp(NOW + timedelta(hours=1)))
    plan = plan_sandbox(replace(observation(sb, pods=(live,)), write_behind=0.5), NOW)
    assert plan.requeue_after == 0.5


def test_a_clock_that_started_in_the_future_still_ends_within_the_window() -> None:
    sb, live = after_adoption()
    obs = replace(observation(sb, pods=(live,)), write_behind=0.5, pod_patch_held_since=at(10))
    plan = plan_sandbox(obs, NOW)
    assert plan.requeue_after == 0.5
    assert not any(isinstance(a, Patch) and a.target.kind == "Pod" for a in actions_of(plan))


async def test_the_worker_comes_back_when_the_window_ends() -> None:
    """The real worker shell: the holding pass is recorded with its requeue (at most the
    window) and scheduled; the pass at the end of the window writes the patch."""
    cluster = FakeCluster().add(*after_adoption())
    clock = [NOW]
    worker = Worker(
        sandbox_worker(write_behind=0.5),
        js=FakeJetStream(),  # type: ignore[arg-type]
        api=ClusterApi(cluster),  # type: ignore[arg-type]
        clock=lambda: clock[0],
    )
    for obj in cluster.objects.values():
        worker.cache.observe("added", obj)
    held = await worker.reconcile(SB)
    assert held.outcome == Outcome.APPLIED, "the status is written in the holding pass"
    assert [(a.verb, a.target.kind) for a in held.actions] == [
        ("patch status", "Sandbox"),
        ("create", "Event"),  # SandboxReady: the adopted Sandbox's first status says so
    ]
    assert held.requeue_after_seconds == 0.5 and SB in worker.queue.scheduled
    assert "held back" in held.reason
    clock[0] = at(0.5)
    flushed = await worker.reconcile(SB)
    assert [(a.verb, str(a.target)) for a in flushed.actions] == [("patch", "Pod/default/sb")]


@pytest.mark.parametrize(
    ("value", "seconds"), [(None, 0.0), ("", 0.0), ("0.25", 0.25), ("3600", 3600.0)]
)
def test_the_window_setting_is_seconds(value: str | None, seconds: float) -> None:
    """``SANDBUS_SANDBOX_WRITE_BEHIND``; a window above the bound is accepted, and bounded by
    the planner, as upstream accepts ``--sandbox-write-behind-window=1h``."""
    assert write_behind(value) == seconds


@pytest.mark.parametrize("value", ["-1", "soon", "inf", "nan", "250ms"])
def test_a_window_setting_that_is_not_seconds_stops_the_service(value: str) -> None:
    with pytest.raises(ValueError, match=WRITE_BEHIND_ENV):
        write_behind(value)
