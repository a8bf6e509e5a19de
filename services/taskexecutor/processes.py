"""The task supervisors as processes: launch one, tell whether one runs, stop one.

A task's process is not the executor's child but its supervisor's
(:mod:`services.taskexecutor.supervisor`), and the supervisor is started detached:

- **in a session of its own** (``start_new_session``), so it leads a process group that holds
  the hooks and the process, which a final SIGKILL to the group reaches together, and so that
  signals meant for the executor (a Ctrl-C in its terminal, a kubelet signalling the
  executor's group) do not reach the workload. A stopped or killed executor leaves its
  supervisors running; the next one finds them through their ``pid`` files.
- **with SIGTERM and SIGINT blocked** across the launch (the child inherits the signal mask),
  so a stop that comes before the supervisor's Python has installed its handler waits for the
  handler instead of killing the supervisor before it could run the postStop hook; the
  supervisor unblocks them once its handler is in place.
- **with its task directory on its command line**, which is how :meth:`Supervisors.alive` tells
  a supervisor from a process that reused its pid (:mod:`.core.procfs`).

It is started with this interpreter and ``-m``, from the executor's working directory and
environment, so it imports the same ``services`` package the executor runs from.

The executor reaps its exited children (its supervisors, and, when it runs as a container's
PID 1, the orphans the kernel hands it) before it looks at any pid, since an unreaped child is
a zombie that ``kill(pid, 0)`` still finds.

Stopping (:meth:`Supervisors.stop`) is upstream's: SIGTERM to the supervisor, which passes it
on to what runs and runs the postStop hook; wait; then SIGKILL to the whole group if the
supervisor outlived the deadline. :func:`kill_supervisors` is the blunt form, for whoever
removes a data dir for good (a test's teardown, a simulated Pod's deletion): every supervisor
in it, and its group, killed at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Final

from services.taskexecutor.core.procfs import GONE_STATES, names_task_dir, stat_state
from services.taskexecutor.store import SUPERVISOR_LOG, DataDir, TaskDir

__all__ = ["SUPERVISOR_MODULE", "Supervisors", "kill_supervisors"]

log = logging.getLogger(__name__)

SUPERVISOR_MODULE: Final = "services.taskexecutor.supervisor"
_STOP_SIGNALS: Final = frozenset({signal.SIGTERM, signal.SIGINT})
_POLL: Final = 0.1
"""Seconds between two looks at a supervisor being stopped."""


def _proc(pid: int, name: str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as file:
            return file.read()
    except OSError:
        return None


def _runs(pid: int, task_dir: Path) -> bool:
    """Whether ``pid`` is a live (not zombie) process whose command line names ``task_dir``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process: not a supervisor we started
    stat = _proc(pid, "stat")
    if stat is not None and stat_state(stat.decode(errors="replace")) in GONE_STATES:
        return False
    cmdline = _proc(pid, "cmdline")
    return cmdline is None or names_task_dir(cmdline, str(task_dir))


def _signal_group(pid: int, signum: int) -> None:
    # A supervisor leads its own group (start_new_session), whose id is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


class Supervisors:
    """The supervisors of one executor."""

    def __init__(self, *, stop_grace: float) -> None:
        self.stop_grace = stop_grace
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._pid_one = os.getpid() == 1

    def launch(self, task: TaskDir) -> int:
        """Start ``task``'s supervisor; its pid. Raises OSError."""
        argv = [
            sys.executable,
            "-m",
            SUPERVISOR_MODULE,
            "--stop-grace",
            repr(self.stop_grace),
            str(task.path),
        ]
        with open(task.file(SUPERVISOR_LOG), "ab") as output:
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
            try:
                child = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=output,
                    start_new_session=True,
                    close_fds=True,
                )
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        with self._lock:
            self._children[child.pid] = child
        return child.pid

    def reap(self) -> None:
        """Collect every exited child, so none lingers as a zombie."""
        with self._lock:
            for pid, child in list(self._children.items()):
                if child.poll() is not None:
                    del self._children[pid]
        if not self._pid_one:
            return
        # PID 1 of a container inherits every orphan: supervisors a previous executor started,
        # and what tasks left behind.
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def alive(self, pid: int, task_dir: Path) -> bool:
        self.reap()
        if _runs(pid, task_dir):
            return True
        # It may have exited since the reap: collect it now, so no zombie outlives its task.
        self.reap()
        return False

    def stop(self, pid: int, task_dir: Path, deadline: float, cancelled: threading.Event) -> None:
        """SIGTERM to the supervisor; SIGKILL to its group if it still runs after ``deadline``
        seconds. Returns early, leaving the supervisor be, when ``cancelled`` is set (the
        executor is shutting down: the next one will stop it again)."""
        if not self.alive(pid, task_dir):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
        give_up = time.monotonic() + deadline
        while time.monotonic() < give_up:
            if cancelled.wait(_POLL):
                return
            if not self.alive(pid, task_dir):
                return
        if self.alive(pid, task_dir):
            log.warning("task supervisor %s outlived its stop deadline; killing its group", pid)
            _signal_group(pid, signal.SIGKILL)
            self.reap()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_supervisors(data_dir: Path) -> list[int]:
    """SIGKILL the process group of every task of ``data_dir``: its supervisor, the hooks and
    the process, and whatever they left running in the group; the group ids signalled.

    A group is signalled when its leader is this task's supervisor, or when no process has
    the leader's pid any more: Linux does not hand out a pid while a process group still
    bears it, so a group of that id is then the task's own leftovers. A pid that now names
    another process is left alone."""
    root = DataDir(data_dir)
    signalled = []
    for name in root.names():
        task = root.task(name)
        pid, _ = task.read_pid()
        if pid is None or not (_runs(pid, task.path) or not _exists(pid)):
            continue
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
        signalled.append(pid)
    return signalled
