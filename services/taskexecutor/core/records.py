"""What the task executor keeps on disk about a task, and the words its states are told in.

A task's directory (``<dataDir>/<name>/``, see :mod:`services.taskexecutor.store`) holds two
records, each written whole and atomically by one writer:

- ``task.json``, a :class:`TaskRecord`, written by the executor: the task as it was asked for,
  when it was marked for deletion, whether the executor stopped it for its timeout, and the
  last :class:`Status` it inspected (persisted whenever it changes, so that a restarted
  executor knows what it last reported, which decides whether it keeps the task, see
  :func:`~services.taskexecutor.core.plan.keep_after_restart`);
- ``lifecycle.json``, a :class:`LifecycleRecord`, written by the task's supervisor: when the
  preStart hook, the process and the postStop hook started and how each ended. It is written
  at every step, so an executor reading it mid-task sees the hooks that already ran.

Times are seconds since the epoch (floats): exact to compare, and what ``time.time()`` and file
mtimes give; the wire renders them as RFC 3339 (:mod:`.render`).
"""

from __future__ import annotations

import enum
from typing import Final

import msgspec

from services.taskexecutor.core.wire import TaskSpec

__all__ = [
    "HOOK_FAILED",
    "HOOK_STOPPED",
    "HOOK_TIMEOUT",
    "POST_STOP",
    "PRE_START",
    "PRE_START_FAILURES",
    "REASON_CONTAINER_UNSUPPORTED",
    "REASON_CRASHED",
    "REASON_FAILED",
    "REASON_NOT_FOUND",
    "REASON_PENDING",
    "REASON_SUCCEEDED",
    "REASON_TIMEOUT",
    "LifecycleRecord",
    "State",
    "Status",
    "StepRecord",
    "TaskRecord",
]


class State(enum.StrEnum):
    """Upstream's task states (``te/types``)."""

    PENDING = "Pending"
    """Not started: no supervisor has been launched (no ``pid`` file)."""
    RUNNING = "Running"
    TIMEOUT = "Timeout"
    """Still running, past its ``timeoutSeconds``: about to be stopped."""
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    NOT_FOUND = "NotFound"
    """Its directory is gone."""


REASON_PENDING: Final = "Pending"
REASON_SUCCEEDED: Final = "Succeeded"
REASON_FAILED: Final = "Failed"
REASON_CRASHED: Final = "ProcessCrashed"
REASON_TIMEOUT: Final = "TaskTimeout"
REASON_NOT_FOUND: Final = "NotFound"
REASON_CONTAINER_UNSUPPORTED: Final = "ContainerTaskNotSupported"

PRE_START: Final = "preStart"
POST_STOP: Final = "postStop"
HOOK_FAILED: Final = {PRE_START: "PreStartHookFailed", POST_STOP: "PostStopHookFailed"}
HOOK_TIMEOUT: Final = {PRE_START: "PreStartHookTimeout", POST_STOP: "PostStopHookTimeout"}
HOOK_STOPPED: Final = "Stopped"
"""A preStart hook cut short because the task was stopped (deleted, or past its timeout)."""
PRE_START_FAILURES: Final = frozenset({HOOK_FAILED[PRE_START], HOOK_TIMEOUT[PRE_START]})
"""The preStart outcomes that keep the process from starting, and become the task's reason."""


class _Record(msgspec.Struct, rename="camel", omit_defaults=True, frozen=True, kw_only=True):
    """Frozen, each subclass saying so again for mypy: a new state is a new record
    (``msgspec.structs.replace``), which the plan returns and the shell persists."""


class StepRecord(_Record, frozen=True):
    """One step of a task's life as its supervisor saw it: a hook, or the process."""

    started_at: float
    finished_at: float | None = None
    """None while it runs."""
    exit_code: int | None = None
    """As a shell reports it: the code, or 128 + the signal that ended it."""
    signal: int = 0
    reason: str = ""
    message: str = ""


class LifecycleRecord(_Record, frozen=True):
    """``lifecycle.json``: each step that started. No ``process`` means it never started."""

    pre_start: StepRecord | None = None
    process: StepRecord | None = None
    post_stop: StepRecord | None = None


class Status(_Record, frozen=True):
    """What inspecting a task found (:func:`~services.taskexecutor.core.state.inspect`)."""

    state: State
    exit_code: int | None = None
    signal: int = 0
    reason: str = ""
    message: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    lifecycle: LifecycleRecord | None = None


class TaskRecord(_Record, frozen=True):
    """``task.json``: one task as the executor keeps it."""

    spec: TaskSpec
    created_at: float
    deletion_timestamp: float | None = None
    """When it was marked for deletion; a deleting task is stopped, then removed."""
    stopped_for_timeout: bool = False
    """The executor stopped it because it ran past ``timeoutSeconds``. Persisted before the
    stop, so the task keeps reporting ``TaskTimeout`` after the stop ends it (and after a
    restart), instead of the plain ``Failed`` its exit code alone would give."""
    status: Status | None = None
    """The last status inspected; None before the first inspection."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def deleting(self) -> bool:
        return self.deletion_timestamp is not None
