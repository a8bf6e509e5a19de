"""The task executor processes of the Pods that run one: :class:`ExecutorSupervisor`.

The shell half of :mod:`.executor`. The kubelet's shell tells it, at every pass over a Pod,
which process the Pod should have (:func:`~.executor.wanted_executor`); the supervisor starts
it, probes it, stops it, and reports what it saw as an :class:`~.executor.ExecutorState`, which
the planner decides with. Every wait happens in a task of its own, never in the kubelet's
workers: a process ending, or answering ``/health``, requeues its Pod through ``on_change``.

- Where: one temporary directory per supervisor (under ``task_executor_dir``, else the
  system's; made at start while the task executor is on, else at the first Pod that needs it),
  removed when it closes; in it one directory per Pod uid holding the executor's
  data dir (``data/``, kept across restarts so the executor recovers its tasks), its log
  (``executor.log``, appended to by every process of the Pod) and ``executor.pid`` (the pid of
  the process running now; absent while none runs), so a test or a person can find, read and
  kill it. A Pod's directory goes when the Pod does.
- Starting: ``task_executor_command`` on ``<podIP>:5758``, in a session of its own (so stopping
  it reaches what it started too), stdin from /dev/null, stdout and stderr to the log. It also
  dies with the kubelet: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` in the child, which fires when
  the thread that forked it ends (the event loop's thread, which is the cluster's), so a killed
  cluster leaves no executor behind. A command that cannot be started at all is an exit (128)
  like any other, which the planner turns into a crash loop.
- Probing: ``GET /health`` every few tens of milliseconds, backing off to 0.5 s, until an
  answer below 400 (what a kubelet's httpGet probe accepts) or the process ends; once is
  enough, as a readiness probe that passed.
- Stopping: SIGTERM to its session, SIGKILL after ``task_executor_grace`` seconds, then reaped.
  A process is stopped when the Pod should no longer have it (deleted, its container no longer
  running) or should have one for a newer container instance, which is started only once the
  old one is gone: both listen on the same address and use the same data dir.
- Removing: when the Pod goes, its tasks go too, as a container's processes go with its
  cgroup (each runs in a session of its own, which outlives its executor by design). The
  executor's own command line kills them (:data:`~.config.TASK_KILL_COMMAND`, its
  ``--kill-tasks``), a process boundary rather than an import: this package may use nothing
  of the services but their command lines. Then the directory is removed.
- agent-sandbox's runtime: a Pod that asks for it (:func:`~.executor.runtime_of`) gets
  ``sandbox_runtime_command`` on ``<podIP>:8888`` instead, probed at ``GET /``, with the Pod's
  directory's ``workspace/`` as the sandbox's own directory (and no ``data/``, so there are no
  tasks to kill: the runtime kills its commands itself when stopped, see
  :mod:`devtools.sandboxruntime`). Its log and pid file are the executor's.
- Addresses: the loopback /16 the Pods' IPs come from is claimed per supervisor (see
  :func:`claim_network`), so that two clusters on one machine (parallel test runs) never hand
  out the same ``127.N.x.y`` and fight over its port 5758.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import importlib.util
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from devtools.cluster.controllers.kubelet.config import TASK_KILL_COMMAND, KubeletConfig
from devtools.cluster.controllers.kubelet.executor import (
    AGENT_SANDBOX,
    EXECUTOR_PORT,
    ExecutorState,
    WantedExecutor,
    container_exit_code,
    executor_argv,
    process_command,
    process_port,
)
from devtools.cluster.controllers.kubelet.nodes import LOOPBACK_POD_NETWORK

__all__ = ["ExecutorFiles", "ExecutorSupervisor", "claim_network", "kill_tasks", "runnable_module"]

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
# Where a sandbox runtime finds its container's env (devtools/sandboxruntime/__main__.py reads
# it: a process boundary, not an import).
SANDBOX_ENV_VARIABLE = "SANDBUS_SANDBOX_ENV"
_CANNOT_START = 128  # what a runtime reports for a container whose command could not be run
_PROBE_FIRST, _PROBE_MAX = 0.02, 0.5
_PROBE_TIMEOUT = aiohttp.ClientTimeout(total=1.0)
# The second octets tried for the loopback range: 127.244 first (the documented one), never
# 127.0 (127.0.0.1 and, on Debian, the host name's 127.0.1.1 live there).
_NETWORK_OCTETS = (*range(244, 256), *range(1, 244))
# Inside each claimed /16 the claim itself is held on an address no pod gets (nodes are < 255).
_CLAIM_HOST = "255.254"
# For TASK_KILL_COMMAND: an interpreter's start and a few signals, on a machine under load.
_KILL_TIMEOUT = 30.0


def claim_network(preferred: str | None) -> tuple[str, socket.socket | None]:
    """The loopback /16 for this kubelet's executor pods, and the socket that holds it.

    ``preferred`` (``task_executor_network``) is taken as given. Otherwise the first 127.N whose
    ``127.N.255.254:5758`` this process can listen on: the listening socket is the claim, held
    until the kubelet closes it and released by the kernel if the process dies, so concurrent
    clusters each get their own range without any file to clean up."""
    if preferred is not None:
        return preferred, None
    for octet in _NETWORK_OCTETS:
        network = f"127.{octet}"
        claim = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            claim.bind((f"{network}.{_CLAIM_HOST}", EXECUTOR_PORT))
            claim.listen(1)
        except OSError:
            claim.close()
            continue
        return network, claim
    # Every range taken (or no loopback /8 at all): the documented one, first come first served.
    return LOOPBACK_POD_NETWORK, None


def runnable_module(module: str) -> bool:
    """Whether ``python -m module`` has something to run: a plain module, or a package with a
    ``__main__`` (a package still being written may have neither yet)."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is None or spec.submodule_search_locations is None:
            return spec is not None
        return importlib.util.find_spec(f"{module}.__main__") is not None
    except Exception:  # a missing parent, or a package whose __init__ fails: nothing to run
        return False


