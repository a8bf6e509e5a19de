"""What can be tuned in the simulated scheduler, kubelet and Job controller, and which failure
each pod is given.

:class:`KubeletConfig` holds the delays (in seconds, every one multiplied by ``time_scale`` via
:meth:`KubeletConfig.scaled`), the number of nodes and their capacity, the seed and the failure
rules. It is frozen: the planners read it, nobody changes it while the cluster runs.

Failure modes are chosen per object by :func:`failure_mode`: the annotation
``devcluster.sandbus.io/fail`` first, then the first matching :class:`FailureRule` (label
selector, namespace, name pattern, probability). The probability is drawn from the seed and the
object's uid, not from a shared random stream, so the same pod gets the same verdict on every
pass and a run is reproducible whatever order the events arrive in. The modes:

- ``image-pull`` — ErrImagePull, then ImagePullBackOff;
- ``crash`` — CrashLoopBackOff with growing back-off, ``restartCount`` and
  ``lastState.terminated``;
- ``exit-0`` / ``exit-1`` — the containers exit with that code; the phase follows
  ``restartPolicy``;
- ``never-ready`` — running, never Ready;
- ``unschedulable`` — PodScheduled=False, Unschedulable.

A Job fails under ``crash``, ``exit-1`` or ``image-pull`` (on the Job or its Pod template).
An image-committer Job (see :mod:`.committer`) also fails when its source Pod carries
``devcluster.sandbus.io/fail-commit``, with the annotation's value as the committer's message.

The pods that run OpenSandbox's task executor get a real process (:mod:`.executor`):
``task_executor_command`` is its argv, with ``{host}``, ``{port}`` and ``{data_dir}`` filled in
per pod (None: no process, such pods are simulated like the others);
``task_executor_network`` the first two octets of the loopback range their IPs come from (None:
the kubelet claims a free one when it starts, 127.244 first); ``task_executor_dir`` where the
kubelet makes its temporary directory of per-pod data dirs (None: the system's temp dir);
``task_executor_grace`` how long a stopped executor gets between SIGTERM and SIGKILL. These are
real seconds of a real process: ``time_scale`` does not apply. The Pods that ask for
agent-sandbox's runtime get one the same way, run with ``sandbox_runtime_command`` (same
placeholders; None: such pods are simulated without one), in the same network, directory and
grace.
"""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from devtools.cluster.apirules.selectors import LabelSelector, parse_label_selector

if TYPE_CHECKING:
    # Only for the annotation: the Job controller's module imports this one.
    from devtools.cluster.controllers.kubelet.jobs import JobAction

__all__ = [
    "DEFAULT_SANDBOX_RUNTIME_COMMAND",
    "DEFAULT_TASK_EXECUTOR_COMMAND",
    "DEFAULT_TASK_EXECUTOR_MODULE",
    "FAILURE_MODES",
    "FAIL_ANNOTATION",
    "FAIL_COMMIT_ANNOTATION",
    "TASK_KILL_COMMAND",
    "FailureRule",
    "KubeletConfig",
    "failure_mode",
]

FAIL_ANNOTATION = "devcluster.sandbus.io/fail"
# On a Pod that an image-committer Job commits from: the commit fails, with this value (or a
# default message) as what the committer reports.
FAIL_COMMIT_ANNOTATION = "devcluster.sandbus.io/fail-commit"
FAILURE_MODES = frozenset(
    {"image-pull", "crash", "exit-0", "exit-1", "never-ready", "unschedulable"}
)
# The in-repo executor, run by this interpreter so that it sees the same packages.
DEFAULT_TASK_EXECUTOR_MODULE = "services.taskexecutor"
_SERVING_ARGS: tuple[str, ...] = (
    "--host",
    "{host}",
    "--port",
    "{port}",
    "--data-dir",
    "{data_dir}",
)
DEFAULT_TASK_EXECUTOR_COMMAND: tuple[str, ...] = (
    sys.executable,
    "-m",
    DEFAULT_TASK_EXECUTOR_MODULE,
    *_SERVING_ARGS,
)
# agent-sandbox's runtime for the Pods that ask for it (devtools/sandboxruntime), by this
# interpreter too, with the same arguments.
DEFAULT_SANDBOX_RUNTIME_COMMAND: tuple[str, ...] = (
    sys.executable,
    "-m",
    "devtools.sandboxruntime",
    *_SERVING_ARGS,
)
# What SIGKILLs the tasks of a Pod's data dir when the Pod goes (their supervisors outlive the
# executor by design, as a container's processes would not outlive its cgroup): the in-repo
# executor's own command line, whatever task_executor_command runs, so that this package needs
# none of the executor's code, only its process boundary.
TASK_KILL_COMMAND: tuple[str, ...] = (
    sys.executable,
    "-m",
    DEFAULT_TASK_EXECUTOR_MODULE,
    "--data-dir",
    "{data_dir}",
    "--kill-tasks",
)


