"""The Job controller, simulated: a Job runs to completion, with a Pod only when it reports one.

Upstream's Job controller creates Pods and counts how they end. Here a pluggable async action
(``KubeletConfig.job_action``) receives the Job and decides its :class:`JobOutcome`, which lets a
test script what a Job does without simulating its Pods. The default action
(:func:`default_job_action`, deciding with :func:`decide_job`) succeeds after ``job_delay``, or
fails if the Job or its Pod template is given a failing mode (``crash``, ``exit-1`` or
``image-pull``, see :mod:`.config`). An image-committer Job (OpenSandbox's snapshot commit or
unpause) is decided by :mod:`.committer` instead, against the source Pod the shell's cache shows
(the action is handed a lookup), because its result is read off its Pod, not off the Job.

:func:`plan_job` writes what the status shows while that happens: first ``startTime`` and
``active: 1``, then launches the action once per Job uid (:class:`JobMemory` remembers that it
did, and the outcome when the action returns), and finally ``succeeded`` (``completions``) with
``completionTime`` and the ``Complete`` condition, or ``failed`` (``backoffLimit`` + 1) with the
``Failed`` condition, reason BackoffLimitExceeded. An outcome with a ``termination_message``
has the Job's Pod created first, already finished (:func:`job_pod`, status from
:func:`~.statuses.job_pod_status`): named ``<job>-<5 characters from the Job's uid>``, labelled
``job-name`` as upstream labels them and controlled by the Job, its containers terminated with
exit code 0 or 1 and that message. The kubelet leaves Pods controlled by a Job alone
(:func:`controlled_by_job`), as no container of theirs runs: this module writes all they show.
Jobs without such an outcome run without Pods. A finished, suspended or deleting Job is left
alone. The shell runs the action as a task of its own; one that raises makes a failed Job, not
a dead controller.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from api.objects import Json, controller_of, controller_reference
from devtools.cluster.controllers.kubelet.actions import (
    Action,
    CreatePod,
    Instant,
    LaunchJob,
    PatchStatus,
)
from devtools.cluster.controllers.kubelet.committer import committer_call, run_committer
from devtools.cluster.controllers.kubelet.config import KubeletConfig, failure_mode
from devtools.cluster.controllers.kubelet.statuses import job_pod_status

__all__ = [
    "JobAction",
    "JobMemory",
    "JobOutcome",
    "PodLookup",
    "controlled_by_job",
    "decide_job",
    "default_job_action",
    "job_pod",
    "job_pod_name",
    "plan_job",
]


_FAILING_MODES = frozenset({"crash", "exit-1", "image-pull"})
# Upstream's alphabet for generated name suffixes: lowercase, no vowels, no look-alikes.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclass(frozen=True)
class JobOutcome:
    """What a Job action decided."""

    succeeded: bool
    message: str = ""  # the Complete/Failed condition's; empty: upstream's default message
    # What the Job's Pod wrote to its termination log. Set (even to ""), the Job gets its Pod,
    # finished with exit code 0 or 1; None, the Job runs without a Pod.
    termination_message: str | None = None


JobAction = Callable[[Json], Awaitable["JobOutcome | bool"]]
PodLookup = Callable[[str, str], "Json | None"]  # (namespace, name) -> the cached Pod or None


@dataclass(frozen=True)
class JobMemory:
    launched: bool = False
    outcome: JobOutcome | None = None


def _job_finished(job: Json) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions
    )


def plan_job(job: Json, memory: JobMemory, at: Instant) -> tuple[tuple[Action, ...], JobMemory]:
    """What the Job controller does about ``job`` now."""
    metadata = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    rv = str(metadata.get("resourceVersion") or "")
    if _job_finished(job) or metadata.get("deletionTimestamp") or spec.get("suspend"):
        return (), memory
    if not status.get("startTime"):
        started: Json = {"startTime": at.wall, "active": 1, "ready": 0, "terminating": 0}
        started["uncountedTerminatedPods"] = {}
        return (PatchStatus(started, rv),), memory
    if memory.outcome is None:
        if memory.launched:
            return (), memory
        return (LaunchJob(),), replace(memory, launched=True)
    outcome = memory.outcome
    pod_writes: tuple[Action, ...] = ()
    if outcome.termination_message is not None:
        # The Pod first: whoever sees the Job finished must find what its Pod reported.
        pod = job_pod(job)
        exit_code = 0 if outcome.succeeded else 1
        began = str(status.get("startTime") or at.wall)
        pod_status = job_pod_status(pod, exit_code, outcome.termination_message, began, at.wall)
        pod_writes = (CreatePod(pod, pod_status),)
    completions = int(spec.get("completions") or 1)
    conditions = list(status.get("conditions") or [])
    if outcome.succeeded:
        final: Json = {
            "active": 0,
            "ready": 0,
            "succeeded": completions,
            "completionTime": at.wall,
            "conditions": [
                *conditions,
                {
                    "type": "Complete",
                    "status": "True",
                    "reason": "CompletionsReached",
                    "message": outcome.message or "Reached expected number of succeeded pods",
                    "lastProbeTime": at.wall,
                    "lastTransitionTime": at.wall,
                },
            ],
        }
    else:
        backoff_limit = spec.get("backoffLimit")
        final = {
            "active": 0,
            "ready": 0,
            "failed": int(6 if backoff_limit is None else backoff_limit) + 1,
            "conditions": [
                *conditions,
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": outcome.message or "Job has reached the specified backoff limit",
                    "lastProbeTime": at.wall,
                    "lastTransitionTime": at.wall,
                },
            ],
        }
    return (*pod_writes, PatchStatus(final, rv)), memory


def job_pod_name(job: Json) -> str:
    """``<job>-<5 characters>``, as upstream's generateName makes it, the characters drawn from
    the Job's uid so that every pass plans the same Pod."""
    metadata = job.get("metadata") or {}
    base = f"{metadata.get('name') or ''}-"[:58]  # upstream's cap: 63 with the suffix
    drawn = hashlib.sha256(str(metadata.get("uid") or "").encode()).digest()
    return base + "".join(_NAME_ALPHABET[byte % len(_NAME_ALPHABET)] for byte in drawn[:5])


