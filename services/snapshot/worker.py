"""The snapshot worker as the reconciler runtime sees it: SandboxSnapshots, reconciled by
:func:`~services.snapshot.core.plan.plan_snapshot`.

It follows the snapshots, the BatchSandboxes they name, the Pods those hold (a Pool's, or a
template-mode sandbox's own) and the commit Jobs with their Pods. A snapshot is woken by its own
changes and by those of its Jobs and their Pods: the Job's end, and the digests its Pod
reports. A BatchSandbox or its Pods wake nothing: a snapshot decides what to commit in the pass
that creates its Job, and never waits for a sandbox.

Pause and resume are BatchSandbox phases, so they belong to the one writer of a BatchSandbox's
status, the claim worker (:mod:`services.claim.core.batch.pause`): it creates the pause
snapshot and reads its phase, and this worker commits it like any other.
"""

from __future__ import annotations

from api.objects import Json, labels_of
from api.opensandbox import LABEL_BATCH_SANDBOX_NAME, LABEL_POOL_NAME, LABEL_SANDBOX_SNAPSHOT_NAME
from events.envelope import ObjectKey
from services.runtime.worker_api import (
    Observed,
    Reconciler,
    Wakes,
    WorkerDefinition,
    wake_label,
    wake_self,
)
from services.snapshot.core.plan import (
    SnapshotObservation,
    SnapshotSettings,
    observe_snapshot,
    plan_snapshot,
)

__all__ = ["WATCHED_KINDS", "WORKER_NAME", "snapshot_reconciler", "snapshot_worker", "wakes"]

WORKER_NAME = "snapshot"
WATCHED_KINDS = ("SandboxSnapshot", "BatchSandbox", "Pod", "Job")

wakes = Wakes(
    wake_self("SandboxSnapshot"),
    wake_label(("Job", "Pod"), "SandboxSnapshot", LABEL_SANDBOX_SNAPSHOT_NAME),
)


def snapshot_reconciler(
    settings: SnapshotSettings | None = None,
) -> Reconciler[SnapshotObservation]:
    settings = settings or SnapshotSettings()

    def observe(key: ObjectKey, observed: Observed) -> SnapshotObservation:
        return observe_snapshot(
            key,
            observed.cache,
            settings,
            last_error=observed.last_error,
            failure_persists=observed.failure_persists,
        )

    return Reconciler("SandboxSnapshot", observe, plan_snapshot)


def _followed_pod(pod: Json) -> bool:
    """A Pod a snapshot may commit (a Pool's, a BatchSandbox's own), or a commit Job's."""
    labels = labels_of(pod)
    return (
        LABEL_POOL_NAME in labels
        or LABEL_BATCH_SANDBOX_NAME in labels
        or LABEL_SANDBOX_SNAPSHOT_NAME in labels
    )


def snapshot_worker(settings: SnapshotSettings | None = None) -> WorkerDefinition:
    return WorkerDefinition(
        name=WORKER_NAME,
        reconcilers=(snapshot_reconciler(settings),),
        watched_kinds=WATCHED_KINDS,
        wakes=wakes,
        follows={
            "Pod": _followed_pod,
            "Job": lambda job: LABEL_SANDBOX_SNAPSHOT_NAME in labels_of(job),
        },
    )