def _may_hold_tasks(data_dir: Path) -> bool:
    """Whether ``data_dir`` has a directory in it: every task has one, so a data dir without
    (most Pods', or one never made) has nothing to kill and needs no process started."""
    try:
        with os.scandir(data_dir) as entries:
            return any(entry.is_dir(follow_symlinks=False) for entry in entries)
    except OSError:
        return False


async def kill_tasks(data_dir: Path, command: tuple[str, ...] = TASK_KILL_COMMAND) -> None:
    """SIGKILL the process group of every task of ``data_dir`` (its supervisor, hooks and
    process) by running ``command`` (the executor's ``--kill-tasks``) with ``{data_dir}``
    filled in. A command that cannot start, fails or outlives ``_KILL_TIMEOUT`` is logged, and
    the caller goes on: the tasks are left running, as a leak, not an error."""
    if not _may_hold_tasks(data_dir):
        return
    argv = [part.format(data_dir=str(data_dir)) for part in command]
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as error:
        log.warning("kubelet: cannot start %r to kill the tasks: %s", argv, error)
        return
    try:
        async with asyncio.timeout(_KILL_TIMEOUT):
            output, _ = await process.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        log.warning("kubelet: %r did not end within %s s; tasks may be left", argv, _KILL_TIMEOUT)
        return
    text = output.decode(errors="replace").strip()
    if process.returncode != 0:
        log.warning("kubelet: %r exited with %s: %s", argv, process.returncode, text)
    elif text:
        log.info("kubelet: tasks of %s killed, process groups %s", data_dir, text.split())


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _die_with(parent: int) -> Callable[[], None] | None:
    """The preexec function that ties a child's life to this process (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = _libc()  # loaded here, not in the child between fork and exec

    def preexec() -> None:  # pragma: no cover - runs in the child before exec
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl: nobody would stop this one
            os._exit(1)

    return preexec


def _signal_session(pid: int, signum: int) -> None:
    """Signal the process's session (it leads its own group), whatever is left of it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


@dataclass(frozen=True)
class ExecutorFiles:
    """Where a Pod's executor keeps its things, and the pid of the process running now."""

    pid: int | None
    data_dir: Path
    log: Path
    pid_file: Path


@dataclass(eq=False)
class _Run:
    """One executor process, for one container instance of one Pod."""

    uid: str
    key: Hashable
    wanted: WantedExecutor
    pod_dir: Path
    process: asyncio.subprocess.Process | None = None
    healthy: bool = False
    exit_code: int | None = None
    spawned: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    stopper: asyncio.Task[None] | None = None

    def state(self) -> ExecutorState:
        return ExecutorState(self.wanted.container_id, self.healthy, self.exit_code)


