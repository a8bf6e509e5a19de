"""Running one sandbox command: ``/bin/sh -c COMMAND`` in the sandbox's working directory and
environment, in a session (so a process group) of its own, bounded in time.

A command that outlives its time limit is killed with its whole process group (SIGKILL, what
the upstream runtime does too), and reported as timed out: exit code 124, as ``timeout(1)``
and the SDK's sandboxd path report it, ``timed_out`` set, and whatever it wrote before. A
command that ends leaves what it put in the background running, as in a container. Every group
is remembered in :class:`Commands`, so that stopping the runtime (its Pod deleted) kills every
process still running in one rather than leaving it behind. Each command also dies with
the runtime should the runtime be killed outright (``PR_SET_PDEATHSIG``); what a command
started in a session of its own is beyond that, which is why the runtime runs inside a PID
namespace where the machine allows (see :mod:`.isolation`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["TIMED_OUT_EXIT_CODE", "Commands", "Outcome"]

TIMED_OUT_EXIT_CODE: Final = 124
_PR_SET_PDEATHSIG: Final = 1
# After the kill, how long to wait for the pipes to close: a descendant that left the group
# may hold them open, and the answer must not wait for it.
_DRAIN_TIMEOUT: Final = 2.0


@dataclass(frozen=True)
class Outcome:
    """What the SDK's ``ExecutionResult`` carries."""

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool = False

    def as_json(self) -> dict[str, object]:
        return {
            "stdout": self.stdout,
            "stderr": self.stderr,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
        }


def _die_with_parent() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here, not between fork and exec

    def preexec() -> None:  # pragma: no cover - runs in the child before exec
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return preexec


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


class Commands:
    """The commands of one sandbox: where and with what they run, and which still do."""

    def __init__(self, workdir: str, env: Mapping[str, str]) -> None:
        self.workdir = workdir
        self.env = dict(env)
        # Every process group started (each command leads its own). A command's background
        # children may outlive it on purpose (a server an agent starts), as in a container, so
        # a group is forgotten only when the sandbox stops and all of them are killed.
        self._groups: set[int] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._preexec = _die_with_parent()

    def run(self, command: str, timeout: float) -> Outcome:
        """Run ``command``; it is killed, group and all, after ``timeout`` seconds."""
        with self._lock:
            if self._closed:
                return Outcome("", "the sandbox is stopping", 1)
            process = subprocess.Popen(
                ["/bin/sh", "-c", command],
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=self._preexec,
            )
            self._groups.add(process.pid)
        return self._wait(process, timeout)

    def _wait(self, process: subprocess.Popen[bytes], timeout: float) -> Outcome:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process.pid)
            out, err = _drain(process)
            message = f"command timed out after {timeout:g} seconds and was killed\n"
            return Outcome(_text(out), _text(err) + message, TIMED_OUT_EXIT_CODE, True)
        return Outcome(_text(out), _text(err), _exit_code(process.returncode))

    def close(self) -> None:
        """Kill every command still running; no new one starts."""
        with self._lock:
            self._closed = True
            groups = list(self._groups)
        for group in groups:
            _kill_group(group)


def _exit_code(returncode: int) -> int:
    """A shell's convention: a command ended by signal N exits 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _kill_group(group: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def _drain(process: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    try:
        return process.communicate(timeout=_DRAIN_TIMEOUT)
    except subprocess.TimeoutExpired:
        # A descendant outside the group holds the pipes: give up on the rest of the output.
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        process.wait()
        return b"", b""
