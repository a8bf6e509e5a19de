"""The tasks of a BatchSandbox (docs/opensandbox.md §3.5, §5, and the traps of §9.23, §9.25).

With a ``taskTemplate``, every replica ``i`` runs one task ``<name>-<i>``: the template, with
``shardTaskPatches[i]`` applied as a JSON merge patch whose lists replace (``env`` is replaced,
not merged), and ``timeoutSeconds`` always the base template's. A task is given to a Pod that
has an IP and no task, in the sandbox's Pod order, and sent to the task executor in that Pod
(``POST <podIP>:5758/setTasks``) until it ends; its state is read back from the executor
(``GET /getTasks``). The counters of the status follow: a task with no Pod yet is
``taskPending``; one whose executor runs it ``taskRunning``; exit 0 ``taskSucceed``; any other
end (a timeout, a crash) ``taskFailed``; an executor that does not answer, or does not say,
``taskUnknown``. Under ``taskResourcePolicyWhenCompleted: Release`` a finished task is stopped
(``setTasks []``) and, once its executor no longer lists it, its Pod is given back through
``alloc-release`` (pooled sandboxes). A sandbox being deleted stops every task the same way and
keeps its ``task-cleanup`` finalizer until all are stopped (or their Pods are gone), so the
tasks' postStop hooks run before the Pods go.

Where this differs from upstream, on purpose:

- Which Pod runs which task, and each task's last known state, are the sandbox's memo, kept on
  the bus (upstream keeps them in the controller's memory and asks every executor again after
  a restart): a restarted worker neither forgets a finished task nor runs it a second time on
  another Pod.
- A task is read from its executor by name (upstream takes the first task the executor lists).
- A finished task is not sent again; a task whose executor lost it (restarted without it) is.
- A task whose Pod is gone before it finished goes back to the queue and runs on the next free
  Pod; one that finished keeps its result.

The executors are reached by the :class:`SyncTasks` action, whose executor (in the claim
worker's shell) stores what each executor answered as a :class:`TaskReport`; the planner reads
the reports of the sandbox and looks again every :data:`PROBE_INTERVAL` while a task is not
done.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

import msgspec

from api.objects import Json, metadata_of
from api.patching.merge import apply_merge_patch
from events.envelope import ObjectKey

__all__ = [
    "EXECUTOR_PORT",
    "PROBE_INTERVAL",
    "SyncTasks",
    "TaskMemo",
    "TaskRecord",
    "TaskReport",
    "TaskStep",
    "TaskTemplateError",
    "build_tasks",
    "plan_tasks",
    "tasks_running",
]

EXECUTOR_PORT: Final = 5758
PROBE_INTERVAL: Final = 1.0
"""Seconds between looks at an executor whose task is not done (upstream: 3 s)."""

TaskState = Literal["Pending", "Running", "Succeed", "Failed", "Unknown"]
_DONE: Final = frozenset({"Succeed", "Failed"})


class TaskRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One task as the sandbox remembers it."""

    pod: str = ""
    """The Pod it was given to; ``""``: none yet."""
    state: TaskState = "Pending"
    message: str = ""
    """Why it failed, or what its executor said last."""
    releasing: bool = False
    """It is being stopped (finished under ``Release``, or the sandbox is being deleted)."""
    released: bool = False
    """Its executor no longer lists it: the Pod is free of it."""