class ExecutorSupervisor:
    """Runs the task executor process of each Pod that should have one.

    ``await start()`` claims the network (:attr:`network`) and makes the directory
    (:attr:`root`); ``await close()`` stops every process and removes the directory."""

    def __init__(self, config: KubeletConfig, on_change: Callable[[Hashable], None]) -> None:
        assert config.runs_processes
        self.config = config
        self.grace = config.task_executor_grace
        self._parent_dir = config.task_executor_dir
        self._preferred_network = config.task_executor_network
        self._on_change = on_change
        self._runs: dict[str, _Run] = {}
        self._dirs: set[str] = set()  # the uids with a directory: most deleted pods have none
        self._background: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None
        self._claim: socket.socket | None = None
        self._closing = False
        self.network = self._preferred_network or LOOPBACK_POD_NETWORK
        self.root: Path | None = None
        self._started = False

    async def start(self) -> None:
        self.network, self._claim = claim_network(self._preferred_network)
        # A session of its own: the probes carry none of the kubelet's headers to the pods.
        self._session = aiohttp.ClientSession(timeout=_PROBE_TIMEOUT)
        self._started = True
        if self.config.task_executor_command is not None:
            self._make_root()
        log.info("kubelet: pod processes on %s.0.0/16, files under %s", self.network, self.root)

    def _make_root(self) -> Path:
        """The directory of the Pods' directories: made at start while the task executor is on
        (as it always was), else at the first Pod that needs one, so that a cluster that runs
        only sandbox runtimes, and none yet, leaves no directory behind."""
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="devcluster-executors-", dir=self._parent_dir))
        return self.root

    async def close(self) -> None:
        self._closing = True
        for run in list(self._runs.values()):
            self._stop(run)
        while self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        self._runs.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self.root is not None:
            for pod_dir in [p for p in self.root.iterdir() if p.is_dir()]:
                await kill_tasks(pod_dir / "data")
            await asyncio.to_thread(shutil.rmtree, self.root, True)
            self.root = None
        if self._claim is not None:
            self._claim.close()
            self._claim = None

    # -- what the shell asks -------------------------------------------------------------------

    def ensure(self, uid: str, key: Hashable, wanted: WantedExecutor | None) -> None:
        """Bring the Pod's process in line with ``wanted``; returns at once (the work is done
        in tasks, which requeue ``key`` when something the planner reads changes)."""
        run = self._runs.get(uid)
        if run is not None:
            if wanted is not None and run.wanted == wanted:
                return  # it runs for this container instance (or ended: the planner says so)
            if run.exit_code is None:
                # For an earlier instance, or none should run: the next starts once it is gone.
                self._stop(run)
                return
            del self._runs[uid]
        if wanted is not None and not self._closing and self._started:
            self._runs[uid] = self._spawn(uid, key, wanted)

    def release(self, uid: str) -> None:
        """The Pod is gone: stop its process, then remove its directory."""
        run = self._runs.pop(uid, None)
        if self.root is None or uid not in self._dirs:
            return
        self._dirs.discard(uid)
        self._track(self._remove(run, self.root / uid))

    def state(self, uid: str) -> ExecutorState | None:
        run = self._runs.get(uid)
        return None if run is None else run.state()

    def files(self, uid: str) -> ExecutorFiles | None:
        """Where the Pod's executor keeps its things (None: it never had one here)."""
        run = self._runs.get(uid)
        if self.root is None or uid not in self._dirs:
            return None
        pod_dir = self.root / uid
        pid = None
        if run is not None and run.process is not None and run.exit_code is None:
            pid = run.process.pid
        data_dir = pod_dir / ("workspace" if run is not None and _is_runtime(run) else "data")
        return ExecutorFiles(pid, data_dir, pod_dir / "executor.log", _pid_file(pod_dir))

    # -- the processes -------------------------------------------------------------------------

    def _track(self, coroutine: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _spawn(self, uid: str, key: Hashable, wanted: WantedExecutor) -> _Run:
        run = _Run(uid, key, wanted, self._make_root() / uid)
        self._dirs.add(uid)
        run.task = self._track(self._supervise(run))
        return run

    async def _supervise(self, run: _Run) -> None:
        """Start the process, probe it until it answers, and record how it ended."""
        data_dir = run.pod_dir / ("workspace" if _is_runtime(run) else "data")
        data_dir.mkdir(parents=True, exist_ok=True)
        command = process_command(self.config, run.wanted.kind)
        assert command is not None  # wanted_executor wants none of a kind turned off
        port = process_port(run.wanted.kind)
        argv = executor_argv(command, run.wanted.host, port, str(data_dir))
        with (run.pod_dir / "executor.log").open("ab") as output:
            try:
                run.process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=output,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_die_with(os.getpid()),
                    env=_environment(run.wanted),
                )
            except OSError as error:
                output.write(f"devcluster kubelet: cannot start {argv!r}: {error}\n".encode())
                log.warning("kubelet: cannot start the task executor %r: %s", argv, error)
                run.exit_code = _CANNOT_START
                self._on_change(run.key)
                return
            finally:
                run.spawned.set()
        process = run.process
        probe = asyncio.create_task(self._probe(run))
        try:
            _pid_file(run.pod_dir).write_text(f"{process.pid}\n")
            log.info(
                "kubelet: %s of pod %s (container %s) started on %s:%s, pid %s",
                run.wanted.kind,
                run.uid,
                run.wanted.container,
                run.wanted.host,
                port,
                process.pid,
            )
            await process.wait()
        finally:
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe
            # Whatever it started and left behind; and itself, should we leave before it ended
            # (cancelled): a process nobody watches must not live on.
            _signal_session(process.pid, signal.SIGKILL)
            _pid_file(run.pod_dir).unlink(missing_ok=True)
            ended = process.returncode
            run.exit_code = container_exit_code(-signal.SIGKILL if ended is None else ended)
            log.info(
                "kubelet: %s of pod %s (pid %s) ended with %s",
                run.wanted.kind,
                run.uid,
                process.pid,
                run.exit_code,
            )
            self._on_change(run.key)

    async def _probe(self, run: _Run) -> None:
        assert self._session is not None
        path = "/" if _is_runtime(run) else "/health"
        url = f"http://{run.wanted.host}:{process_port(run.wanted.kind)}{path}"
        delay = _PROBE_FIRST
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                async with self._session.get(url) as response:
                    if response.status < 400:
                        run.healthy = True
                        self._on_change(run.key)
                        return
            await asyncio.sleep(delay)
            delay = min(delay * 2, _PROBE_MAX)

    def _stop(self, run: _Run) -> None:
        if run.stopper is None:
            run.stopper = self._track(self._terminate(run))

    async def _terminate(self, run: _Run) -> None:
        """SIGTERM, SIGKILL after the grace, and wait until the process is reaped."""
        await run.spawned.wait()
        process, supervising = run.process, run.task
        assert supervising is not None
        if process is not None and process.returncode is None:
            _signal_session(process.pid, signal.SIGTERM)
            try:
                async with asyncio.timeout(self.grace):
                    await asyncio.shield(supervising)
            except TimeoutError:
                log.warning("kubelet: task executor pid %s outlived SIGTERM", process.pid)
                _signal_session(process.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):  # it logs and records its own failures
            await supervising

    async def _remove(self, run: _Run | None, pod_dir: Path) -> None:
        if run is not None:
            self._stop(run)
            assert run.stopper is not None
            await run.stopper
        # The Pod's tasks go with it, as a container's processes go with its cgroup: each
        # runs in a session of its own, which outlives its executor by design.
        await kill_tasks(pod_dir / "data")
        await asyncio.to_thread(shutil.rmtree, pod_dir, True)


def _environment(wanted: WantedExecutor) -> dict[str, str] | None:
    """The process's environment: this one's, plus, for a sandbox runtime, the container's
    ``env`` in ``SANDBUS_SANDBOX_ENV`` (JSON), which it hands to its commands."""
    if not wanted.env:
        return None
    return {**os.environ, SANDBOX_ENV_VARIABLE: json.dumps(dict(wanted.env))}


def _is_runtime(run: _Run) -> bool:
    return run.wanted.kind == AGENT_SANDBOX


def _pid_file(pod_dir: Path) -> Path:
    return pod_dir / "executor.pid"