@dataclass(frozen=True)
class FailureRule:
    """Inject ``mode`` into pods (or Jobs) that match every criterion given."""

    mode: str
    selector: str = ""  # label selector text; empty matches every object
    namespace: str | None = None
    name_pattern: str | None = None  # regular expression, matched against the whole name
    probability: float = 1.0
    _parsed: LabelSelector = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in FAILURE_MODES:
            raise ValueError(f"unknown failure mode {self.mode!r}; known: {sorted(FAILURE_MODES)}")
        object.__setattr__(self, "_parsed", parse_label_selector(self.selector))

    def matches(self, obj: Mapping[str, Any], seed: int) -> bool:
        metadata = obj.get("metadata") or {}
        if not self._parsed.matches(metadata.get("labels") or {}):
            return False
        if self.namespace is not None and metadata.get("namespace") != self.namespace:
            return False
        if self.name_pattern is not None and not re.fullmatch(
            self.name_pattern, metadata.get("name") or ""
        ):
            return False
        if self.probability >= 1.0:
            return True
        # Drawn from the seed and the uid: the same pod gets the same verdict on every pass.
        draw = random.Random(f"{seed}:{self.mode}:{metadata.get('uid')}").random()
        return draw < self.probability


@dataclass(frozen=True)
class KubeletConfig:
    """Knobs of the simulated scheduler, kubelet and Job controller (delays in seconds)."""

    nodes: int = 1
    node_prefix: str = "devcluster-node-"
    schedule_delay: float = 0.02
    start_delay: float = 0.1
    pod_ready_delay: float = 0.2
    termination_delay: float = 0.05
    run_duration: float = 0.2  # how long containers run before exit-*/crash modes end them
    image_pull_backoff_delay: float = 0.1  # ErrImagePull → ImagePullBackOff
    crash_backoff: float = 0.2  # first CrashLoopBackOff wait; doubles per restart
    max_crash_backoff: float = 5.0
    time_scale: float = 1.0
    seed: int = 0
    failure_rules: tuple[FailureRule, ...] = ()
    manage_jobs: bool = True
    job_delay: float = 0.1
    job_action: JobAction | None = None
    field_manager: str = "kubelet"
    workers: int = 4
    max_pods: int = 110
    task_executor_command: tuple[str, ...] | None = DEFAULT_TASK_EXECUTOR_COMMAND
    task_executor_network: str | None = None  # "127.N"; None: claimed at start
    task_executor_dir: str | None = None
    task_executor_grace: float = 2.0
    sandbox_runtime_command: tuple[str, ...] | None = DEFAULT_SANDBOX_RUNTIME_COMMAND

    def __post_init__(self) -> None:
        for name in ("task_executor_command", "sandbox_runtime_command"):
            command = getattr(self, name)
            if command is not None:
                # From a dict of options (the command line, JSON) it may come as a list.
                object.__setattr__(self, name, tuple(str(arg) for arg in command))
        network = self.task_executor_network
        if network is not None:
            octets = network.split(".")
            if (
                len(octets) != 2
                or octets[0] != "127"
                or not octets[1].isdigit()
                or not 0 <= int(octets[1]) <= 255
            ):
                raise ValueError(
                    f"task_executor_network must be the first two octets of a loopback /16, "
                    f"like 127.244; got {network!r}"
                )

    @property
    def runs_processes(self) -> bool:
        """Whether some Pods get a real process (a task executor or a sandbox runtime)."""
        return self.task_executor_command is not None or self.sandbox_runtime_command is not None

    def scaled(self, seconds: float) -> float:
        return seconds * self.time_scale


def failure_mode(obj: Mapping[str, Any], config: KubeletConfig) -> str | None:
    """The annotation first, then the first matching rule; unknown annotation values are ignored."""
    metadata = obj.get("metadata") or {}
    annotated = (metadata.get("annotations") or {}).get(FAIL_ANNOTATION)
    if annotated in FAILURE_MODES:
        return str(annotated)
    for rule in config.failure_rules:
        if rule.matches(obj, config.seed):
            return rule.mode
    return None
