"""The state machine: a task's :class:`~.records.Status` from its files, whether its supervisor
still runs, and the time (docs/opensandbox.md §5 "state machine", upstream's
``te/runtime/process.go`` Inspect).

The shell reads the files and the process table into an :class:`Observation`;
:func:`inspect` decides, in upstream's order:

1. ``exit`` present: Succeeded with code 0, else Failed with its code;
2. else ``pid`` present and that process alive: Running, or Timeout once it has run (since the
   ``pid`` file's mtime) longer than ``timeoutSeconds``; Timeout is reported as exit 137,
   reason ``TaskTimeout``, and makes the executor stop the task;
3. ``pid`` present, the process gone: Failed, exit 137, reason ``ProcessCrashed`` (the
   supervisor died without writing ``exit``: killed, or the machine restarted);
4. nothing: Pending.

A directory that is gone is NotFound. What upstream does not have, and this adds:

- **A timeout survives the stop.** Upstream reports ``TaskTimeout`` only while the process
  still runs; once the stop ends it, the ``exit`` file gives 143 (SIGTERM) or 137 (SIGKILL)
  and the reason becomes a plain ``Failed``, so a controller that looks a moment later no
  longer sees why the task failed. Here the executor persists that it stopped the task for its
  timeout (:attr:`~.records.TaskRecord.stopped_for_timeout`), and any end of such a task is
  Failed with reason ``TaskTimeout``, its exit code kept (137 if the process exited 0 when
  told to stop: the code it was reported with until then).
- **A failed preStart hook is the reason.** When the supervisor's lifecycle record says the
  preStart hook failed or timed out, the main process never ran, and the task is Failed with
  the hook's reason (``PreStartHookFailed``, ``PreStartHookTimeout``), exit code and message.
- **A message for a failed process.** The supervisor records why the process ended (the
  signal, or that it could not be started at all); a Failed task carries it.
- **Container tasks.** A task without ``process`` would need a container runtime, which
  upstream never implemented ("not implemented"); here it is accepted and Failed at once with
  reason ``ContainerTaskNotSupported``, so a controller counts it failed instead of retrying
  it forever.
- An ``exit`` file that holds no number (upstream would read it as 0, success) is Failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec

from services.taskexecutor.core.records import (
    PRE_START_FAILURES,
    REASON_CONTAINER_UNSUPPORTED,
    REASON_CRASHED,
    REASON_FAILED,
    REASON_NOT_FOUND,
    REASON_PENDING,
    REASON_SUCCEEDED,
    REASON_TIMEOUT,
    LifecycleRecord,
    State,
    Status,
    TaskRecord,
)

__all__ = [
    "CONTAINER_UNSUPPORTED_MESSAGE",
    "KILLED_EXIT_CODE",
    "TERMINAL",
    "Observation",
    "container_status",
    "inspect",
]

KILLED_EXIT_CODE: Final = 137
"""128 + SIGKILL: what a shell reports for a killed process, and upstream for a lost one."""

TERMINAL: Final = frozenset({State.SUCCEEDED, State.FAILED, State.NOT_FOUND})
"""States a task never leaves (upstream's isTerminalState)."""

CONTAINER_UNSUPPORTED_MESSAGE: Final = (
    "container tasks are not supported: this task executor runs process tasks only "
    "(the task has no process)"
)


@dataclass(frozen=True)
class Observation:
    """What a task's directory and the process table showed, read by the shell."""

    present: bool = True
    """The task's directory exists."""
    exit_text: str | None = None
    """The content of ``exit``; None when there is no such file."""
    exit_at: float | None = None
    """``exit``'s mtime: when the task ended."""
    pid: int | None = None
    """The supervisor's pid from ``pid``; None when there is no such file."""
    pid_at: float | None = None
    """``pid``'s mtime: when the task started."""
    alive: bool = False
    """The process ``pid`` names runs, and is this task's supervisor."""
    lifecycle: LifecycleRecord | None = None
    """``lifecycle.json``, as far as the supervisor wrote it."""


def container_status(record: TaskRecord) -> Status:
    """The status of a task without a process: Failed from the moment it was created."""
    return Status(
        state=State.FAILED,
        reason=REASON_CONTAINER_UNSUPPORTED,
        message=CONTAINER_UNSUPPORTED_MESSAGE,
        finished_at=record.created_at,
    )


def _exit_code(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _ended(seen: Observation, text: str) -> Status:
    """The status of a task whose supervisor wrote ``exit``."""
    lifecycle = seen.lifecycle
    started, finished = seen.pid_at, seen.exit_at
    code = _exit_code(text)
    if code is None:
        return Status(
            state=State.FAILED,
            exit_code=1,
            reason=REASON_FAILED,
            message=f"the exit file holds {text[:40]!r}, not an exit code",
            started_at=started,
            finished_at=finished,
            lifecycle=lifecycle,
        )
    if code == 0:
        return Status(
            state=State.SUCCEEDED,
            exit_code=0,
            reason=REASON_SUCCEEDED,
            started_at=started,
            finished_at=finished,
            lifecycle=lifecycle,
        )
    pre_start = lifecycle.pre_start if lifecycle is not None else None
    if pre_start is not None and pre_start.reason in PRE_START_FAILURES:
        return Status(
            state=State.FAILED,
            exit_code=code,
            reason=pre_start.reason,
            message=pre_start.message,
            started_at=started,
            finished_at=finished,
            lifecycle=lifecycle,
        )
    process = lifecycle.process if lifecycle is not None else None
    return Status(
        state=State.FAILED,
        exit_code=code,
        signal=process.signal if process is not None else 0,
        reason=REASON_FAILED,
        message=process.message if process is not None else "",
        started_at=started,
        finished_at=finished,
        lifecycle=lifecycle,
    )


def _after_timeout_stop(record: TaskRecord, status: Status) -> Status:
    """``status`` of a task that ended, told as the timeout it was stopped for."""
    if not record.stopped_for_timeout or status.state not in (State.SUCCEEDED, State.FAILED):
        return status
    limit = record.spec.process.timeout_seconds if record.spec.process is not None else 0
    code = status.exit_code or KILLED_EXIT_CODE
    return msgspec.structs.replace(
        status,
        state=State.FAILED,
        exit_code=code,
        reason=REASON_TIMEOUT,
        message=f"stopped after running longer than its timeout of {limit}s (exit code {code})",
    )


def inspect(record: TaskRecord, seen: Observation, now: float) -> Status:
    """The task's status now (``now``: seconds since the epoch)."""
    process = record.spec.process
    if process is None:
        return container_status(record)
    if not seen.present:
        return Status(
            state=State.NOT_FOUND,
            reason=REASON_NOT_FOUND,
            message="the task's directory is gone",
        )
    if seen.exit_text is not None:
        return _after_timeout_stop(record, _ended(seen, seen.exit_text))
    if seen.pid is not None:
        started = seen.pid_at
        if not seen.alive:
            crashed = Status(
                state=State.FAILED,
                exit_code=KILLED_EXIT_CODE,
                reason=REASON_CRASHED,
                message=(
                    "the task's supervisor exited without writing an exit code "
                    "(its supervisor.log may say why)"
                ),
                started_at=started,
                # Upstream's approximation: a time that does not move, so the status does not
                # change (and is not written again) at every look.
                finished_at=started,
                lifecycle=seen.lifecycle,
            )
            return _after_timeout_stop(record, crashed)
        limit = process.timeout_seconds
        if limit > 0 and started is not None and now - started > limit:
            return Status(
                state=State.TIMEOUT,
                exit_code=KILLED_EXIT_CODE,
                reason=REASON_TIMEOUT,
                message=f"the task ran longer than its timeout of {limit}s",
                started_at=started,
                lifecycle=seen.lifecycle,
            )
        return Status(state=State.RUNNING, started_at=started, lifecycle=seen.lifecycle)
    return Status(state=State.PENDING, reason=REASON_PENDING, lifecycle=seen.lifecycle)
