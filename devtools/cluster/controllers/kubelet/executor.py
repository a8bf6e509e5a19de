"""OpenSandbox's task executor, run for real in the Pods that run one: which Pods those are, what
must run for them, and what the kubelet last saw of the process.

Nothing else in a simulated Pod runs, but a controller talks to its task executor over HTTP at
``<podIP>:5758`` (``setTasks``/``getTasks``), and a stand-in that only fakes the Pod's status
would leave it talking to nobody. So the shell runs one executor process per such Pod, on this
machine, listening on exactly the Pod's IP (a loopback one, see :mod:`.nodes`), and the planner
lets the Pod become Ready only once that process answered ``GET /health``. This module is the
pure part of it; :mod:`.supervisor` starts, probes and stops the processes.

- Which Pods: :func:`executor_container` is the rule. A container of ``spec.containers`` runs
  the executor when it is named ``task-executor`` or an entry of its ``command`` or ``args``
  mentions ``task-executor``: OpenSandbox's sample Pool runs it as the sandbox container's
  command (``/opt/opensandbox/bin/task-executor -listen-addr=0.0.0.0:5758``), its sample
  BatchSandbox as a sidecar of that name given only flags. Init containers do not count (the
  Pool's one copies the binary in and ends).
- What must run: :func:`wanted_executor`, one process while that container runs in a live Pod,
  for that container instance (its ``containerID``), so a restarted container gets a new
  process on the same data dir, and a Pod being deleted, finished or not started yet gets none.
- What was seen: :class:`ExecutorState`, for one container instance: whether the process
  answered ``/health`` and, once it ended, its exit code as a container's
  (:func:`container_exit_code`: 128 + the signal when a signal ended it, as runtimes report).
  :func:`current_state` keeps it only while it is about the container instance the Pod shows.
- How it is run: :func:`executor_argv` fills ``{host}``, ``{port}`` and ``{data_dir}`` into
  ``KubeletConfig.task_executor_command``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from api.objects import Json
from devtools.cluster.controllers.kubelet.config import KubeletConfig
from devtools.cluster.controllers.kubelet.statuses import container_statuses, containers

__all__ = [
    "EXECUTOR_NAME",
    "EXECUTOR_PORT",
    "ExecutorState",
    "WantedExecutor",
    "container_exit_code",
    "current_state",
    "executor_argv",
    "executor_container",
    "runs_task_executor",
    "wanted_executor",
]


EXECUTOR_NAME: Final = "task-executor"
EXECUTOR_PORT: Final = 5758  # where OpenSandbox's controller reaches it: <podIP>:5758

# The stages in which a container of the Pod may be running (see :mod:`.stages`); in any other a
# Pod is not started yet, is going away or is finished, and no process of its should run.
_LIVE_STAGES: Final = frozenset({"running", "ready", "backoff", "exited"})


@dataclass(frozen=True)
class WantedExecutor:
    """The process that should run for a Pod: for which container instance, on which IP."""

    container: str
    container_id: str
    host: str


@dataclass(frozen=True)
class ExecutorState:
    """What the shell saw of the process it runs for one container instance."""

    container_id: str
    healthy: bool = False  # it answered GET /health since it started
    exit_code: int | None = None  # it ended (None: starting, running or being stopped)

    @property
    def alive(self) -> bool:
        return self.exit_code is None


def executor_container(pod: Json) -> str | None:
    """The name of the container of ``pod`` that runs the task executor, if one does."""
    for container in containers(pod):
        name = str(container.get("name") or "")
        if name == EXECUTOR_NAME:
            return name
        words = [*(container.get("command") or ()), *(container.get("args") or ())]
        if any(EXECUTOR_NAME in str(word) for word in words):
            return name
    return None


def runs_task_executor(pod: Json) -> bool:
    return executor_container(pod) is not None


def _container_status(pod: Json, name: str) -> Json:
    return next((s for s in container_statuses(pod) if s.get("name") == name), {})


def wanted_executor(pod: Json, stage: str, config: KubeletConfig) -> WantedExecutor | None:
    """The executor process ``pod`` should have now (None: none, or the feature is off).

    ``stage`` is :func:`~.stages.observe_stage`'s, which knows the Pods the kubelet leaves to
    others (other nodes, Jobs' Pods): none of those gets a process either."""
    if config.task_executor_command is None or stage.split(":", 1)[0] not in _LIVE_STAGES:
        return None
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    name = executor_container(pod)
    host = str((pod.get("status") or {}).get("podIP") or "")
    if name is None or not host:
        return None
    status = _container_status(pod, name)
    if not isinstance((status.get("state") or {}).get("running"), dict):
        return None  # waiting out a back-off, or its PID 1 ended (``kill 1``)
    return WantedExecutor(name, str(status.get("containerID") or ""), host)


def current_state(pod: Json, state: ExecutorState | None) -> ExecutorState | None:
    """``state`` if it is about the executor container instance ``pod`` shows, else None: a
    process of an earlier instance says nothing about the one the Pod runs now."""
    name = executor_container(pod)
    if state is None or name is None:
        return None
    if str(_container_status(pod, name).get("containerID") or "") != state.container_id:
        return None
    return state


def container_exit_code(returncode: int) -> int:
    """A process's return code as a container's exit code: a signal N shows as 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def executor_argv(template: tuple[str, ...], host: str, port: int, data_dir: str) -> list[str]:
    """``task_executor_command`` with its placeholders filled in (other braces are left as they
    are, so an argument may carry JSON)."""
    values = {"{host}": host, "{port}": str(port), "{data_dir}": data_dir}
    argv = []
    for word in template:
        for placeholder, value in values.items():
            word = word.replace(placeholder, value)
        argv.append(word)
    return argv
