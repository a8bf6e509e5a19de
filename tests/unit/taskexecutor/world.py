"""Builders for the task executor's core tests: tasks as the wire decodes them, records as the
executor keeps them, and observations as the shell reads them from a task's directory.

Times are seconds since the epoch from :data:`T0`; ``at(5)`` is five seconds later.
"""

from __future__ import annotations

from typing import Any

import msgspec

from services.taskexecutor.core.records import (
    LifecycleRecord,
    State,
    Status,
    StepRecord,
    TaskRecord,
)
from services.taskexecutor.core.state import Observation
from services.taskexecutor.core.wire import (
    ExecAction,
    Lifecycle,
    LifecycleHandler,
    Process,
    TaskSpec,
)

T0 = 1_780_000_000.0
PID = 4242


def at(seconds: float) -> float:
    return T0 + seconds


def hook(*command: str, timeout: int = 0) -> LifecycleHandler:
    return LifecycleHandler(exec=ExecAction(command=list(command)), timeout_seconds=timeout)


def spec(
    name: str = "bs-0",
    *command: str,
    timeout: int = 0,
    pre_start: LifecycleHandler | None = None,
    post_stop: LifecycleHandler | None = None,
    container: bool = False,
    **process: Any,
) -> TaskSpec:
    """A process task running ``command`` (``sleep 30`` by default); ``container=True``: a
    task without a process, with a Pod template."""
    if container:
        return TaskSpec(name=name, pod_template_spec={"spec": {"containers": []}})
    lifecycle = None
    if pre_start is not None or post_stop is not None:
        lifecycle = Lifecycle(pre_start=pre_start, post_stop=post_stop)
    return TaskSpec(
        name=name,
        process=Process(
            command=list(command or ("sleep", "30")),
            timeout_seconds=timeout,
            lifecycle=lifecycle,
            **process,
        ),
    )


def record(
    task: TaskSpec | None = None,
    state: State | None = State.RUNNING,
    *,
    deleting: bool = False,
    stopped_for_timeout: bool = False,
    **status: Any,
) -> TaskRecord:
    """A task as kept, last inspected in ``state`` (None: never inspected)."""
    return TaskRecord(
        spec=task or spec(),
        created_at=T0,
        deletion_timestamp=at(1) if deleting else None,
        stopped_for_timeout=stopped_for_timeout,
        status=Status(state=state, **status) if state is not None else None,
    )


def table(*records: TaskRecord) -> dict[str, TaskRecord]:
    return {r.name: r for r in records}


def status(state: State, **fields: Any) -> Status:
    return Status(state=state, **fields)


def observed(
    *,
    pid: bool = True,
    alive: bool = True,
    exit: str | None = None,
    present: bool = True,
    lifecycle: LifecycleRecord | None = None,
) -> Observation:
    """A task directory: started at T0 (the pid file's mtime); ended at +3 s when ``exit``."""
    return Observation(
        present=present,
        exit_text=exit,
        exit_at=at(3) if exit is not None else None,
        pid=PID if pid else None,
        pid_at=T0 if pid else None,
        alive=alive and pid and exit is None,
        lifecycle=lifecycle,
    )


def step(exit_code: int | None, reason: str = "", message: str = "", **fields: Any) -> StepRecord:
    return StepRecord(
        started_at=fields.pop("started_at", T0),
        finished_at=fields.pop("finished_at", at(1) if exit_code is not None else None),
        exit_code=exit_code,
        reason=reason,
        message=message,
        **fields,
    )


def last_status(task: TaskRecord) -> Status:
    assert task.status is not None
    return task.status


def with_status(task: TaskRecord, new: Status) -> TaskRecord:
    return msgspec.structs.replace(task, status=new)
