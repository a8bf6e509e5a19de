"""Reading ``/proc``: whether a pid is a live task supervisor, and this task's.

``kill(pid, 0)`` alone says too much: it succeeds for a zombie (a supervisor that exited and
has not been reaped yet, which the executor is the parent of until then) and for an unrelated
process that got the pid after the supervisor died and the machine, or the container, went on
(pids are reused; a restarted executor reads pids that an earlier one wrote). So the shell
also reads ``/proc/<pid>/stat`` (a zombie or dead state is no process) and
``/proc/<pid>/cmdline`` (a supervisor is started with its task's directory as an argument, see
:mod:`services.taskexecutor.processes`, so a process without it is someone else). Where
``/proc`` cannot be read, the shell trusts ``kill(pid, 0)``.
"""

from __future__ import annotations

from typing import Final

__all__ = ["GONE_STATES", "names_task_dir", "stat_state"]

GONE_STATES: Final = frozenset({"Z", "X", "x"})
"""Zombie and dead: the process has exited."""


def stat_state(text: str) -> str | None:
    """The state letter of a ``/proc/<pid>/stat`` line. The command name before it is in
    parentheses and may hold spaces and parentheses itself, so the state is the first field
    after the last ``)``."""
    end = text.rfind(")")
    if end < 0:
        return None
    rest = text[end + 1 :].split()
    return rest[0] if rest else None


def names_task_dir(cmdline: bytes, task_dir: str) -> bool:
    """Whether a ``/proc/<pid>/cmdline`` (NUL-separated arguments) has ``task_dir`` as one."""
    return task_dir.encode() in cmdline.split(b"\0")
