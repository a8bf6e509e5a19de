"""``python -m services.taskexecutor.supervisor [--stop-grace S] TASK_DIR``: one task's supervisor.

Upstream starts a task as ``/bin/sh -c <shim>``, a script that backgrounds the command, passes
SIGTERM on to it, and writes its exit code to ``exit`` (docs/opensandbox.md §5 "process
launch"). This is that shim, in Python, grown by the lifecycle hooks that OpenSandbox documents
and upstream never built: the executor launches it detached (:mod:`.processes`), in a session
of its own, so it outlives the executor, and it runs the task to its end alone:

1. writes its pid to ``pid`` and reads the task from ``task.json``;
2. runs the **preStart** hook, if any, under the hook's own timeout; a failure or a timeout
   means the process never starts;
3. runs the **process** (``command`` + ``args``) with the executor's environment plus the
   task's ``env``, in ``workingDir``; its output is appended to ``stdout.log`` and
   ``stderr.log`` (the hooks' too);
4. **always** runs the **postStop** hook, if any, under its own timeout: after success, after
   failure, after a failed preStart, and after a stop;
5. writes ``lifecycle.json`` (at every step, so the executor reports the hooks as they go) and
   last ``exit``, and exits with the task's exit code.

SIGTERM (or SIGINT) is the executor's stop: passed on as SIGTERM to the preStart hook or the
process, whichever runs, which get ``--stop-grace`` seconds before SIGKILL; nothing further
starts but the postStop hook, which a stop does not interrupt (its own timeout bounds it, and
the executor's final SIGKILL to the group comes only once that could have passed). The
process and the hooks run in the supervisor's process group: a final SIGKILL reaches them all,
and what a task leaves running in the background (OpenSandbox's "process injection" ends its
task at once and leaves the user's process running) is not killed when the task ends.

Waiting costs nothing while a child runs: the supervisor sleeps in ``select`` on the child's
pidfd and on the pipe that signals are written to (``signal.set_wakeup_fd``), with a timeout
only when a deadline is due; without pidfds (non-Linux, old kernels) it looks every 100 ms.

The decisions (exit codes, reasons, whether the process starts) are
:mod:`.core.supervision`'s; this module only runs children and writes files.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

import msgspec

from services.taskexecutor.core.records import POST_STOP, PRE_START, LifecycleRecord, StepRecord
from services.taskexecutor.core.supervision import (
    Ended,
    hook_step,
    merged_env,
    process_step,
    should_start_process,
    task_exit_code,
)
from services.taskexecutor.core.wire import Lifecycle, LifecycleHandler
from services.taskexecutor.store import STDERR_FILE, STDOUT_FILE, TaskDir

__all__ = ["main", "supervise"]

_STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
_POLL: Final = 0.1


def _say(text: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    sys.stderr.write(f"{stamp}Z supervisor[{os.getpid()}]: {text}\n")
    sys.stderr.flush()


class _StopSignal:
    """SIGTERM and SIGINT as a flag, and a descriptor that becomes readable when one comes."""

    def __init__(self) -> None:
        self.requested = False
        # Non-inheritable (PEP 446): the children never see this pipe.
        self.fd, write = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        for signum in _STOP_SIGNALS:
            signal.signal(signum, self._on_signal)
        # The executor launched us with both blocked; one that came meanwhile is delivered now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)

    def _on_signal(self, signum: int, frame: object) -> None:
        if not self.requested:
            _say(f"received {signal.Signals(signum).name}: stopping the task")
        self.requested = True

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 512):
                pass


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _send(child: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(signum)


@dataclass
class _Runner:
    """Runs one child at a time with the task's environment, directory and logs."""

    stop: _StopSignal
    env: dict[str, str]
    cwd: str | None
    stdout: IO[bytes]
    stderr: IO[bytes]
    grace: float

    def run(self, argv: Sequence[str], *, timeout: int, stoppable: bool) -> Ended:
        """Run ``argv`` to its end: killed after ``timeout`` seconds (if > 0); sent SIGTERM,
        then SIGKILL after the grace, on a stop if ``stoppable``."""
        try:
            child = subprocess.Popen(
                list(argv),
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=self.stdout,
                stderr=self.stderr,
                close_fds=True,
            )
        except OSError as error:
            return Ended(
                finished_at=time.time(),
                spawn_error=str(error),
                spawn_errno=error.errno,
            )
        pidfd = _pidfd(child.pid)
        timeout_at = time.monotonic() + timeout if timeout > 0 else None
        kill_at: float | None = None
        stopped = timed_out = False
        try:
            while child.poll() is None:
                now = time.monotonic()
                if stoppable and self.stop.requested and not stopped:
                    stopped = True
                    _send(child, signal.SIGTERM)
                    kill_at = now + self.grace
                if timeout_at is not None and not timed_out and now >= timeout_at:
                    timed_out = True
                    _send(child, signal.SIGKILL)
                if kill_at is not None and now >= kill_at:
                    kill_at = None
                    _send(child, signal.SIGKILL)
                due = [d for d in (None if timed_out else timeout_at, kill_at) if d is not None]
                wait = max(0.0, min(due) - now) if due else None
                watched = [self.stop.fd]
                if pidfd is None:
                    wait = _POLL if wait is None else min(wait, _POLL)
                else:
                    watched.append(pidfd)
                select.select(watched, [], [], wait)
                self.stop.drain()
        finally:
            if pidfd is not None:
                os.close(pidfd)
        return Ended(
            finished_at=time.time(),
            returncode=child.returncode,
            timed_out=timed_out,
            stopped=stopped,
        )


