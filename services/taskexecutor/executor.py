"""The executor's tasks in memory, and what changes them: :class:`TaskExecutor`.

The shell around :mod:`.core.plan`: it holds every task's :class:`~.core.records.TaskRecord`
(the data dir holds the same, :mod:`.store`), and does what the plan decides, under one lock
taken by the HTTP handlers' threads and by the reconcile loop alike:

- ``create`` / ``sync`` / ``delete`` (the routes): admission and the sync diff are the plan's;
  a created task's directory and ``task.json`` are written, then its supervisor launched and
  its pid written, then it is inspected once, so the answer already says Running. A launch
  that fails removes the task again.
- ``reconcile`` (every ``reconcile_interval``): inspect every task (:func:`.core.state.inspect`
  over what the directory and the process table show), then persist, stop or remove as
  :func:`.core.plan.plan_reconcile` says. A stop runs in a thread of its own (SIGTERM, wait,
  SIGKILL, :meth:`.processes.Supervisors.stop`), so a slow one holds up neither the loop nor
  the routes; the tasks being stopped are remembered so that a stop is not begun twice.
- ``recover`` (once, before serving): reload every task from the data dir, inspect it, and keep
  or drop it as :func:`.core.plan.keep_after_restart` says; a dropped task's directory is
  removed, so a controller that sends it again gets a fresh start.

The routes answer from the status the last inspection found (at most one interval old), as
upstream's do.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from services.taskexecutor.core.plan import (
    Step,
    admission_problem,
    keep_after_restart,
    marked_for_deletion,
    new_record,
    plan_reconcile,
    plan_sync,
    stop_deadline,
)
from services.taskexecutor.core.records import Status, TaskRecord
from services.taskexecutor.core.render import render
from services.taskexecutor.core.state import inspect
from services.taskexecutor.core.wire import TaskReport, TaskSpec
from services.taskexecutor.processes import Supervisors
from services.taskexecutor.store import DataDir

__all__ = ["Refused", "SyncResult", "TaskExecutor"]

log = logging.getLogger(__name__)


class Refused(Exception):
    """A task that cannot be created (its name is taken, or a task is active already)."""


@dataclass(frozen=True)
class SyncResult:
    tasks: list[TaskReport]
    refused: tuple[str, ...]


class TaskExecutor:
    def __init__(
        self,
        data_dir: Path,
        *,
        stop_grace: float = 10.0,
        clock: Callable[[], float] = time.time,
        supervisors: Supervisors | None = None,  # None but in tests
    ) -> None:
        self.data = DataDir(data_dir)
        self.stop_grace = stop_grace
        self.supervisors = supervisors or Supervisors(stop_grace=stop_grace)
        self._clock = clock
        self._lock = threading.Lock()
        self._tasks: dict[str, TaskRecord] = {}
        self._stopping: set[str] = set()
        self.closing = threading.Event()
        """Set when the executor shuts down: stops under way give up waiting."""

    # --- reading ----------------------------------------------------------------------------------

    def _inspect(self, record: TaskRecord) -> Status:
        seen = self.data.task(record.name).observe(self.supervisors.alive)
        return inspect(record, seen, self._clock())

    def _listed(self) -> list[TaskReport]:
        now = self._clock()
        ordered = sorted(self._tasks.values(), key=lambda r: (r.created_at, r.name))
        return [render(record, now) for record in ordered]

    def list(self) -> list[TaskReport]:
        """Every task, oldest first (upstream's controller reads the first one)."""
        with self._lock:
            return self._listed()

    def get(self, name: str) -> TaskReport | None:
        with self._lock:
            record = self._tasks.get(name)
            return render(record, self._clock()) if record is not None else None

    # --- changing ---------------------------------------------------------------------------------

    def _persist(self, record: TaskRecord) -> None:
        self.data.task(record.name).write_record(record)
        self._tasks[record.name] = record

    def _create(self, spec: TaskSpec) -> TaskRecord:
        record = new_record(spec, self._clock())
        task = self.data.create(record)
        if spec.process is not None:
            try:
                pid = self.supervisors.launch(task)
                task.write_pid(pid)
            except OSError:
                self.data.remove(spec.name)
                raise
            record = msgspec.structs.replace(record, status=self._inspect(record))
            task.write_record(record)
        self._tasks[spec.name] = record
        log.info("created task %s", spec.name)
        return record

    def create(self, spec: TaskSpec) -> TaskReport:
        """Raises :class:`Refused`, or OSError when the supervisor cannot be launched."""
        with self._lock:
            problem = admission_problem(self._tasks, spec)
            if problem is not None:
                raise Refused(problem)
            return render(self._create(spec), self._clock())

    def sync(self, desired: Sequence[TaskSpec]) -> SyncResult:
        """Make ``desired`` the set of tasks (see :func:`.core.plan.plan_sync`)."""
        with self._lock:
            plan = plan_sync(self._tasks, desired)
            now = self._clock()
            for name in plan.delete:
                self._persist(marked_for_deletion(self._tasks[name], now))
                log.info("task %s is no longer desired: deleting it", name)
            for spec in plan.create:
                self._create(spec)
            return SyncResult(tasks=self._listed(), refused=plan.refused)

    def delete(self, name: str) -> bool:
        """Mark ``name`` for deletion; False when there is no such task."""
        with self._lock:
            record = self._tasks.get(name)
            if record is None:
                return False
            if not record.deleting:
                self._persist(marked_for_deletion(record, self._clock()))
                log.info("task %s deleted", name)
            return True

    # --- the loop ---------------------------------------------------------------------------------

    def reconcile(self) -> None:
        """One pass over every task."""
        with self._lock:
            self.supervisors.reap()
            statuses = {name: self._inspect(record) for name, record in self._tasks.items()}
            for step in plan_reconcile(self._tasks, statuses, frozenset(self._stopping)):
                self._apply(step)

    def _apply(self, step: Step) -> None:
        if step.remove:
            self.data.remove(step.name)
            del self._tasks[step.name]
            self._stopping.discard(step.name)
            log.info("task %s removed", step.name)
            return
        if step.record is not None:
            before = self._tasks[step.name].status
            self._persist(step.record)
            after = step.record.status
            if after is not None and (before is None or before.state != after.state):
                log.info("task %s: %s (%s)", step.name, after.state, after.reason or "-")
        if step.stop:
            self._begin_stop(self._tasks[step.name])

    def _begin_stop(self, record: TaskRecord) -> None:
        pid, _ = self.data.task(record.name).read_pid()
        if pid is None:
            return
        self._stopping.add(record.name)
        deadline = stop_deadline(record.spec.process, self.stop_grace)
        path = self.data.task(record.name).path
        why = "deleted" if record.deleting else "past its timeout"
        log.info("stopping task %s (%s), supervisor %s", record.name, why, pid)

        def stop() -> None:
            try:
                self.supervisors.stop(pid, path, deadline, self.closing)
            except Exception:
                log.exception("stopping task %s failed", record.name)
            finally:
                with self._lock:
                    self._stopping.discard(record.name)

        threading.Thread(target=stop, name=f"stop-{record.name}", daemon=True).start()

    def run_reconciler(self, interval: float) -> None:
        """Reconcile every ``interval`` seconds until :attr:`closing` is set."""
        while not self.closing.wait(interval):
            try:
                self.reconcile()
            except Exception:
                # A pass that failed (a full disk, say) is tried again; the loop must not end.
                log.exception("reconcile pass failed")

    # --- start ------------------------------------------------------------------------------------

    def recover(self) -> None:
        """Load the tasks of the data dir, keeping those the restart rule keeps."""
        self.data.prepare()
        with self._lock:
            for name in self.data.names():
                task = self.data.task(name)
                try:
                    record = task.read_record()
                except (OSError, msgspec.DecodeError) as error:
                    log.warning("task %s: cannot read %s, left alone: %s", name, task.path, error)
                    continue
                if record.name != name:
                    log.warning("task %s: its task.json names %r, left alone", name, record.name)
                    continue
                status = self._inspect(record)
                if not keep_after_restart(record, status):
                    was = record.status.state if record.status is not None else "Pending"
                    log.info("task %s was %s and is now %s: dropped", name, was, status.state)
                    self.data.remove(name)
                    continue
                self._persist(msgspec.structs.replace(record, status=status))
                log.info("recovered task %s (%s)", name, status.state)
