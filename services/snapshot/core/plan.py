"""``plan_snapshot``: one pass of a SandboxSnapshot (docs/opensandbox.md §4.1).

A snapshot goes Pending → Committing → Succeed or Failed, and a terminal phase is never
changed. One pass does, in order:

1. A snapshot being deleted: delete its commit and unpause Jobs (their Pods with them) and drop
   the cleanup finalizer. The images in the registry are kept: a paused sandbox may still need
   them, and only their owner knows.
2. The cleanup finalizer, if missing, so that the Jobs never outlive the snapshot.
3. Pending: a format other than ``rootfs-v1`` (:mod:`.formats`), Failed
   ``IncompatibleSnapshotFormat``; a ``rootfs-v1`` snapshot whose status already holds a VM's
   state, Failed ``InvalidCheckpointContract``; with no registry configured, Failed
   ``RegistryNotConfigured``; no BatchSandbox of that name, Failed
   ``BatchSandboxLookupFailed``; no Pod of the sandbox to commit
   (:mod:`.source`), Failed ``SourcePodNotFound``; no containers, Failed ``NoContainers``; a
   Job of that name that no snapshot controls, Failed ``CommitJobNameTaken``.
   Otherwise create the commit Job and report Committing, with the source Pod and node, the
   image each container is committed to, and ``status.format: rootfs-v1``. A create of the
   commit Job that the API server refused in the previous pass (or that keeps failing:
   ``failure_persists``) is said first: phase Pending with the condition ``CommitJobFailure``
   (reason ``FailedCreateJob``, the server's words), and a Warning Event ``FailedCreateJob``
   when it appears (upstream's Event); then the create is tried again. Committing removes it.
4. Committing: the Job succeeded, Succeed with each container's digest from the commit Pod's
   termination message and the condition Ready ``SnapshotReady``; the Job failed for good, the
   best-effort unpause Job, then Failed ``CommitJobFailed`` with the Job's message; a Job that
   is gone (deleted, or removed by its TTL before we saw it end) is created again.

Where this differs from upstream, on purpose:

- Pending is not written as a step of its own: the pass that decides what to commit creates
  the Job and reports Committing with the whole decision in one status write (upstream writes
  Pending, then the source and images, then Committing). A snapshot that stays Pending is one
  whose pass failed: its decision says why, and its ``CommitJobFailure`` condition too when
  the API server refuses the Job (upstream only emits the Event ``FailedCreateJob``).
- A commit Job that exists already (the worker stopped between its create and the status
  write, or the status write failed) is taken up, and the source Pod and images are read back
  from its arguments rather than chosen again: a restart never starts a second commit.
- The source Pod is one the sandbox holds now (see :mod:`.source`, the trap of §9.19).
- A Job that succeeded before its Pod reports the digests waits up to ``digest_grace`` seconds
  for the Pod, then the snapshot succeeds without digests (upstream succeeds at once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import msgspec

from api.objects import Json, controller_of, metadata_of
from api.opensandbox import FINALIZER_SNAPSHOT_CLEANUP
from events.envelope import ObjectKey
from services.runtime.cache import ObjectCache
from services.runtime.kube_events import event_about, warning_when_raised
from services.runtime.reconcile.actions import Action, Create, Delete, Patch, Plan
from services.runtime.reconcile.failures import reportable
from services.runtime.times import parse_time, rfc3339_nano
from services.snapshot.core.formats import COMMITTED_FORMAT, format_refusal
from services.snapshot.core.images import container_names, image_tag, image_uri
from services.snapshot.core.jobs import (
    CommitterSettings,
    commit_job,
    commit_job_name,
    commit_target,
    committed_images,
    job_failure,
    job_succeeded,
    unpause_job,
    unpause_job_name,
)
from services.snapshot.core.source import candidate_pods, source_pod

__all__ = [
    "CONTROLLER_NAME",
    "SnapshotObservation",
    "SnapshotSettings",
    "observe_snapshot",
    "plan_snapshot",
]

CONTROLLER_NAME: Final = "sandboxsnapshot-controller"
COMMITTING_RECHECK: Final = 30.0
"""Seconds between looks at a running commit Job (its changes wake the snapshot sooner)."""
TAKEN_RECHECK: Final = 5.0
"""Seconds between looks while a Job of another snapshot of that name holds our Job's name."""
TERMINAL: Final = frozenset({"Succeed", "Failed"})
JOB_FAILURE: Final = "CommitJobFailure"
"""The condition of a snapshot whose commit Job the API server refuses (sandbus's)."""
JOB_FAILURE_REASON: Final = "FailedCreateJob"
"""Its reason and its Warning Event's: upstream's Event for a commit Job create that failed."""