class TaskMemo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The memo of a BatchSandbox with tasks: each task by name."""

    tasks: dict[str, TaskRecord] = msgspec.field(default_factory=dict)


class TaskReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one Pod's executor answered, and when."""

    pod: str
    ip: str
    at: datetime
    reachable: bool
    tasks: tuple[Json, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class SyncTasks:
    """Send ``desired`` to the task executor of Pod ``pod`` at ``ip`` (``POST /setTasks``;
    None: only read its tasks, ``GET /getTasks``) and keep its answer as the Pod's
    :class:`TaskReport` for the BatchSandbox ``target``."""

    target: ObjectKey
    pod: str
    ip: str
    desired: tuple[Json, ...] | None = None
    why: str = ""
    step: str = ""
    verb = "sync-tasks"


class TaskTemplateError(ValueError):
    """The task template or a shard patch cannot make a task."""


def tasks_running(memo: TaskMemo | None) -> bool:
    """Some task holds a Pod still (not stopped and given back)."""
    return memo is not None and any(r.pod and not r.released for r in memo.tasks.values())


def _name(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("name") or "")


def build_tasks(sandbox: Mapping[str, Any]) -> list[Json]:
    """The task of every replica, as the executor's wire type has it; none without a
    ``taskTemplate``. Raises :class:`TaskTemplateError`."""
    spec = sandbox.get("spec") or {}
    template = spec.get("taskTemplate")
    if template is None:
        return []
    if not isinstance(template, dict):
        raise TaskTemplateError("spec.taskTemplate is not an object")
    replicas = spec.get("replicas")
    count = replicas if isinstance(replicas, int) and replicas >= 0 else 1
    patches = spec.get("shardTaskPatches") or []
    base = template.get("spec") or {}
    if not isinstance(base, dict):
        raise TaskTemplateError("spec.taskTemplate.spec is not an object")
    timeout = base.get("timeoutSeconds")
    tasks = []
    for index in range(count):
        task_spec: Any = base
        if isinstance(patches, list) and index < len(patches) and patches[index] is not None:
            patch = patches[index]
            if not isinstance(patch, dict):
                raise TaskTemplateError(f"shardTaskPatches[{index}] is not an object")
            task_spec = apply_merge_patch({"spec": base}, patch).get("spec") or {}
            if not isinstance(task_spec, dict):
                raise TaskTemplateError(f"shardTaskPatches[{index}] makes spec no object")
        task: Json = {"name": f"{_name(sandbox)}-{index}"}
        process = task_spec.get("process")
        if process is not None:
            if not isinstance(process, dict) or not process.get("command"):
                raise TaskTemplateError(f"task {index}: process.command is missing")
            wire = {
                k: copy.deepcopy(process[k])
                for k in ("command", "args", "env", "workingDir", "lifecycle")
                if process.get(k) is not None
            }
            if timeout is not None:
                wire["timeoutSeconds"] = timeout
            task["process"] = wire
        tasks.append(task)
    return tasks


def _reported_state(report: TaskReport, task: str) -> tuple[TaskState | None, str]:
    """The task's state as its executor reports it; None when the executor does not list it."""
    if not report.reachable:
        return "Unknown", report.error or "the task executor did not answer"
    found = next((t for t in report.tasks if t.get("name") == task), None)
    if found is None:
        return None, ""
    status = found.get("processStatus") or {}
    if status.get("running") is not None:
        return "Running", ""
    ended = status.get("terminated")
    if isinstance(ended, dict):
        code = ended.get("exitCode")
        if code == 0:
            return "Succeed", ""
        reason = str(ended.get("reason") or "")
        message = str(ended.get("message") or "")
        said = ": ".join(part for part in (reason, message) if part)
        return "Failed", f"exit {code}" + (f" ({said})" if said else "")
    waiting = status.get("waiting")
    if isinstance(waiting, dict):
        return "Unknown", str(waiting.get("message") or waiting.get("reason") or "")
    return "Unknown", ""


@dataclass
class TaskStep:
    """What the tasks of one pass decide."""

    memo: TaskMemo | None = None
    actions: list[SyncTasks] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None
    release: list[str] = field(default_factory=list)
    """Pods whose task is done and released: ask the Pool to take them back."""
    cleaned: bool = True
    """Deleting: every task is stopped (the task-cleanup finalizer may go)."""
    requeue: float | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None


def _observed(
    record: TaskRecord,
    name: str,
    live: Mapping[str, Json],
    reports: Mapping[str, TaskReport],
    deleting: bool,
    step: TaskStep,
) -> TaskRecord:
    """``record`` brought up to date with its Pod and what its executor said last."""
    replace = msgspec.structs.replace
    if not record.pod or record.released:
        return record
    pod = live.get(record.pod)
    if pod is None:
        if record.state in _DONE or record.releasing or deleting:
            return replace(record, released=True)
        step.notes.append(f"task {name} lost its Pod {record.pod}; it runs again")
        return TaskRecord()
    report = reports.get(record.pod)
    if report is None or report.ip != (pod.get("status") or {}).get("podIP"):
        return record
    state, message = _reported_state(report, name)
    if record.releasing and (state is None or not report.reachable):
        # Stopped; or its executor is gone, and its task with it (upstream counts an executor
        # that does not answer as one with no task).
        return replace(record, released=True)
    if state is None:
        if record.state in _DONE:
            return record
        return replace(record, state="Unknown", message="its executor does not list it")
    if record.state in _DONE and state not in _DONE:
        return record  # a result is kept; an executor that restarted may not know it
    return replace(record, state=state, message=message)


def plan_tasks(
    sandbox: Mapping[str, Any],
    pods: Sequence[Json],
    memo: TaskMemo | None,
    reports: Mapping[str, TaskReport],
    now: datetime,
    *,
    stop: bool = False,
) -> TaskStep:
    """The tasks' part of a pass: ``pods`` are the sandbox's Pods in its order, ``reports``
    what their executors last said, by Pod name. ``stop``: stop every task, as a deletion
    does (a pause, before its snapshot)."""
    target = ObjectKey(
        "BatchSandbox", str(metadata_of(sandbox).get("namespace") or ""), _name(sandbox)
    )
    try:
        tasks = build_tasks(sandbox)
    except TaskTemplateError as error:
        return TaskStep(memo=memo, error=str(error))
    if not tasks and memo is None:
        return TaskStep()
    deleting = stop or bool(metadata_of(sandbox).get("deletionTimestamp"))
    release_done = (sandbox.get("spec") or {}).get("taskResourcePolicyWhenCompleted") == "Release"
    records = dict((memo or TaskMemo()).tasks)
    live = {
        _name(p): p
        for p in pods
        if not metadata_of(p).get("deletionTimestamp") and (p.get("status") or {}).get("podIP")
    }
    step = TaskStep()
    for task in tasks:
        name = task["name"]
        record = _observed(records.get(name, TaskRecord()), name, live, reports, deleting, step)
        if deleting and record.pod and not record.released:
            record = msgspec.structs.replace(record, releasing=True)
        if release_done and record.state in _DONE and record.pod and not record.releasing:
            record = msgspec.structs.replace(record, releasing=True)
        records[name] = record
    # Give tasks without a Pod to free Pods, in the sandbox's order.
    if not deleting:
        busy = {r.pod for r in records.values() if r.pod and not r.released}
        free = [name for name in live if name not in busy]
        for task in tasks:
            record = records[task["name"]]
            if record.pod or not free:
                continue
            records[task["name"]] = TaskRecord(pod=free.pop(0))
    # Talk to the executors whose tasks are not done.
    by_name = {t["name"]: t for t in tasks}
    for name, record in sorted(records.items()):
        if not record.pod or record.released or record.pod not in live:
            continue
        if record.state in _DONE and not record.releasing:
            continue
        step.requeue = PROBE_INTERVAL
        report = reports.get(record.pod)
        if report is not None and (now - report.at).total_seconds() < PROBE_INTERVAL:
            continue
        desired: tuple[Json, ...] = ()
        if not record.releasing and name in by_name:
            desired = (by_name[name],)
        ip = str((live[record.pod].get("status") or {}).get("podIP"))
        why = f"stop task {name}" if not desired else f"run task {name}"
        step.actions.append(SyncTasks(target, record.pod, ip, desired, why=why))
    # The counters, over the tasks the spec has.
    counts = {
        "taskRunning": 0,
        "taskSucceed": 0,
        "taskFailed": 0,
        "taskUnknown": 0,
        "taskPending": 0,
    }
    for task in tasks:
        record = records[task["name"]]
        if not record.pod:
            counts["taskPending"] += 1
        elif record.state == "Running":
            counts["taskRunning"] += 1
        elif record.state == "Succeed":
            counts["taskSucceed"] += 1
        elif record.state == "Failed":
            counts["taskFailed"] += 1
            step.last_error = f"task {task['name']} failed: {record.message}"
        else:
            counts["taskUnknown"] += 1
    step.counters = counts
    if release_done and not deleting:
        step.release = sorted(
            r.pod for r in records.values() if r.released and r.pod and r.state in _DONE
        )
    step.cleaned = all(r.released or not r.pod for r in records.values())
    step.notes += _changes((memo or TaskMemo()).tasks, records)
    step.memo = TaskMemo(tasks=records)
    return step


def _changes(before: Mapping[str, TaskRecord], after: Mapping[str, TaskRecord]) -> list[str]:
    """What ``sandbus explain`` says of the tasks: each assignment and change of state."""
    said: list[str] = []
    for name, record in sorted(after.items()):
        old = before.get(name, TaskRecord())
        if record.pod and record.pod != old.pod:
            said.append(f"task {name} given to Pod {record.pod}")
        if record.state != old.state:
            why = f" ({record.message})" if record.message else ""
            said.append(f"task {name}: {old.state} -> {record.state}{why}")
        if record.released and not old.released:
            said.append(f"task {name} stopped; Pod {record.pod} free of it")
    if len(said) > 12:
        said = [*said[:12], f"and {len(said) - 12} more task changes"]
    return said
