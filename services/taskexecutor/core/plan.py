"""The executor's decisions over its set of tasks (docs/opensandbox.md §5, upstream's
``te/manager/task_manager.go``): which task may be created, what a ``setTasks`` changes, what
a reconcile pass does, which tasks a restarted executor keeps, and how long a stop may take.

- **Admission** (:func:`admission_problem`): a name is taken once, and at most
  :data:`MAX_ACTIVE_TASKS` task is active: Pending or Running and not being deleted. A task
  being deleted, or past its timeout, or ended, does not count, so a controller may replace a
  task in one ``setTasks`` while the old one is still stopping (upstream's rule).
- **Sync** (:func:`plan_sync`): tasks the executor has but the desired list lacks are marked
  for deletion (a soft delete: they are stopped, then removed); desired tasks it does not have
  are created, in the order given, as long as admission allows; a task it has is never updated,
  whatever the desired one says, and one being deleted is not brought back (it is created
  again once removed, by a later ``setTasks``).
- **Reconcile** (:func:`plan_reconcile`, every pass over every task, with its status just
  inspected): a deleting task that ended is removed; one that is still running is stopped,
  unless a stop is already under way; a task past its timeout is stopped and marked as stopped
  for its timeout (:attr:`~.records.TaskRecord.stopped_for_timeout`) before the stop begins;
  a status that changed is persisted. One deviation from upstream: a deleting task that is
  Pending is removed as well. Pending means no supervisor was ever launched (the executor
  writes the ``pid`` file as it launches one), so there is nothing to stop, and upstream's
  rule (remove only Succeeded, Failed or NotFound) would keep it forever.
- **Restart** (:func:`keep_after_restart`): a task persisted as Pending or Running that now
  inspects as Pending, Failed or NotFound is dropped, so the controller, which sends its task
  again on every pass, starts it again (at least once); any other task is kept, among them one
  whose supervisor outlived the executor and still runs.
- **Stop deadline** (:func:`stop_deadline`): the supervisor gives the process ``grace``
  seconds after SIGTERM, then kills it and runs the postStop hook under that hook's own
  timeout; the executor kills the supervisor's whole process group only after all of that
  could have happened, so the postStop hook of a stopped task gets its time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Final

import msgspec

from services.taskexecutor.core.records import REASON_PENDING, State, Status, TaskRecord
from services.taskexecutor.core.state import TERMINAL, container_status
from services.taskexecutor.core.wire import Process, TaskSpec

__all__ = [
    "MAX_ACTIVE_TASKS",
    "SUPERVISOR_MARGIN",
    "UNBOUNDED_HOOK_ALLOWANCE",
    "Step",
    "SyncPlan",
    "admission_problem",
    "is_active",
    "keep_after_restart",
    "marked_for_deletion",
    "new_record",
    "plan_reconcile",
    "plan_sync",
    "state_of",
    "stop_deadline",
]

MAX_ACTIVE_TASKS: Final = 1
SUPERVISOR_MARGIN: Final = 2.0
"""Seconds the supervisor gets, beyond the grace and the postStop hook, to write its files."""
UNBOUNDED_HOOK_ALLOWANCE: Final = 30.0
"""Seconds a postStop hook without a timeout of its own gets during a stop (Kubernetes's
default termination grace): a deletion must end, and an unbounded hook would keep it forever."""


def state_of(record: TaskRecord) -> State:
    return record.status.state if record.status is not None else State.PENDING


def is_active(record: TaskRecord) -> bool:
    """Counts toward :data:`MAX_ACTIVE_TASKS` (upstream's isTaskActive)."""
    return not record.deleting and state_of(record) in (State.PENDING, State.RUNNING)


def _starts_active(spec: TaskSpec) -> bool:
    # A container task is Failed as soon as it exists (see state.container_status).
    return spec.process is not None


def _active_count(tasks: Mapping[str, TaskRecord]) -> int:
    return sum(1 for record in tasks.values() if is_active(record))


def _limit_message(name: str) -> str:
    return (
        f"task {name}: maximum concurrent tasks ({MAX_ACTIVE_TASKS}) reached, "
        "cannot create new task"
    )


def admission_problem(tasks: Mapping[str, TaskRecord], spec: TaskSpec) -> str | None:
    """Why ``spec`` cannot be created next to ``tasks``; None when it can."""
    if spec.name in tasks:
        return f"task {spec.name} already exists"
    if _starts_active(spec) and _active_count(tasks) >= MAX_ACTIVE_TASKS:
        return _limit_message(spec.name)
    return None


def new_record(spec: TaskSpec, now: float) -> TaskRecord:
    """A task as created at ``now``, before its supervisor is launched."""
    record = TaskRecord(spec=spec, created_at=now)
    if spec.process is None:
        return msgspec.structs.replace(record, status=container_status(record))
    pending = Status(state=State.PENDING, reason=REASON_PENDING)
    return msgspec.structs.replace(record, status=pending)


def marked_for_deletion(record: TaskRecord, now: float) -> TaskRecord:
    """The soft delete; a task marked already keeps its first mark."""
    if record.deleting:
        return record
    return msgspec.structs.replace(record, deletion_timestamp=now)


@dataclass(frozen=True)
class SyncPlan:
    """What one ``setTasks`` changes."""

    delete: tuple[str, ...] = ()
    """Names to mark for deletion, first."""
    create: tuple[TaskSpec, ...] = ()
    """Tasks to create, then, in this order."""
    refused: tuple[str, ...] = ()
    """Why each desired task that could not be created was refused."""


def plan_sync(tasks: Mapping[str, TaskRecord], desired: Sequence[TaskSpec]) -> SyncPlan:
    wanted = {spec.name for spec in desired}
    delete = tuple(
        name for name, record in tasks.items() if name not in wanted and not record.deleting
    )
    active = sum(1 for name, record in tasks.items() if is_active(record) and name not in delete)
    create: list[TaskSpec] = []
    refused: list[str] = []
    for spec in desired:
        if spec.name in tasks:
            continue  # never updated
        if _starts_active(spec):
            if active >= MAX_ACTIVE_TASKS:
                refused.append(_limit_message(spec.name))
                continue
            active += 1
        create.append(spec)
    return SyncPlan(delete=delete, create=tuple(create), refused=tuple(refused))


@dataclass(frozen=True)
class Step:
    """What a reconcile pass does with one task: persist, then stop or remove."""

    name: str
    record: TaskRecord | None = None
    """The task as it is now, to persist and keep; None: unchanged."""
    stop: bool = False
    """Begin stopping it (in the background)."""
    remove: bool = False
    """Forget it and delete its directory."""


def plan_reconcile(
    tasks: Mapping[str, TaskRecord],
    statuses: Mapping[str, Status],
    stopping: Set[str],
) -> list[Step]:
    """One pass over ``tasks``, each with its status just inspected (a task missing from
    ``statuses`` is left alone); ``stopping`` names the tasks a stop is under way for."""
    steps: list[Step] = []
    for name, record in tasks.items():
        status = statuses.get(name)
        if status is None:
            continue
        updated = record
        if record.status != status:
            updated = msgspec.structs.replace(record, status=status)
        stop = False
        if record.deleting:
            if status.state in TERMINAL or status.state is State.PENDING:
                steps.append(Step(name, remove=True))
                continue
            stop = name not in stopping
        elif status.state is State.TIMEOUT:
            stop = name not in stopping
            if not updated.stopped_for_timeout:
                updated = msgspec.structs.replace(updated, stopped_for_timeout=True)
        if updated is not record or stop:
            steps.append(Step(name, record=updated if updated is not record else None, stop=stop))
    return steps


def keep_after_restart(record: TaskRecord, status: Status) -> bool:
    """Whether a restarted executor keeps ``record``, which now inspects as ``status``."""
    was = state_of(record)
    now = status.state
    return not (
        was in (State.PENDING, State.RUNNING)
        and now in (State.PENDING, State.FAILED, State.NOT_FOUND)
    )


def stop_deadline(process: Process | None, grace: float) -> float:
    """Seconds from SIGTERM to the supervisor until its process group is killed."""
    lifecycle = process.lifecycle if process is not None else None
    post_stop = lifecycle.post_stop if lifecycle is not None else None
    if post_stop is None:
        allowance = 0.0
    elif post_stop.timeout_seconds > 0:
        allowance = float(post_stop.timeout_seconds)
    else:
        allowance = UNBOUNDED_HOOK_ALLOWANCE
    return grace + allowance + SUPERVISOR_MARGIN