@dataclass(frozen=True)
class SnapshotSettings:
    registry: str = ""
    """Where images are pushed (``--snapshot-registry``); none: every snapshot fails with
    ``RegistryNotConfigured``."""
    committer: CommitterSettings = field(default_factory=CommitterSettings)
    digest_grace: float = 30.0
    """Seconds a succeeded commit Job's Pod has to show the digests."""
    events: bool = True
    """Record the Kubernetes Event ``CreatedJob``."""


class SnapshotObservation(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    snapshot: Json | None
    sandbox: Json | None = None
    """The BatchSandbox ``spec.sandboxName`` names."""
    source: Json | None = None
    """The Pod to commit, looked for only while there is no commit Job."""
    commit_job: Json | None = None
    unpause_job: Json | None = None
    job_pods: tuple[Json, ...] = ()
    """The Pods the commit Job controls."""
    settings: SnapshotSettings = SnapshotSettings()
    last_error: str | None = None
    """The failure of the previous pass (``Observed.last_error``)."""
    failure_persists: bool = False
    """The passes have failed in a row for a while (``Observed.failure_persists``)."""


def _sandbox_name(snapshot: Mapping[str, Any]) -> str:
    return str((snapshot.get("spec") or {}).get("sandboxName") or "")


def observe_snapshot(
    key: ObjectKey,
    cache: ObjectCache,
    settings: SnapshotSettings,
    *,
    last_error: str | None = None,
    failure_persists: bool = False,
) -> SnapshotObservation:
    snapshot = cache.get(key)
    if snapshot is None:
        return SnapshotObservation(
            namespace=key.namespace, name=key.name, snapshot=None, settings=settings
        )
    sandbox_name = _sandbox_name(snapshot)
    sandbox = (
        cache.get(ObjectKey("BatchSandbox", key.namespace, sandbox_name)) if sandbox_name else None
    )
    job_name = commit_job_name(key.name)
    job = cache.get(ObjectKey("Job", key.namespace, job_name))
    source = None
    phase = (snapshot.get("status") or {}).get("phase")
    if sandbox is not None and job is None and phase not in TERMINAL:
        others = [
            other
            for other in cache.objects("BatchSandbox", key.namespace)
            if metadata_of(other).get("uid") != metadata_of(sandbox).get("uid")
        ]
        source = source_pod(sandbox, candidate_pods(sandbox, cache), others)
    job_uid = str(metadata_of(job).get("uid") or "") if job is not None else ""
    job_pods = tuple(cache.owned_by("Pod", job_uid)) if job_uid else ()
    return SnapshotObservation(
        namespace=key.namespace,
        name=key.name,
        snapshot=snapshot,
        sandbox=sandbox,
        source=source,
        commit_job=job,
        unpause_job=cache.get(ObjectKey("Job", key.namespace, unpause_job_name(key.name))),
        job_pods=job_pods,
        settings=settings,
        last_error=last_error,
        failure_persists=failure_persists,
    )


@dataclass
class _Pass:
    obs: SnapshotObservation
    snapshot: Json
    now: datetime
    actions: list[Action] = field(default_factory=list)

    @property
    def key(self) -> ObjectKey:
        return ObjectKey("SandboxSnapshot", self.obs.namespace, self.obs.name)

    @property
    def meta(self) -> Mapping[str, Any]:
        return metadata_of(self.snapshot)

    def ours(self, job: Mapping[str, Any] | None) -> bool:
        owner = controller_of(job) if job is not None else None
        return owner is not None and owner.get("uid") == self.meta.get("uid")

    def status(self, fields: Json, why: str) -> None:
        generation = self.meta.get("generation")
        if isinstance(generation, int):
            fields = {"observedGeneration": generation, **fields}
        self.actions.append(
            Patch(
                self.key,
                {"status": fields},
                subresource="status",
                why=why,
                on_conflict="refresh",
                conditional=True,
            )
        )

    def condition(self, kind: str, reason: str, message: str) -> Json:
        return {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": rfc3339_nano(self.now),
        }

    def fail(self, reason: str, message: str) -> Plan:
        """Failed before a commit: what an earlier commit attempt reported goes."""
        self.status(
            {
                "phase": "Failed",
                "format": None,
                "sourcePodName": None,
                "sourceNodeName": None,
                "containers": None,
                "conditions": [self.condition("Failed", reason, message)],
            },
            why=f"{reason}: {message}",
        )
        return Plan(actions=tuple(self.actions), reason=f"Failed {reason}: {message}")


def plan_snapshot(obs: SnapshotObservation, now: datetime) -> Plan:
    snapshot = obs.snapshot
    if snapshot is None:
        return Plan(reason="gone")
    run = _Pass(obs, snapshot, now)
    finalizers = list(run.meta.get("finalizers") or ())
    if run.meta.get("deletionTimestamp"):
        return _deleting(run, finalizers)
    if FINALIZER_SNAPSHOT_CLEANUP not in finalizers:
        run.actions.append(
            Patch(
                run.key,
                {
                    "metadata": {
                        "finalizers": [*finalizers, FINALIZER_SNAPSHOT_CLEANUP],
                        "resourceVersion": str(run.meta.get("resourceVersion") or ""),
                    }
                },
                why="its Jobs are deleted before it goes",
                on_conflict="refresh",
            )
        )
    phase = str((snapshot.get("status") or {}).get("phase") or "")
    if phase in TERMINAL:
        return Plan(actions=tuple(run.actions), reason=f"{phase}: nothing more to do")
    job = obs.commit_job
    if job is not None and not run.ours(job):
        owner = controller_of(job)
        if owner is None or owner.get("kind") != "SandboxSnapshot":
            # Nothing will take it away: say so instead of waiting for ever.
            return run.fail(
                "CommitJobNameTaken",
                f"a Job {commit_job_name(obs.name)} that is not a snapshot's exists; "
                "delete it, or the snapshot, and snapshot again",
            )
        return Plan(
            actions=tuple(run.actions),
            reason=f"waiting for the Job {commit_job_name(obs.name)} of another snapshot to go",
            requeue_after=TAKEN_RECHECK,
        )
    if job is None:
        return _pending(run)
    return _committing(run, job)


def _deleting(run: _Pass, finalizers: list[str]) -> Plan:
    for job in (run.obs.commit_job, run.obs.unpause_job):
        if job is not None and run.ours(job) and not metadata_of(job).get("deletionTimestamp"):
            run.actions.append(
                Delete(
                    ObjectKey("Job", run.obs.namespace, str(metadata_of(job).get("name"))),
                    uid=str(metadata_of(job).get("uid") or "") or None,
                    propagation="Background",
                    why="the snapshot is being deleted (its images stay in the registry)",
                )
            )
    if FINALIZER_SNAPSHOT_CLEANUP in finalizers:
        finalizers.remove(FINALIZER_SNAPSHOT_CLEANUP)
        run.actions.append(
            Patch(
                run.key,
                {
                    "metadata": {
                        "finalizers": finalizers,
                        "resourceVersion": str(run.meta.get("resourceVersion") or ""),
                    }
                },
                why="its Jobs are deleted",
                on_conflict="refresh",
            )
        )
    return Plan(actions=tuple(run.actions), reason="being deleted")


def _pending(run: _Pass) -> Plan:
    obs = run.obs
    settings = obs.settings
    refusal = format_refusal(run.snapshot)
    if refusal is not None:
        return run.fail(refusal.reason, refusal.message)
    if not settings.registry:
        return run.fail(
            "RegistryNotConfigured",
            "no snapshot registry is configured (SANDBUS_SNAPSHOT_REGISTRY)",
        )
    sandbox = obs.sandbox
    sandbox_name = _sandbox_name(run.snapshot)
    if sandbox is None:
        return run.fail(
            "BatchSandboxLookupFailed",
            f"BatchSandbox {sandbox_name!r} not found in namespace {obs.namespace}",
        )
    pod = obs.source
    if pod is None:
        return run.fail(
            "SourcePodNotFound",
            f"BatchSandbox {sandbox_name} has no Running Pod it holds to commit",
        )
    containers = container_names(sandbox, pod)
    if not containers:
        return run.fail(
            "NoContainers", f"neither BatchSandbox {sandbox_name} nor its Pod has containers"
        )
    pod_meta = metadata_of(pod)
    pod_name = str(pod_meta.get("name") or "")
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    tag = image_tag(run.snapshot, sandbox)
    images = [(c, image_uri(settings.registry, sandbox_name, c, tag)) for c in containers]
    job = commit_job(run.snapshot, pod_name, node, images, settings.committer)
    _job_refused(run)
    run.actions.append(Create(job, why=f"commit {', '.join(containers)} of Pod {pod_name}"))
    if settings.events:
        note = f"Created commit Job {commit_job_name(obs.name)} for Pod {pod_name} on {node}"
        run.actions.append(
            Create(
                event_about(
                    run.snapshot,
                    reason="CreatedJob",
                    note=note,
                    type="Normal",
                    now=run.now,
                    controller=CONTROLLER_NAME,
                    action="Committing",
                ),
                why="tell the user",
            )
        )
    return _report_committing(run, pod_name, node, images)


def _job_refused(run: _Pass) -> None:
    """The commit Job's create that the API server refused in the previous pass, or that keeps
    failing, said before the create is tried again (module doc): ``CommitJobFailure`` with the
    server's words, and a Warning Event when it appears."""
    failed = reportable(run.obs.last_error, persists=run.obs.failure_persists)
    job = commit_job_name(run.obs.name)
    if failed is None or failed.verb != "create":
        return
    if failed.target != ObjectKey("Job", run.obs.namespace, job):
        return
    answer = f" ({failed.reason}, {failed.code})" if failed.code is not None else ""
    if failed.refused:
        message = (
            f"the API server refuses the commit Job {job}{answer}: {failed.anonymous()}. Fix "
            "what refuses it (a quota, an admission policy, the committer's settings); it is "
            "created again with backoff"
        )
    else:
        message = (
            f"creating the commit Job {job} keeps failing{answer}: {failed.anonymous()}; it "
            "is created again with backoff"
        )
    status = run.snapshot.get("status") or {}
    before = next((c for c in status.get("conditions") or () if c.get("type") == JOB_FAILURE), None)
    if before is not None and before.get("message") == message and status.get("phase"):
        return
    run.status(
        {
            "phase": "Pending",
            "conditions": [
                before
                if before is not None and before.get("message") == message
                else run.condition(JOB_FAILURE, JOB_FAILURE_REASON, message)
            ],
        },
        why=f"{JOB_FAILURE}: {message}",
    )
    warning = warning_when_raised(
        run.snapshot,
        before,
        condition=JOB_FAILURE,
        reason=JOB_FAILURE_REASON,
        message=message,
        now=run.now,
        controller=CONTROLLER_NAME,
        action="Committing",
    )
    if warning is not None:
        run.actions.append(Create(warning, why="tell the user"))


def _report_committing(run: _Pass, pod: str, node: str, images: Sequence[tuple[str, str]]) -> Plan:
    run.status(
        {
            "phase": "Committing",
            "format": COMMITTED_FORMAT,
            "sourcePodName": pod,
            "sourceNodeName": node,
            "containers": [{"containerName": c, "imageUri": uri} for c, uri in images],
            "conditions": [],
        },
        why=f"committing Pod {pod} on node {node}",
    )
    return Plan(
        actions=tuple(run.actions),
        reason=f"Committing Pod {pod} on node {node} to {', '.join(uri for _, uri in images)}",
        requeue_after=COMMITTING_RECHECK,
    )


def _committing(run: _Pass, job: Json) -> Plan:
    obs = run.obs
    status = run.snapshot.get("status") or {}
    job_name = commit_job_name(obs.name)
    if status.get("phase") != "Committing":
        # The Job exists but the status never said so: take it up where it is.
        target = commit_target(job)
        if target is None:
            return run.fail("CommitJobInvalid", f"the Job {job_name} is not a commit Job")
        pod, node, images = target
        if not (job_succeeded(job) or job_failure(job) is not None):
            return _report_committing(run, pod, node, images)
        status = {
            **status,
            "sourcePodName": pod,
            "sourceNodeName": node,
            "containers": [{"containerName": c, "imageUri": uri} for c, uri in images],
        }
    containers = [dict(c) for c in status.get("containers") or ()]
    if job_succeeded(job):
        committed = committed_images(obs.job_pods)
        if committed is None:
            finished = parse_time((job.get("status") or {}).get("completionTime")) or run.now
            waited = (run.now - finished).total_seconds()
            if waited < obs.settings.digest_grace:
                return Plan(
                    actions=tuple(run.actions),
                    reason=f"the Job {job_name} succeeded; waiting for its Pod's digests",
                    requeue_after=min(1.0, obs.settings.digest_grace - waited),
                )
        for container in containers:
            found = (committed or {}).get(str(container.get("containerName")))
            if found is not None and found.digest:
                container["imageDigest"] = found.digest
        run.status(
            {
                "phase": "Succeed",
                "format": COMMITTED_FORMAT,
                "sourcePodName": status.get("sourcePodName"),
                "sourceNodeName": status.get("sourceNodeName"),
                "containers": containers,
                "conditions": [run.condition("Ready", "SnapshotReady", "Snapshot is ready")],
            },
            why="the commit Job succeeded",
        )
        digests = "with digests" if committed else "without digests (its Pod never said)"
        return Plan(actions=tuple(run.actions), reason=f"Succeed {digests}")
    failure = job_failure(job)
    if failure is None:
        return Plan(
            actions=tuple(run.actions),
            reason=f"the Job {job_name} is running",
            requeue_after=COMMITTING_RECHECK,
        )
    pod = str(status.get("sourcePodName") or "")
    if obs.unpause_job is None and pod:
        names = [str(c.get("containerName")) for c in containers]
        run.actions.append(
            Create(
                unpause_job(
                    run.snapshot,
                    pod,
                    str(status.get("sourceNodeName") or ""),
                    names,
                    obs.settings.committer,
                ),
                why="the failed commit may have left the containers paused",
            )
        )
    run.status(
        {
            "phase": "Failed",
            "format": COMMITTED_FORMAT,
            "sourcePodName": status.get("sourcePodName"),
            "sourceNodeName": status.get("sourceNodeName"),
            "containers": containers,
            "conditions": [run.condition("Failed", "CommitJobFailed", failure)],
        },
        why=f"the commit Job failed: {failure}",
    )
    return Plan(actions=tuple(run.actions), reason=f"Failed CommitJobFailed: {failure}")
