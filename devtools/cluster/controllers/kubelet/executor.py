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

The same machinery runs agent-sandbox's runtime (:mod:`devtools.sandboxruntime`, what the
SDK's ``commands.run`` and ``files.*`` talk to) for the Pods that ask for it: a container whose
image is agent-sandbox's python runtime (the repository's last path segment is
``python-runtime-sandbox``, as in the SDK's quick-start template), or any container of a Pod
annotated ``devcluster.sandbus.io/runtime: agent-sandbox`` (its first container, unless the
annotation's value names one: ``agent-sandbox/<container>``). Such a Pod gets a process of the
kind :data:`AGENT_SANDBOX` on ``<podIP>:8888``, probed at ``GET /`` (the quick-start template's
readiness probe), run with ``KubeletConfig.sandbox_runtime_command``. A Pod that matches both
rules is the task executor's: :func:`runtime_of` decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from api.objects import Json
from devtools.cluster.controllers.kubelet.config import KubeletConfig
from devtools.cluster.controllers.kubelet.statuses import container_statuses, containers

__all__ = [
    "AGENT_SANDBOX",
    "EXECUTOR_NAME",
    "EXECUTOR_PORT",
    "RUNTIME_ANNOTATION",
    "SANDBOX_RUNTIME_IMAGE",
    "SANDBOX_RUNTIME_PORT",
    "TASK_EXECUTOR",
    "ExecutorState",
    "WantedExecutor",
    "container_env",
    "container_exit_code",
    "current_state",
    "executor_argv",
    "executor_container",
    "process_command",
    "process_port",
    "real_container",
    "runs_task_executor",
    "runtime_of",
    "sandbox_runtime_container",
    "wanted_executor",
]


EXECUTOR_NAME: Final = "task-executor"
EXECUTOR_PORT: Final = 5758  # where OpenSandbox's controller reaches it: <podIP>:5758

# The kinds of real process a Pod may get.
TASK_EXECUTOR: Final = "task-executor"
AGENT_SANDBOX: Final = "agent-sandbox"
RUNTIME_ANNOTATION: Final = "devcluster.sandbus.io/runtime"
SANDBOX_RUNTIME_IMAGE: Final = "python-runtime-sandbox"  # agent-sandbox's image repository name
SANDBOX_RUNTIME_PORT: Final = 8888  # where the SDK and its router reach it

# The stages in which a container of the Pod may be running (see :mod:`.stages`); in any other a
# Pod is not started yet, is going away or is finished, and no process of its should run.
_LIVE_STAGES: Final = frozenset({"running", "ready", "backoff", "exited"})


@dataclass(frozen=True)
class WantedExecutor:
    """The process that should run for a Pod: for which container instance, on which IP."""

    container: str
    container_id: str
    host: str
    kind: str = TASK_EXECUTOR
    # The container's literal ``env`` (a runtime's commands see them, as in a container).
    env: tuple[tuple[str, str], ...] = ()


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


def _image_repository(image: str) -> str:
    """The last path segment of an image reference, without its tag or digest."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def sandbox_runtime_container(pod: Json) -> str | None:
    """The name of the container of ``pod`` that runs agent-sandbox's runtime, if one does."""
    declared = containers(pod)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    asked = str(annotations.get(RUNTIME_ANNOTATION) or "")
    if asked == AGENT_SANDBOX and declared:
        return str(declared[0].get("name") or "")
    if asked.startswith(f"{AGENT_SANDBOX}/"):
        wanted = asked.split("/", 1)[1]
        return wanted if any(c.get("name") == wanted for c in declared) else None
    for container in declared:
        if _image_repository(str(container.get("image") or "")) == SANDBOX_RUNTIME_IMAGE:
            return str(container.get("name") or "")
    return None


def runtime_of(pod: Json) -> tuple[str, str] | None:
    """``(kind, container)`` of the real process ``pod`` asks for, if any."""
    executor = executor_container(pod)
    if executor is not None:
        return TASK_EXECUTOR, executor
    runtime = sandbox_runtime_container(pod)
    return (AGENT_SANDBOX, runtime) if runtime is not None else None


def process_command(config: KubeletConfig, kind: str) -> tuple[str, ...] | None:
    """The argv template that runs a process of ``kind`` (None: that kind is turned off)."""
    if kind == AGENT_SANDBOX:
        return config.sandbox_runtime_command
    return config.task_executor_command


def process_port(kind: str) -> int:
    return SANDBOX_RUNTIME_PORT if kind == AGENT_SANDBOX else EXECUTOR_PORT


def real_container(pod: Json, config: KubeletConfig) -> tuple[str, str] | None:
    """:func:`runtime_of`, when the config runs that kind of process."""
    found = runtime_of(pod)
    if found is None or process_command(config, found[0]) is None:
        return None
    return found


def _container_status(pod: Json, name: str) -> Json:
    return next((s for s in container_statuses(pod) if s.get("name") == name), {})


def wanted_executor(pod: Json, stage: str, config: KubeletConfig) -> WantedExecutor | None:
    """The executor process ``pod`` should have now (None: none, or the feature is off).

    ``stage`` is :func:`~.stages.observe_stage`'s, which knows the Pods the kubelet leaves to
    others (other nodes, Jobs' Pods): none of those gets a process either."""
    if stage.split(":", 1)[0] not in _LIVE_STAGES:
        return None
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    found = real_container(pod, config)
    host = str((pod.get("status") or {}).get("podIP") or "")
    if found is None or not host:
        return None
    kind, name = found
    status = _container_status(pod, name)
    if not isinstance((status.get("state") or {}).get("running"), dict):
        return None  # waiting out a back-off, or its PID 1 ended (``kill 1``)
    env = container_env(pod, name) if kind == AGENT_SANDBOX else ()
    return WantedExecutor(name, str(status.get("containerID") or ""), host, kind, env)


def container_env(pod: Json, name: str) -> tuple[tuple[str, str], ...]:
    """The ``env`` entries of container ``name`` that carry a ``value`` (``valueFrom`` needs
    the kubelet's secret and field lookups, which the development cluster does not run)."""
    container = next((c for c in containers(pod) if c.get("name") == name), {})
    return tuple(
        (str(entry["name"]), str(entry.get("value") or ""))
        for entry in container.get("env") or ()
        if entry.get("name") and "valueFrom" not in entry
    )


def current_state(pod: Json, state: ExecutorState | None) -> ExecutorState | None:
    """``state`` if it is about the executor container instance ``pod`` shows, else None: a
    process of an earlier instance says nothing about the one the Pod runs now."""
    found = runtime_of(pod)
    if state is None or found is None:
        return None
    name = found[1]
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