def _hook(handler: LifecycleHandler | None) -> LifecycleHandler | None:
    return handler if handler is not None and handler.exec is not None else None


def supervise(task: TaskDir, grace: float) -> int:
    """Run the task of ``task`` to its end; its exit code."""
    stop = _StopSignal()
    task.write_pid(os.getpid())
    process = task.read_record().spec.process
    if process is None:
        raise SystemExit("the task has no process: the executor does not launch container tasks")
    hooks = process.lifecycle or Lifecycle()
    lifecycle = LifecycleRecord()
    replace = msgspec.structs.replace

    def record(updated: LifecycleRecord) -> LifecycleRecord:
        task.write_lifecycle(updated)
        return updated

    with (
        open(task.file(STDOUT_FILE), "ab") as stdout,
        open(task.file(STDERR_FILE), "ab") as stderr,
    ):
        runner = _Runner(
            stop=stop,
            env=merged_env(os.environ, process.env),
            cwd=process.working_dir or None,
            stdout=stdout,
            stderr=stderr,
            grace=grace,
        )
        try:
            pre_start = _hook(hooks.pre_start)
            if pre_start is not None and pre_start.exec is not None and not stop.requested:
                started = time.time()
                lifecycle = record(replace(lifecycle, pre_start=StepRecord(started_at=started)))
                ended = runner.run(
                    pre_start.exec.command, timeout=pre_start.timeout_seconds, stoppable=True
                )
                step = hook_step(PRE_START, started, ended, pre_start.timeout_seconds)
                lifecycle = record(replace(lifecycle, pre_start=step))
                _say(f"preStart hook: {step.reason} {step.message}".rstrip())
            if should_start_process(lifecycle.pre_start, stop.requested):
                started = time.time()
                lifecycle = record(replace(lifecycle, process=StepRecord(started_at=started)))
                ended = runner.run(process.argv, timeout=0, stoppable=True)
                step = process_step(started, ended)
                lifecycle = record(replace(lifecycle, process=step))
                _say(f"process: exit {step.exit_code} {step.message}".rstrip())
        finally:
            post_stop = _hook(hooks.post_stop)
            if post_stop is not None and post_stop.exec is not None:
                started = time.time()
                lifecycle = record(replace(lifecycle, post_stop=StepRecord(started_at=started)))
                ended = runner.run(
                    post_stop.exec.command, timeout=post_stop.timeout_seconds, stoppable=False
                )
                step = hook_step(POST_STOP, started, ended, post_stop.timeout_seconds)
                lifecycle = record(replace(lifecycle, post_stop=step))
                _say(f"postStop hook: {step.reason} {step.message}".rstrip())
    code = task_exit_code(lifecycle)
    task.write_exit(code)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.taskexecutor.supervisor",
        description="Run one task of the task executor to its end (the executor starts this).",
    )
    parser.add_argument("task_dir", type=Path, help="the task's directory under the data dir")
    parser.add_argument(
        "--stop-grace",
        type=float,
        default=10.0,
        help="seconds between passing SIGTERM on and SIGKILL (default 10)",
    )
    args = parser.parse_args(argv)
    return supervise(TaskDir(args.task_dir), args.stop_grace)


if __name__ == "__main__":
    sys.exit(main())
