"""The Job controller, simulated: a Job runs to completion without Pods.

Upstream's Job controller creates Pods and counts how they end. Here a pluggable async action
(``KubeletConfig.job_action``) receives the Job and decides its :class:`JobOutcome`, which lets a
test script what a Job does without simulating its Pods. The default action succeeds after
``job_delay``, or fails if the Job or its Pod template is given a failing mode (``crash``,
``exit-1`` or ``image-pull``, see :mod:`.config`).

:func:`plan_job` writes what the status shows while that happens: first ``startTime`` and
``active: 1``, then launches the action once per Job uid (:class:`JobMemory` remembers that it
did, and the outcome when the action returns), and finally ``succeeded`` (``completions``) with
``completionTime`` and the ``Complete`` condition, or ``failed`` (``backoffLimit`` + 1) with the
``Failed`` condition, reason BackoffLimitExceeded. A finished, suspended or deleting Job is left
alone. The shell runs the action as a task of its own; one that raises makes a failed Job, not
a dead controller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from services.devcluster.kubelet.actions import Action, Instant, LaunchJob, PatchStatus
from services.devcluster.kubelet.config import KubeletConfig, failure_mode

__all__ = ["JobAction", "JobMemory", "JobOutcome", "default_job_action", "plan_job"]

Json = dict[str, Any]


@dataclass(frozen=True)
class JobOutcome:
    """What a Job action decided."""

    succeeded: bool
    message: str = ""


JobAction = Callable[[Json], Awaitable["JobOutcome | bool"]]


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
    completions = int(spec.get("completions") or 1)
    conditions = list(status.get("conditions") or [])
    if memory.outcome.succeeded:
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
                    "message": memory.outcome.message
                    or "Reached expected number of succeeded pods",
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
                    "message": memory.outcome.message
                    or "Job has reached the specified backoff limit",
                    "lastProbeTime": at.wall,
                    "lastTransitionTime": at.wall,
                },
            ],
        }
    return (PatchStatus(final, rv),), memory


def default_job_action(config: KubeletConfig) -> JobAction:
    """Succeed after ``job_delay``; fail if the Job or its template is annotated to fail."""

    async def run(job: Json) -> JobOutcome:
        await asyncio.sleep(config.scaled(config.job_delay))
        template = ((job.get("spec") or {}).get("template")) or {}
        modes = {failure_mode(job, config), failure_mode(template, config)}
        if modes & {"crash", "exit-1", "image-pull"}:
            return JobOutcome(False)
        return JobOutcome(True)

    return run
