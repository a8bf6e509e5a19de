"""sandbus's own commands as child processes: the one place that knows how to start one, and the
supervisor that keeps ``sandbus up``'s children running.

How a child is started (:func:`sandbus_command`, :func:`die_with_parent`) is shared by
``sandbus up``, the end-to-end tests (tests/e2e/services.py) and the benchmarks
(bench/sandbus_processes.py), so that all three run a service the same way:
``python -m services.cli COMMAND ...`` from this interpreter, tied to its parent with
``PR_SET_PDEATHSIG`` so that a parent killed without cleaning up (SIGKILL) takes its children
with it.

:class:`Supervisor` runs children the way ``sandbus up`` needs them:

- each in a process group of its own, so that a Ctrl-C at the terminal (which signals the whole
  foreground group) reaches ``sandbus up`` only, and ``up`` stops its children in order;
- their output read line by line and written to this process's stderr with the child's name in
  front (``claim      | ...``), so the log of many processes reads as one;
- a child that exits without being asked is reported (a status line) and started again after a
  backoff that doubles from :attr:`RestartPolicy.backoff`; a child that has run for
  :attr:`RestartPolicy.healthy_after` seconds starts a fresh count. Once a child has used up its
  :attr:`RestartPolicy.max_restarts`, or when a child that is not restarted (the development
  cluster) exits, :attr:`Supervisor.failed` holds what happened, and ``up`` stops with a
  non-zero exit: a dead child is never ignored;
- :meth:`Supervisor.stop` stops the children named, all at once: SIGTERM, then SIGKILL after
  :data:`STOP_WITHIN` seconds; a status line says each one stopped (and how, when not cleanly),
  so the order of a shutdown can be read.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "STOP_WITHIN",
    "Child",
    "RestartPolicy",
    "Supervisor",
    "die_with_parent",
    "free_port",
    "sandbus_command",
]

log = logging.getLogger(__name__)

STOP_WITHIN = 15.0
"""Seconds a child has to exit after SIGTERM before it is killed."""
_PR_SET_PDEATHSIG = 1
_LINE_LIMIT = 1 << 20
"""The longest log line read whole (asyncio's default of 64 KiB cuts a traceback of a big
object); a longer one is dropped with a note."""
_DRAIN_WITHIN = 2.0
"""Seconds to relay what a child wrote before it exited."""


def sandbus_command(*arguments: str) -> list[str]:
    """``sandbus ARGUMENTS`` as this interpreter runs it (no console script needed)."""
    return [sys.executable, "-m", "services.cli", *arguments]


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """A ``preexec_fn``: the kernel sends the child SIGTERM when its parent dies."""
    if sys.platform == "linux":
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now (the kernel's choice; another process could take it before
    the child binds it, which on a development machine is rare enough)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 5
    """Restarts of one child before ``up`` gives up (0: the first exit stops ``up``)."""
    backoff: float = 0.5
    """Seconds before the first restart; each further one waits twice as long as the last."""
    max_backoff: float = 10.0
    healthy_after: float = 60.0
    """A child that ran this long before it exited starts a fresh count of restarts."""

    def delay(self, restart: int) -> float:
        """Seconds to wait before restart number ``restart`` (1, 2, ...)."""
        return float(min(self.max_backoff, self.backoff * 2 ** (restart - 1)))


Status = Callable[[str, str], None]


def _how(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


@dataclass
class Child:
    """One supervised child: its command, and the process running it now."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] | None
    restart: bool
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    stopping: bool = False
    backing_off: bool = False
    """Between an exit and the restart: nothing to relay, a stop cancels the wait."""
    keeper: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None


