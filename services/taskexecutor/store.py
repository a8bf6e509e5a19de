"""The data dir: one directory per task, and the files in it (docs/opensandbox.md §5
"persistence", upstream's ``te/storage/file_store.go`` and ``te/runtime/process.go``).

``<dataDir>/<name>/`` holds:

========================  ==================  ===================================================
file                      written by          content
========================  ==================  ===================================================
``task.json``             the executor        the :class:`~.core.records.TaskRecord`
``pid``                   both (see below)    the supervisor's pid; its mtime is the start time
``lifecycle.json``        the supervisor      the :class:`~.core.records.LifecycleRecord`
``exit``                  the supervisor      the task's exit code; written last, so its presence
                                              means every other file is final
``stdout.log``,           the task's          what the hooks and the process printed, appended
``stderr.log``            children
``supervisor.log``        the supervisor      its own diagnostics (a traceback if it failed)
========================  ==================  ===================================================

Every file but the logs is written atomically: a temporary file in the same directory, fsync,
rename over the old one, and an fsync of the directory, so a reader (the executor reads what
the supervisor writes, a restarted executor reads everything) sees the old content or the new,
never a torn one, and a power cut loses at most the last write. The ``pid`` file is written by
the executor right after it launched the supervisor (so the task inspects as Running at once)
and again by the supervisor when it starts (so a task whose executor died between the launch
and its own write is not mistaken for one never started); both write the same number.

Task names are checked (:func:`~.core.names.name_problem`) before they become paths.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec

from services.taskexecutor.core.names import name_problem
from services.taskexecutor.core.records import LifecycleRecord, TaskRecord
from services.taskexecutor.core.state import Observation

__all__ = [
    "EXIT_FILE",
    "LIFECYCLE_FILE",
    "PID_FILE",
    "STDERR_FILE",
    "STDOUT_FILE",
    "SUPERVISOR_LOG",
    "TASK_FILE",
    "DataDir",
    "TaskDir",
    "atomic_write",
]

TASK_FILE: Final = "task.json"
PID_FILE: Final = "pid"
EXIT_FILE: Final = "exit"
LIFECYCLE_FILE: Final = "lifecycle.json"
STDOUT_FILE: Final = "stdout.log"
STDERR_FILE: Final = "stderr.log"
SUPERVISOR_LOG: Final = "supervisor.log"

_TASK_DECODER = msgspec.json.Decoder(TaskRecord)
_LIFECYCLE_DECODER = msgspec.json.Decoder(LifecycleRecord)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a reader sees the old content or the new, whole."""
    # Unique per process and thread: the executor's threads and the supervisor may write
    # files of the same directory at once.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    try:
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    # The rename is durable only once the directory is; not every file system lets a
    # directory be opened or synced, and the write itself has succeeded by now.
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _read(path: Path) -> tuple[str, float] | None:
    """A small file's text and mtime; None when it does not exist."""
    try:
        with path.open("rb") as file:
            mtime = os.fstat(file.fileno()).st_mtime
            return file.read().decode(errors="replace"), mtime
    except (FileNotFoundError, NotADirectoryError):
        return None


@dataclass(frozen=True)
class TaskDir:
    """One task's directory."""

    path: Path

    def file(self, name: str) -> Path:
        return self.path / name

    def read_record(self) -> TaskRecord:
        """Raises OSError or msgspec.DecodeError."""
        return _TASK_DECODER.decode(self.file(TASK_FILE).read_bytes())

    def write_record(self, record: TaskRecord) -> None:
        atomic_write(self.file(TASK_FILE), msgspec.json.encode(record))

    def write_pid(self, pid: int) -> None:
        atomic_write(self.file(PID_FILE), str(pid).encode())

    def write_lifecycle(self, lifecycle: LifecycleRecord) -> None:
        atomic_write(self.file(LIFECYCLE_FILE), msgspec.json.encode(lifecycle))

    def write_exit(self, code: int) -> None:
        atomic_write(self.file(EXIT_FILE), str(code).encode())

    def read_pid(self) -> tuple[int | None, float | None]:
        """The pid and the ``pid`` file's mtime; (None, None) without a readable one."""
        found = _read(self.file(PID_FILE))
        if found is None:
            return None, None
        text, mtime = found
        try:
            pid = int(text.strip())
        except ValueError:
            return None, None
        return (pid, mtime) if pid > 0 else (None, None)

    def read_lifecycle(self) -> LifecycleRecord | None:
        found = _read(self.file(LIFECYCLE_FILE))
        if found is None:
            return None
        try:
            return _LIFECYCLE_DECODER.decode(found[0].encode())
        except msgspec.DecodeError:
            return None

    def observe(self, alive: Callable[[int, Path], bool]) -> Observation:
        """What the directory shows; ``alive(pid, task dir)`` says whether the pid file's
        process is this task's supervisor and runs."""
        if not self.path.is_dir():
            return Observation(present=False)
        # The exit file first: once it exists the others are final, so reading them after it
        # cannot see a newer state than the exit file says.
        ended = _read(self.file(EXIT_FILE))
        pid, pid_at = self.read_pid()
        return Observation(
            exit_text=ended[0] if ended is not None else None,
            exit_at=ended[1] if ended is not None else None,
            pid=pid,
            pid_at=pid_at,
            alive=ended is None and pid is not None and alive(pid, self.path),
            lifecycle=self.read_lifecycle(),
        )


class DataDir:
    """The root of every task's directory."""

    def __init__(self, root: Path) -> None:
        # Canonical, because a supervisor is recognised by its task directory on its command
        # line (services/taskexecutor/core/procfs.py): an executor started on another spelling
        # of the same directory (relative, through a symlink) must still recognise the
        # supervisors of the one before, or it would take them for dead and drop their tasks.
        self.root = root.resolve()

    def task(self, name: str) -> TaskDir:
        problem = name_problem(name)
        if problem is not None:
            raise ValueError(f"task name {name!r}: {problem}")
        return TaskDir(self.root / name)

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def names(self) -> list[str]:
        """The tasks on disk: directories with a ``task.json``, by name."""
        try:
            entries = sorted(os.scandir(self.root), key=lambda entry: entry.name)
        except FileNotFoundError:
            return []
        return [
            entry.name
            for entry in entries
            if entry.is_dir(follow_symlinks=False)
            and name_problem(entry.name) is None
            and (Path(entry.path) / TASK_FILE).is_file()
        ]

    def create(self, record: TaskRecord) -> TaskDir:
        """A fresh directory for ``record``: whatever an earlier task of that name left (a
        task dropped at restart whose directory could not be removed) goes first, so that its
        ``exit`` cannot end the new one."""
        task = self.task(record.name)
        self.remove(record.name)
        task.path.mkdir(parents=True)
        task.write_record(record)
        return task

    def remove(self, name: str) -> None:
        task = self.task(name)
        shutil.rmtree(task.path, ignore_errors=True)
