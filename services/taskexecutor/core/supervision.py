"""The task supervisor's decisions (:mod:`services.taskexecutor.supervisor` is its shell): the
environment a task runs with, how each step of a task ended, whether the process starts, and
the exit code the task ends with.

A task is up to three steps, each a child of the supervisor: the preStart hook, the process,
the postStop hook. The shell runs a step and reports how it ended as :class:`Ended`; the
functions here turn that into the step's :class:`~.records.StepRecord`:

- exit codes are told as a shell tells them: the code, or 128 + the signal that ended it
  (upstream's shim is ``/bin/sh``, whose ``wait`` reports 143 for a SIGTERM); a command that
  cannot be started at all is 127 when it does not exist and 126 otherwise, as a shell says;
- a hook that ran past its own ``timeoutSeconds`` was killed (SIGKILL: its time is up, and a
  grace would stretch the bound the timeout promises) and is ``<Hook>HookTimeout``; one that
  ended non-zero, or could not be started, is ``<Hook>HookFailed``; a preStart hook cut short
  because the task was stopped is ``Stopped``;
- the process starts only if there was no preStart hook or it exited 0, and the task was not
  stopped meanwhile;
- the postStop hook runs after every outcome (it is the shell's ``finally``), and its own
  outcome is reported beside the task's without changing the task's exit code, as a failing
  Kubernetes preStop hook leaves the container's exit code alone;
- the task's exit code (:func:`task_exit_code`) is the process's; when the process never
  started, the failed preStart hook's, or 143 when a stop came first.

The environment is the executor's plus the task's ``env`` (the task's wins, as the last entry
wins in Go's ``exec``), and both hooks get the same environment and working directory as the
process: they prepare and clean up after it.
"""

from __future__ import annotations

import errno
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from services.taskexecutor.core.records import (
    HOOK_FAILED,
    HOOK_STOPPED,
    HOOK_TIMEOUT,
    REASON_FAILED,
    REASON_SUCCEEDED,
    LifecycleRecord,
    StepRecord,
)
from services.taskexecutor.core.wire import EnvVar

__all__ = [
    "NOT_FOUND_EXIT_CODE",
    "NOT_RUNNABLE_EXIT_CODE",
    "TERMINATED_EXIT_CODE",
    "Ended",
    "exit_status",
    "hook_step",
    "merged_env",
    "process_step",
    "should_start_process",
    "task_exit_code",
]

TERMINATED_EXIT_CODE: Final = 128 + signal.SIGTERM
NOT_FOUND_EXIT_CODE: Final = 127
NOT_RUNNABLE_EXIT_CODE: Final = 126


@dataclass(frozen=True)
class Ended:
    """How one child of the supervisor ended, as the shell saw it."""

    finished_at: float
    returncode: int | None = None
    """``Popen.returncode``: the exit code, or minus the signal; None if it never started."""
    spawn_error: str = ""
    """Why it could not be started (it then has no returncode)."""
    spawn_errno: int | None = None
    timed_out: bool = False
    """Killed by the supervisor for running past its own timeout."""
    stopped: bool = False
    """The task was stopped while it ran, and the stop was passed on to it."""


def exit_status(ended: Ended) -> tuple[int, int]:
    """``(exit code, signal)`` of a child, as a shell reports them."""
    if ended.returncode is None:
        code = NOT_FOUND_EXIT_CODE if ended.spawn_errno == errno.ENOENT else NOT_RUNNABLE_EXIT_CODE
        return code, 0
    if ended.returncode < 0:
        return 128 - ended.returncode, -ended.returncode
    return ended.returncode, 0


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _how(code: int, number: int) -> str:
    return f"was killed by {_signal_name(number)}" if number else f"exited with code {code}"


def hook_step(hook: str, started_at: float, ended: Ended, timeout_seconds: int) -> StepRecord:
    """The record of hook ``hook`` (``preStart`` or ``postStop``)."""
    code, number = exit_status(ended)
    if ended.spawn_error:
        reason = HOOK_FAILED[hook]
        message = f"{hook} hook could not be started: {ended.spawn_error}"
    elif ended.timed_out:
        reason = HOOK_TIMEOUT[hook]
        message = f"{hook} hook timed out after {timeout_seconds}s"
    elif code == 0:
        reason, message = REASON_SUCCEEDED, ""
    elif ended.stopped:
        reason = HOOK_STOPPED
        message = f"{hook} hook {_how(code, number)} when the task was stopped"
    else:
        reason = HOOK_FAILED[hook]
        message = f"{hook} hook {_how(code, number)}"
    return StepRecord(
        started_at=started_at,
        finished_at=ended.finished_at,
        exit_code=code,
        signal=number,
        reason=reason,
        message=message,
    )


def process_step(started_at: float, ended: Ended) -> StepRecord:
    """The record of the task's process."""
    code, number = exit_status(ended)
    if ended.spawn_error:
        reason = REASON_FAILED
        message = f"the process could not be started: {ended.spawn_error}"
    elif code == 0:
        reason, message = REASON_SUCCEEDED, ""
    else:
        reason = REASON_FAILED
        message = f"the process {_how(code, number)}"
        if ended.stopped:
            message += " after the task was stopped"
    return StepRecord(
        started_at=started_at,
        finished_at=ended.finished_at,
        exit_code=code,
        signal=number,
        reason=reason,
        message=message,
    )


def should_start_process(pre_start: StepRecord | None, stop_requested: bool) -> bool:
    if stop_requested:
        return False
    return pre_start is None or pre_start.exit_code == 0


def task_exit_code(lifecycle: LifecycleRecord) -> int:
    """What the supervisor writes to ``exit`` and exits with."""
    process = lifecycle.process
    if process is not None:
        return process.exit_code if process.exit_code is not None else TERMINATED_EXIT_CODE
    pre_start = lifecycle.pre_start
    if pre_start is not None and pre_start.exit_code:
        return pre_start.exit_code
    return TERMINATED_EXIT_CODE


def merged_env(base: Mapping[str, str], env: Sequence[EnvVar]) -> dict[str, str]:
    """The executor's environment with the task's ``env`` on top (entries without a name are
    skipped, as upstream skips them)."""
    merged = dict(base)
    for variable in env:
        if variable.name:
            merged[variable.name] = variable.value
    return merged