class Supervisor:
    """Starts, watches, restarts and stops children (see the module docstring)."""

    def __init__(
        self,
        status: Status,
        policy: RestartPolicy | None = None,
        on_restart: Callable[[Child], None] | None = None,
    ) -> None:
        self.status = status
        self.policy = policy or RestartPolicy()
        self.on_restart = on_restart
        """Told of each child started again (its new pid)."""
        self.children: dict[str, Child] = {}
        self.failed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        """Set, with what happened, when a child is gone for good."""

    async def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        restart: bool = True,
    ) -> Child:
        """Start ``argv`` as the child ``name`` (``env``: its whole environment) and keep it."""
        child = Child(name, tuple(argv), env, restart)
        await self._spawn(child)
        self.children[name] = child
        child.keeper = asyncio.create_task(self._keep(child), name=f"keep {name}")
        return child

    async def _spawn(self, child: Child) -> None:
        child.process = await asyncio.create_subprocess_exec(
            *child.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=child.env,
            preexec_fn=die_with_parent,
            process_group=0,  # a Ctrl-C reaches up only; up stops its children in order
            limit=_LINE_LIMIT,
        )

    async def _keep(self, child: Child) -> None:
        """Relay the child's output until it exits; restart it, or give up (see the module)."""
        while True:
            process = child.process
            assert process is not None
            started = time.monotonic()
            relay = asyncio.create_task(_relay(child.name, process.stdout))
            code = await process.wait()
            # What it wrote before it exited; not what a grandchild holding the pipe still
            # writes (the development cluster's task executors), which would hold this up.
            await asyncio.wait([relay], timeout=_DRAIN_WITHIN)
            relay.cancel()
            if child.stopping:
                return
            if time.monotonic() - started >= self.policy.healthy_after:
                child.restarts = 0
            how = f"{_how(code)} (pid {process.pid})"
            if not child.restart or child.restarts >= self.policy.max_restarts:
                given_up = "" if not child.restart else f", after {child.restarts} restarts"
                self._give_up(child, f"{how}{given_up}")
                return
            child.restarts += 1
            delay = self.policy.delay(child.restarts)
            self.status(
                child.name,
                f"{how}; restarting in {delay:g} s "
                f"(restart {child.restarts} of {self.policy.max_restarts})",
            )
            child.backing_off = True
            await asyncio.sleep(delay)
            child.backing_off = False
            try:
                await self._spawn(child)
            except OSError as error:  # as a child that will not start: told, never left
                self._give_up(child, f"cannot be started again: {error}")
                return
            if child.stopping:  # asked to stop while this one was being started
                await _end(child.name, child.process)
                return
            if self.on_restart is not None:
                self.on_restart(child)

    def _give_up(self, child: Child, what: str) -> None:
        self.status(child.name, f"{what}; stopping")
        if not self.failed.done():
            self.failed.set_result(f"{child.name} {what}")

    async def stop(self, names: Sequence[str]) -> None:
        """Stop the children ``names``, all at once (SIGTERM, SIGKILL after
        :data:`STOP_WITHIN` s), and wait until each has exited and its output is relayed."""
        children = [
            self.children[name]
            for name in names
            if name in self.children and not self.children[name].stopping
        ]
        for child in children:
            child.stopping = True
        ended = await asyncio.gather(*(_terminate(child) for child in children))
        for child, code in zip(children, ended, strict=True):
            if code is not None:  # a status line per child stopped, so the order shows
                self.status(child.name, "stopped" if code == 0 else f"stopped: {_how(code)}")


async def _terminate(child: Child) -> int | None:
    """End ``child``; its exit code, or None when it was not running."""
    if child.backing_off and child.keeper is not None:
        child.keeper.cancel()  # nothing runs: the restart it waits for is not wanted
    process = child.process
    was_running = process is not None and process.returncode is None
    await _end(child.name, process)
    if child.keeper is not None:
        # It relays what is left of the output, sees `stopping` and returns.
        await asyncio.gather(child.keeper, return_exceptions=True)
    return process.returncode if was_running and process is not None else None


async def _end(name: str, process: asyncio.subprocess.Process | None) -> None:
    """SIGTERM, then SIGKILL after :data:`STOP_WITHIN` seconds; until ``process`` exited."""
    if process is None or process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        async with asyncio.timeout(STOP_WITHIN):
            await process.wait()
    except TimeoutError:
        log.warning("%s did not stop within %g s: killing it", name, STOP_WITHIN)
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def _relay(name: str, stream: asyncio.StreamReader | None) -> None:
    """Copy ``stream`` to stderr a line at a time, ``name | `` in front, until it ends."""
    if stream is None:
        return
    prefix = f"{name:<10} | ".encode()
    out = sys.stderr.buffer
    while True:
        try:
            line = await stream.readline()
        except ValueError:  # a line beyond _LINE_LIMIT: asyncio dropped it
            line = b"(a log line longer than 1 MiB, dropped)\n"
        if not line:
            return
        out.write(prefix + (line if line.endswith(b"\n") else line + b"\n"))
        out.flush()
