"""A task as the routes answer it: :func:`render` (docs/opensandbox.md §5 "API rendering",
upstream's ``te/server/handler.go`` convertInternalToAPITask).

``processStatus`` (process tasks only) is one container-like state:

- Timeout: ``terminated`` with exit code 137, reason ``TaskTimeout`` and ``finishedAt`` now
  (upstream's rendering: the task is being stopped and a controller may count it failed);
- Succeeded and Failed: ``terminated`` with the code, signal, reason and message inspected;
- Running: ``running`` since the task started;
- Pending and NotFound: ``waiting`` with the reason.

``podStatus`` is sent for a task with a ``podTemplateSpec`` (as upstream does) and for a
container task, which is how a controller learns that one failed: upstream's reads
``processStatus`` first and ``podStatus`` only without it, and a container task has no process
to report. Its phase follows the state (a task past its timeout is ``Unknown``, as upstream's
switch leaves it), with the Ready and ContainersReady conditions True while it runs.

``lifecycleStatus`` is this executor's addition: each hook that started, with its exit code
(absent while it runs), reason, message and times. Upstream's Go types have no such field and
its decoder ignores it; sandbus's controller reads it.

Times are RFC 3339 in UTC to the second, as Go's ``metav1.Time`` marshals them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from services.taskexecutor.core.records import (
    REASON_PENDING,
    LifecycleRecord,
    State,
    Status,
    StepRecord,
    TaskRecord,
)
from services.taskexecutor.core.state import KILLED_EXIT_CODE
from services.taskexecutor.core.wire import (
    HookStatus,
    LifecycleStatus,
    PodCondition,
    PodStatus,
    ProcessStatus,
    Running,
    TaskReport,
    Terminated,
    Waiting,
)

__all__ = ["render", "rfc3339"]

_PHASES: Final = {
    State.PENDING: "Pending",
    State.RUNNING: "Running",
    State.SUCCEEDED: "Succeeded",
    State.FAILED: "Failed",
}


def rfc3339(moment: float | None) -> str | None:
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _process_status(status: Status, now: float) -> ProcessStatus:
    state = status.state
    if state in (State.TIMEOUT, State.SUCCEEDED, State.FAILED):
        code = status.exit_code
        if code is None:  # not written by inspect for these states; never report a failure as 0
            code = 0 if state is State.SUCCEEDED else KILLED_EXIT_CODE
        finished = now if state is State.TIMEOUT else status.finished_at
        return ProcessStatus(
            terminated=Terminated(
                exit_code=code,
                signal=status.signal,
                reason=status.reason,
                message=status.message,
                started_at=rfc3339(status.started_at),
                finished_at=rfc3339(finished),
            )
        )
    if state is State.RUNNING:
        return ProcessStatus(running=Running(started_at=rfc3339(status.started_at)))
    return ProcessStatus(waiting=Waiting(reason=status.reason, message=status.message))


def _pod_status(status: Status, now: float) -> PodStatus:
    ready = "True" if status.state is State.RUNNING else "False"
    moments = [m for m in (status.started_at, status.finished_at) if m is not None]
    changed = rfc3339(max(moments) if moments else now)
    failed = status.state is State.FAILED
    return PodStatus(
        phase=_PHASES.get(status.state, "Unknown"),
        reason=status.reason if failed else "",
        message=status.message if failed else "",
        conditions=[
            PodCondition(type="Ready", status=ready, last_transition_time=changed),
            PodCondition(type="ContainersReady", status=ready, last_transition_time=changed),
        ],
    )


def _hook(step: StepRecord | None) -> HookStatus | None:
    if step is None:
        return None
    return HookStatus(
        exit_code=step.exit_code,
        reason=step.reason,
        message=step.message,
        started_at=rfc3339(step.started_at),
        finished_at=rfc3339(step.finished_at),
    )


def _lifecycle_status(lifecycle: LifecycleRecord | None) -> LifecycleStatus | None:
    if lifecycle is None or (lifecycle.pre_start is None and lifecycle.post_stop is None):
        return None
    return LifecycleStatus(
        pre_start=_hook(lifecycle.pre_start), post_stop=_hook(lifecycle.post_stop)
    )


def render(record: TaskRecord, now: float) -> TaskReport:
    """The task as a route answers it, from its last inspected status (``now`` dates a
    Timeout's ``finishedAt``)."""
    spec = record.spec
    status = record.status or Status(state=State.PENDING, reason=REASON_PENDING)
    with_pod = spec.pod_template_spec is not None or spec.process is None
    return TaskReport(
        name=spec.name,
        process=spec.process,
        pod_template_spec=spec.pod_template_spec,
        process_status=_process_status(status, now) if spec.process is not None else None,
        pod_status=_pod_status(status, now) if with_pod else None,
        lifecycle_status=_lifecycle_status(status.lifecycle),
    )
