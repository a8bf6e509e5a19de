"""The snapshot worker's wiring (services/snapshot/worker.py): what wakes a SandboxSnapshot (its
own changes, and those of its Jobs and their Pods, by the snapshot-name label; a BatchSandbox
and its Pods never: a snapshot decides what to commit in the pass that creates its Job), and
which Pods and Jobs it follows at all."""

from __future__ import annotations

from typing import Any

from api.objects import Json
from events.envelope import ObjectKey
from services.runtime.worker_api import ObjectCache, Observed, Reconciler
from services.snapshot.core.plan import SnapshotSettings, plan_snapshot
from services.snapshot.worker import snapshot_worker, wakes
from tests.unit.snapshot.world import (
    NAME,
    NOW,
    NS,
    SETTINGS,
    SNAP,
    batch_sandbox,
    cache_of,
    commit_pod,
    committing,
    creates,
    job,
    pod,
    pool_pod,
    pooled,
    snapshot,
    unpause,
)

SNAPSHOT_KEY = ObjectKey("SandboxSnapshot", NS, SNAP)


def woken(kind: str, obj: Json) -> list[ObjectKey]:
    cache = cache_of(snapshot(), batch_sandbox(), obj)
    return list(wakes(kind, obj, cache))


def test_a_snapshot_wakes_itself() -> None:
    """sandbus: a snapshot's own change reconciles it."""
    assert woken("SandboxSnapshot", snapshot()) == [SNAPSHOT_KEY]


def test_its_jobs_wake_it() -> None:
    """The commit and the unpause Job, by the label
    ``sandbox.opensandbox.io/sandbox-snapshot-name``."""
    assert woken("Job", job()) == [SNAPSHOT_KEY]
    assert woken("Job", unpause()) == [SNAPSHOT_KEY]


def test_the_commit_pod_wakes_it() -> None:
    """The Pod's termination message is where the digests are: its change wakes the
    snapshot."""
    assert woken("Pod", commit_pod()) == [SNAPSHOT_KEY]


def test_the_label_names_the_snapshot_woken() -> None:
    """sandbus: the label's value, not the Job's name, says which snapshot."""
    other = job("x-commit", owner=snapshot("x"))
    assert woken("Job", other) == [ObjectKey("SandboxSnapshot", NS, "x")]


def test_a_batch_sandbox_and_its_pods_wake_nothing() -> None:
    """sandbus: the snapshot never waits for its sandbox, so neither the BatchSandbox (pooled
    or not) nor the Pods it may commit wake it."""
    sandbox = batch_sandbox()
    assert woken("BatchSandbox", sandbox) == []
    assert woken("BatchSandbox", pooled()) == []
    assert woken("Pod", pod(f"{NAME}-0", owner=sandbox)) == []
    assert woken("Pod", pool_pod("pool-a-x1")) == []


def test_a_job_without_the_label_wakes_nothing() -> None:
    """sandbus: a Job is a snapshot's only by the label."""
    stray = job()
    stray["metadata"]["labels"] = {}
    assert woken("Job", stray) == []


def test_it_follows_the_pods_it_may_commit_and_the_commit_pods() -> None:
    """The worker caches only the Pods of a Pool or of a BatchSandbox (what it may commit)
    and those of its Jobs, and only the Jobs of a snapshot."""
    definition = snapshot_worker()
    follows_pod = definition.follows["Pod"]
    follows_job = definition.follows["Job"]
    assert follows_pod(pod(f"{NAME}-0", owner=batch_sandbox()))
    assert follows_pod(pool_pod("pool-a-x1"))
    assert follows_pod(commit_pod())
    assert not follows_pod(pod("web-0"))
    assert follows_job(job())
    stray = job()
    stray["metadata"]["labels"] = {}
    assert not follows_job(stray)
    assert set(definition.watched_kinds) == {"SandboxSnapshot", "BatchSandbox", "Pod", "Job"}


def settings_of(reconciler: Reconciler[Any]) -> SnapshotSettings:
    """The settings the reconciler's observe hands its planner."""
    return reconciler.observe(SNAPSHOT_KEY, Observed(cache=ObjectCache())).settings


def test_the_reconciler_plans_with_its_settings() -> None:
    """The worker's one reconciler is the SandboxSnapshot's, with the settings given (none:
    no registry), observing through its cache and planning with ``plan_snapshot``."""
    (reconciler,) = snapshot_worker(SETTINGS).reconcilers
    assert reconciler.plan is plan_snapshot
    assert reconciler.kind == "SandboxSnapshot"
    assert settings_of(reconciler) == SETTINGS
    (default,) = snapshot_worker().reconcilers
    assert default.plan is plan_snapshot and settings_of(default) == SnapshotSettings()
    cache = cache_of(snapshot(status=committing()), job(state="failed"))
    result = reconciler.plan(reconciler.observe(SNAPSHOT_KEY, Observed(cache=cache)), NOW)
    assert [b["metadata"]["name"] for b in creates(result)] == [f"{SNAP}-unpause"]