def job_pod(job: Json) -> Json:
    """The Pod the Job controller creates from the Job's template (spec as written, nodeName
    kept), labelled and owned the way upstream's are."""
    metadata = job.get("metadata") or {}
    template = (job.get("spec") or {}).get("template") or {}
    template_metadata = template.get("metadata") or {}
    name, uid = str(metadata.get("name") or ""), str(metadata.get("uid") or "")
    labels = {
        **(template_metadata.get("labels") or {}),
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }
    pod_metadata: Json = {
        "name": job_pod_name(job),
        "namespace": metadata.get("namespace") or "",
        "labels": labels,
        "ownerReferences": [controller_reference("batch/v1", "Job", name, uid)],
    }
    if template_metadata.get("annotations"):
        pod_metadata["annotations"] = copy.deepcopy(template_metadata["annotations"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod_metadata,
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def controlled_by_job(pod: Json) -> bool:
    """The Pod is a Job's (its controller reference says so): the Job simulation writes it."""
    ref = controller_of(pod)
    return (
        ref is not None
        and ref.get("kind") == "Job"
        and str(ref.get("apiVersion") or "").startswith("batch/")
    )


def _no_pods(namespace: str, name: str) -> Json | None:
    return None


def decide_job(job: Json, config: KubeletConfig, find_pod: PodLookup = _no_pods) -> JobOutcome:
    """The default action's verdict once the Job has run: an image-committer Job as
    :mod:`.committer` says (with a Pod), any other by its failure mode (without one)."""
    template = ((job.get("spec") or {}).get("template")) or {}
    modes = {failure_mode(job, config), failure_mode(template, config)}
    failing = sorted(mode for mode in modes if mode in _FAILING_MODES)
    try:
        call = committer_call(job)
    except ValueError as usage:  # the committer refuses its arguments and exits 1
        return JobOutcome(False, str(usage), termination_message=str(usage))
    if call is None:
        return JobOutcome(not failing)
    if failing:
        # The container itself is failed, as for any Job; its Pod says so.
        return JobOutcome(False, termination_message=f"devcluster: injected failure {failing[0]}")
    ended = run_committer(call, find_pod(call.namespace, call.pod))
    if ended.succeeded:
        return JobOutcome(True, termination_message=ended.message)
    # The Job's condition repeats the committer's message, so a failure reads off the Job too.
    return JobOutcome(False, ended.message, termination_message=ended.message)


def default_job_action(config: KubeletConfig, find_pod: PodLookup = _no_pods) -> JobAction:
    """Run for ``job_delay``, then decide with :func:`decide_job`; ``find_pod`` shows the
    Pods (the shell passes its cache), which an image-committer Job commits from."""

    async def run(job: Json) -> JobOutcome:
        await asyncio.sleep(config.scaled(config.job_delay))
        # Looked up after the delay: the committer finds the Pod as it is when it runs.
        return decide_job(job, config, find_pod)

    return run
