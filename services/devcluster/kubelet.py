"""The development cluster's scheduler, kubelet and Job controller, simulated (spec §4.4).

No container ever runs. What is simulated is what the API shows while containers run: a Pod
moves Pending → scheduled → ContainerCreating → Running → Ready with the status a real kubelet
writes (conditions in upstream order with stable ``lastTransitionTime``, ``containerStatuses``,
``podIP``/``podIPs`` from a per-node CIDR, ``hostIP``, ``startTime``), and deleting it goes
through graceful termination before the final ``DELETE`` with ``gracePeriodSeconds=0``.

Shape: functional core, imperative shell.

- The core is :func:`plan_pod` and :func:`plan_job`: given one object as last observed, what the
  kubelet remembers about it (:class:`StageMemory`: which stage it was in and since when), the
  time and a :class:`ClusterView`, they return the writes to make now and when to look again.
  They are pure, so every stage and failure mode is unit-tested without a server.
- The shell, :class:`Kubelet`, talks to the API server over HTTP exactly as the real components
  do: it registers Node objects, list+watches Pods (and Jobs) through an
  :class:`~services.devcluster.informer.Informer` (relisting on 410), binds through the
  ``pods/binding`` subresource, writes ``pods/status`` with a merge patch carrying the observed
  resourceVersion as a precondition (a 409 just means a newer version is on its way), and
  deletes with a uid precondition, as the kubelet's status manager does.

Failure modes are chosen per pod by the annotation ``devcluster.sandbus.io/fail`` or by
:class:`FailureRule` s in the config (label selector, namespace, name pattern, probability drawn
from the seed and the pod's uid, so a run is reproducible): ``image-pull`` (ErrImagePull, then
ImagePullBackOff), ``crash`` (CrashLoopBackOff with growing back-off, ``restartCount`` and
``lastState.terminated``), ``exit-0``/``exit-1`` (the containers exit; the phase follows
``restartPolicy``), ``never-ready`` and ``unschedulable`` (PodScheduled=False, Unschedulable).

Each node holds at most ``max_pods`` Pods (110, the kubelet's default ``--max-pods``, which is
also the ``pods`` capacity the Node reports). A Pod that finds every node full is Unschedulable
with "Too many pods", as kube-scheduler says, and is scheduled once a Pod leaves a node.

Jobs run to completion without Pods: a pluggable async action receives the Job and decides its
outcome (default: succeed after ``job_delay``, or fail if the Job is annotated with a failing
mode); the controller writes ``startTime``/``active``, then ``succeeded``/``failed``,
``completionTime`` and the ``Complete``/``Failed`` condition.

Every delay is multiplied by ``time_scale``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import aiohttp

from services.devcluster.informer import Informer, ObjectKey, WorkQueue, cancel_tasks, object_key
from services.devcluster.selectors import LabelSelector, parse_label_selector

if TYPE_CHECKING:
    from services.devcluster.controllers import ControllerContext

__all__ = [
    "FAIL_ANNOTATION",
    "ClusterView",
    "FailureRule",
    "Instant",
    "JobOutcome",
    "Kubelet",
    "KubeletConfig",
    "plan_job",
    "plan_pod",
]

log = logging.getLogger(__name__)

Json = dict[str, Any]

FAIL_ANNOTATION = "devcluster.sandbus.io/fail"
FAILURE_MODES = frozenset(
    {"image-pull", "crash", "exit-0", "exit-1", "never-ready", "unschedulable"}
)
DEFAULT_SCHEDULER = "default-scheduler"
# Timers fire a hair early or late; a wake-up this close to its deadline counts as on time.
_TIME_TOLERANCE = 1e-6


# ============================================================================================
# Configuration
# ============================================================================================


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
class JobOutcome:
    """What a Job action decided."""

    succeeded: bool
    message: str = ""


JobAction = Callable[[Json], Awaitable["JobOutcome | bool"]]


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

    def scaled(self, seconds: float) -> float:
        return seconds * self.time_scale


# ============================================================================================
# Pure core
# ============================================================================================


@dataclass(frozen=True)
class Instant:
    """The time a decision is made at: monotonic seconds for delays, RFC 3339 for the API."""

    monotonic: float
    wall: str


@dataclass(frozen=True)
class StageMemory:
    """What the kubelet remembers about a pod: the stage it last saw and when it first saw it."""

    stage: str
    since: float


@dataclass(frozen=True)
class NodeInfo:
    name: str
    index: int
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def ip(self) -> str:
        return node_ip(self.index)


@dataclass(frozen=True)
class ClusterView:
    """The part of the cluster the scheduler and IP allocator need."""

    nodes: tuple[NodeInfo, ...]
    pods_per_node: Mapping[str, int] = field(default_factory=dict)
    ips_in_use: Mapping[str, frozenset[str]] = field(default_factory=dict)
    max_pods: int = 110

    def node(self, name: str) -> NodeInfo | None:
        return next((node for node in self.nodes if node.name == name), None)


# -- actions -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BindPod:
    """POST pods/binding."""

    node: str


@dataclass(frozen=True)
class PatchStatus:
    """Merge-patch ``status`` (pods/status or jobs/status) under a resourceVersion precondition."""

    status: Json
    resource_version: str
    pod_ip: str | None = None  # the shell reserves it before the write goes out


@dataclass(frozen=True)
class DeletePod:
    """DELETE with gracePeriodSeconds=0 and a uid precondition."""

    uid: str


@dataclass(frozen=True)
class LaunchJob:
    """Start the Job action (once per Job uid)."""


Action = BindPod | PatchStatus | DeletePod | LaunchJob


@dataclass(frozen=True)
class Decision:
    actions: tuple[Action, ...] = ()
    memory: StageMemory | None = None
    wake_after: float | None = None  # seconds from now; None: only a new event wakes it


# -- helpers -----------------------------------------------------------------------------------


def node_name(config: KubeletConfig, index: int) -> str:
    return f"{config.node_prefix}{index}"


def node_ip(index: int) -> str:
    return f"172.18.0.{index + 2}"


def node_pod_cidr(index: int) -> str:
    return f"10.244.{index}.0/24"


def allocate_pod_ip(node_index: int, in_use: frozenset[str]) -> str | None:
    """The lowest free address of the node's /24 (.1 is the node's bridge, as with kindnet)."""
    for host in range(2, 255):
        candidate = f"10.244.{node_index}.{host}"
        if candidate not in in_use:
            return candidate
    return None


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


def _containers(pod: Json) -> list[Json]:
    return [c for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]


def _init_containers(pod: Json) -> list[Json]:
    return [c for c in (pod.get("spec") or {}).get("initContainers") or [] if isinstance(c, dict)]


def _digest(*parts: object) -> str:
    return hashlib.sha256(":".join(str(part) for part in parts).encode()).hexdigest()


def _image_id(image: str) -> str:
    repository = image.split("@", 1)[0].rsplit(":", 1)[0] if "/" in image or ":" in image else image
    return f"{repository}@sha256:{_digest('image', image)}"


def _container_id(config: KubeletConfig, pod: Json, name: str, restarts: int) -> str:
    uid = (pod.get("metadata") or {}).get("uid", "")
    return "containerd://" + _digest(config.seed, uid, name, restarts)


def go_duration(seconds: float) -> str:
    """A duration the way Go prints it, for the messages that quote one ("back-off 10s")."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    minutes, secs = divmod(whole, 60)
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def _condition(
    old: list[Json], kind: str, status: str, now: str, reason: str = "", message: str = ""
) -> Json:
    """A pod condition whose lastTransitionTime moves only when its status does."""
    previous = next((c for c in old if c.get("type") == kind), None)
    transition = now
    if previous is not None and previous.get("status") == status:
        transition = previous.get("lastTransitionTime") or now
    condition: Json = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": transition,
    }
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


_OWN_CONDITIONS = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
)


def _pod_conditions(
    pod: Json,
    now: str,
    *,
    sandbox: bool,
    initialized: bool,
    ready: bool,
    not_ready_reason: str = "ContainersNotReady",
    not_ready_names: list[str] | None = None,
) -> list[Json]:
    """The five kubelet conditions in upstream order, then any others the pod carries."""
    old = (pod.get("status") or {}).get("conditions") or []
    names = (
        not_ready_names if not_ready_names is not None else [c["name"] for c in _containers(pod)]
    )
    unready_message = f"containers with unready status: [{' '.join(names)}]"
    ready_reason = "" if ready else not_ready_reason
    ready_message = "" if ready or not_ready_reason == "PodCompleted" else unready_message
    init_names = " ".join(c.get("name", "") for c in _init_containers(pod))
    conditions = [
        _condition(old, "PodReadyToStartContainers", "True" if sandbox else "False", now),
        _condition(
            old,
            "Initialized",
            "True" if initialized else "False",
            now,
            "" if initialized else "ContainersNotInitialized",
            "" if initialized else f"containers with incomplete status: [{init_names}]",
        ),
        _condition(old, "Ready", "True" if ready else "False", now, ready_reason, ready_message),
        _condition(
            old, "ContainersReady", "True" if ready else "False", now, ready_reason, ready_message
        ),
        _condition(old, "PodScheduled", "True", now),
    ]
    conditions += [c for c in old if c.get("type") not in _OWN_CONDITIONS]
    return conditions


def _statuses(pod: Json) -> list[Json]:
    return list((pod.get("status") or {}).get("containerStatuses") or [])


def _status_of(pod: Json, name: str) -> Json:
    return next((s for s in _statuses(pod) if s.get("name") == name), {})


def _base_container_status(container: Json, previous: Json) -> Json:
    return {
        "name": container.get("name", ""),
        "image": container.get("image", ""),
        "imageID": previous.get("imageID", ""),
        "containerID": previous.get("containerID", ""),
        "ready": False,
        "started": False,
        "restartCount": int(previous.get("restartCount", 0)),
        "lastState": previous.get("lastState") or {},
        "state": {},
    }


def _waiting_statuses(pod: Json, reason: str, message: str = "") -> list[Json]:
    result = []
    for container in _containers(pod):
        status = _base_container_status(container, _status_of(pod, container.get("name", "")))
        waiting: Json = {"reason": reason}
        if message:
            waiting["message"] = message.format(image=container.get("image", ""))
        status["state"] = {"waiting": waiting}
        result.append(status)
    return result


def _running_statuses(pod: Json, config: KubeletConfig, now: str, *, ready: bool) -> list[Json]:
    result = []
    for container in _containers(pod):
        previous = _status_of(pod, container.get("name", ""))
        status = _base_container_status(container, previous)
        running = (previous.get("state") or {}).get("running")
        started_at = running.get("startedAt") if isinstance(running, dict) else None
        if started_at is None:
            status["containerID"] = _container_id(
                config, pod, status["name"], status["restartCount"]
            )
        status["imageID"] = _image_id(status["image"])
        status["state"] = {"running": {"startedAt": started_at or now}}
        status["started"] = True
        status["ready"] = ready
        result.append(status)
    return result


def _init_statuses_completed(pod: Json, config: KubeletConfig, now: str) -> list[Json]:
    result = []
    for container in _init_containers(pod):
        name = container.get("name", "")
        result.append(
            {
                "name": name,
                "image": container.get("image", ""),
                "imageID": _image_id(container.get("image", "")),
                "containerID": _container_id(config, pod, name, 0),
                "ready": True,
                "started": False,
                "restartCount": 0,
                "lastState": {},
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": now,
                        "finishedAt": now,
                        "containerID": _container_id(config, pod, name, 0),
                    }
                },
            }
        )
    return result


def observe_stage(pod: Json, view: ClusterView) -> str:
    """Which stage of its life the pod is in, read from the object alone."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    metadata = pod.get("metadata") or {}
    node = spec.get("nodeName")
    if node and view.node(node) is None:
        return "foreign"  # bound to a node this kubelet does not run
    if status.get("phase") in ("Succeeded", "Failed"):
        return "terminal"
    if metadata.get("deletionTimestamp"):
        return "deleting" if node else "deleting-unbound"
    if not node:
        if (spec.get("schedulerName") or DEFAULT_SCHEDULER) != DEFAULT_SCHEDULER:
            return "foreign"
        return "unbound"
    statuses = _statuses(pod)
    if not statuses:
        return "bound"
    states = [s.get("state") or {} for s in statuses]
    reasons = {(state.get("waiting") or {}).get("reason") for state in states if "waiting" in state}
    if "CrashLoopBackOff" in reasons:
        restarts = max(int(s.get("restartCount", 0)) for s in statuses)
        return f"backoff:{restarts}"
    if "ErrImagePull" in reasons:
        return "image-pull-error"
    if "ImagePullBackOff" in reasons:
        return "image-pull-backoff"
    if all("running" in state for state in states):
        restarts = max(int(s.get("restartCount", 0)) for s in statuses)
        if all(s.get("ready") for s in statuses):
            return f"ready:{restarts}"
        return f"running:{restarts}"
    return "creating"


def _selected_nodes(pod: Json, view: ClusterView) -> list[NodeInfo]:
    wanted = (pod.get("spec") or {}).get("nodeSelector") or {}
    return [node for node in view.nodes if all(node.labels.get(k) == v for k, v in wanted.items())]


def choose_node(pod: Json, view: ClusterView) -> NodeInfo | None:
    """Least-loaded node with room whose labels satisfy ``spec.nodeSelector`` (ties: lowest
    index)."""
    fitting = [
        node
        for node in _selected_nodes(pod, view)
        if view.pods_per_node.get(node.name, 0) < view.max_pods
    ]
    if not fitting:
        return None
    return min(fitting, key=lambda node: (view.pods_per_node.get(node.name, 0), node.index))


def _is_unschedulable(pod: Json) -> bool:
    """Not bound, and the scheduler said why (PodScheduled=False, Unschedulable)."""
    if (pod.get("spec") or {}).get("nodeName"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
    )


def _unschedulable_message(pod: Json, view: ClusterView, injected: bool) -> str:
    """kube-scheduler's FitError message: a count per reason, reasons sorted, then the
    preemption verdict in the same form."""
    count = len(view.nodes)
    full = 0 if injected else len(_selected_nodes(pod, view))  # selected, so room was missing
    reasons: dict[str, int] = {}
    preemption: dict[str, int] = {}
    if full:
        reasons["Too many pods"] = full
        preemption["No preemption victims found for incoming pod"] = full
    if count - full:
        if injected:
            reasons["node(s) were unschedulable"] = count - full
        else:
            reasons["node(s) didn't match Pod's node affinity/selector"] = count - full
        preemption["Preemption is not helpful for scheduling"] = count - full

    def tally(counts: dict[str, int]) -> str:
        return ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items()))

    return (
        f"0/{count} nodes are available: {tally(reasons)}. "
        f"preemption: 0/{count} nodes are available: {tally(preemption)}."
    )


def _ready_delay(pod: Json, config: KubeletConfig) -> float:
    containers = _containers(pod)
    probe = containers[0].get("readinessProbe") if containers else None
    if isinstance(probe, dict) and "initialDelaySeconds" in probe:
        return float(probe.get("initialDelaySeconds") or 0)
    return config.pod_ready_delay


def _crash_backoff(config: KubeletConfig, restarts: int) -> float:
    """Upstream doubles from 10 s to a 5 min cap; we do the same from ``crash_backoff``."""
    return min(config.crash_backoff * 2.0 ** max(restarts - 1, 0), config.max_crash_backoff)


def _finished(pod: Json, now: str, phase: str, statuses: list[Json]) -> Json:
    """The status of a Pod whose containers have all terminated for good."""
    return {
        "phase": phase,
        "conditions": _pod_conditions(
            pod, now, sandbox=False, initialized=True, ready=False, not_ready_reason="PodCompleted"
        ),
        "containerStatuses": statuses,
    }


def _exit(pod: Json, config: KubeletConfig, now: str, exit_code: int) -> Json:
    """Status after every container exited with ``exit_code``; restartPolicy decides what next."""
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    restart = policy == "Always" or (policy == "OnFailure" and exit_code != 0)
    reason = "Completed" if exit_code == 0 else "Error"
    metadata = pod.get("metadata") or {}
    statuses = []
    for container in _containers(pod):
        previous = _status_of(pod, container.get("name", ""))
        status = _base_container_status(container, previous)
        status["imageID"] = previous.get("imageID") or _image_id(status["image"])
        running = (previous.get("state") or {}).get("running") or {}
        terminated = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": running.get("startedAt", now),
            "finishedAt": now,
            "containerID": status["containerID"],
        }
        if restart:
            status["restartCount"] += 1
            backoff = go_duration(config.scaled(_crash_backoff(config, status["restartCount"])))
            status["lastState"] = {"terminated": terminated}
            status["state"] = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": (
                        f"back-off {backoff} restarting failed container={status['name']} "
                        f"pod={metadata.get('name')}_{metadata.get('namespace')}"
                        f"({metadata.get('uid')})"
                    ),
                }
            }
        else:
            status["state"] = {"terminated": terminated}
        statuses.append(status)
    if restart:
        return {
            "phase": "Running",
            "conditions": _pod_conditions(pod, now, sandbox=True, initialized=True, ready=False),
            "containerStatuses": statuses,
        }
    return _finished(pod, now, "Succeeded" if exit_code == 0 else "Failed", statuses)


def _terminated_for_deletion(pod: Json, now: str) -> Json:
    """Status once the containers stopped for a graceful deletion (kubelet's terminal phase)."""
    statuses = []
    any_failed = False
    for container in _containers(pod):
        previous = _status_of(pod, container.get("name", ""))
        status = _base_container_status(container, previous)
        state = previous.get("state") or {}
        if "running" in state:
            terminated = {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": state["running"].get("startedAt", now),
                "finishedAt": now,
                "containerID": status["containerID"],
            }
        else:
            any_failed = True
            terminated = {
                "exitCode": 137,
                "reason": "ContainerStatusUnknown",
                "message": "The container could not be located when the pod was deleted.  "
                "The container used to be Running",
                "startedAt": None,
                "finishedAt": None,
            }
        status["imageID"] = previous.get("imageID", "")
        status["state"] = {"terminated": terminated}
        statuses.append(status)
    return _finished(pod, now, "Failed" if any_failed else "Succeeded", statuses)


def plan_pod(
    pod: Json,
    memory: StageMemory | None,
    at: Instant,
    config: KubeletConfig,
    view: ClusterView,
) -> Decision:
    """What the scheduler and kubelet do about ``pod`` now, and when to look at it again."""
    stage = observe_stage(pod, view)
    if memory is None or memory.stage != stage:
        memory = StageMemory(stage, at.monotonic)
    elapsed = at.monotonic - memory.since
    rv = str((pod.get("metadata") or {}).get("resourceVersion") or "")
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    now = at.wall
    mode = failure_mode(pod, config)

    def after(delay: float, *actions: Action) -> Decision:
        remaining = config.scaled(delay) - elapsed
        if remaining > _TIME_TOLERANCE:
            return Decision((), memory, remaining)
        return Decision(tuple(actions), memory, None)

    def patch(status: Json, pod_ip: str | None = None) -> PatchStatus:
        return PatchStatus(status, rv, pod_ip)

    if stage in ("foreign", "deleting-unbound"):
        return Decision((), memory)
    if stage == "terminal":
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            return Decision((DeletePod(uid),), memory)
        return Decision((), memory)
    if stage == "deleting":
        grace = (pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
        delay = config.termination_delay
        if grace is not None:
            delay = min(float(grace), delay)
        return after(delay, patch(_terminated_for_deletion(pod, now)))

    if stage == "unbound":
        node = None if mode == "unschedulable" else choose_node(pod, view)
        if node is not None:
            return after(config.schedule_delay, BindPod(node.name))
        old = (pod.get("status") or {}).get("conditions") or []
        scheduled = next((c for c in old if c.get("type") == "PodScheduled"), None)
        if scheduled is not None and scheduled.get("reason") == "Unschedulable":
            return Decision((), memory)
        condition = _condition(
            old,
            "PodScheduled",
            "False",
            now,
            "Unschedulable",
            _unschedulable_message(pod, view, injected=mode == "unschedulable"),
        )
        others = [c for c in old if c.get("type") != "PodScheduled"]
        return after(config.schedule_delay, patch({"conditions": [condition, *others]}))

    node_info = view.node(str((pod.get("spec") or {}).get("nodeName")))
    assert node_info is not None  # observe_stage returned "foreign" otherwise
    if stage == "bound":
        has_init = bool(_init_containers(pod))
        status: Json = {
            "phase": "Pending",
            "hostIP": node_info.ip,
            "hostIPs": [{"ip": node_info.ip}],
            "startTime": (pod.get("status") or {}).get("startTime") or now,
            "conditions": _pod_conditions(
                pod, now, sandbox=False, initialized=not has_init, ready=False
            ),
            "containerStatuses": _waiting_statuses(
                pod, "PodInitializing" if has_init else "ContainerCreating"
            ),
        }
        if has_init:
            status["initContainerStatuses"] = [
                {
                    "name": c.get("name", ""),
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "lastState": {},
                    "state": {"waiting": {"reason": "PodInitializing"}},
                }
                for c in _init_containers(pod)
            ]
        return Decision((patch(status),), memory)
    if stage == "creating":
        if mode == "image-pull":
            return after(
                config.start_delay,
                patch(
                    {
                        "containerStatuses": _waiting_statuses(
                            pod,
                            "ErrImagePull",
                            'failed to pull and unpack image "{image}": not found',
                        )
                    }
                ),
            )
        ip = (pod.get("status") or {}).get("podIP") or allocate_pod_ip(
            node_info.index, view.ips_in_use.get(node_info.name, frozenset())
        )
        if ip is None:
            return Decision((), memory)  # the node's CIDR is full: stay ContainerCreating
        status = {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": _pod_conditions(pod, now, sandbox=True, initialized=True, ready=False),
            "containerStatuses": _running_statuses(pod, config, now, ready=False),
        }
        if _init_containers(pod):
            status["initContainerStatuses"] = _init_statuses_completed(pod, config, now)
        return after(config.start_delay, patch(status, pod_ip=ip))
    if stage == "image-pull-error":
        return after(
            config.image_pull_backoff_delay,
            patch(
                {
                    "containerStatuses": _waiting_statuses(
                        pod, "ImagePullBackOff", 'Back-off pulling image "{image}"'
                    )
                }
            ),
        )
    if stage == "image-pull-backoff":
        return Decision((), memory)
    if stage.startswith("backoff:"):
        restarts = int(stage.split(":", 1)[1])
        status = {
            "phase": "Running",
            "conditions": _pod_conditions(pod, now, sandbox=True, initialized=True, ready=False),
            "containerStatuses": _running_statuses(pod, config, now, ready=False),
        }
        return after(_crash_backoff(config, restarts), patch(status))
    if stage.startswith("running:"):
        if mode in ("crash", "exit-1"):
            return after(config.run_duration, patch(_exit(pod, config, now, 1)))
        if mode == "exit-0":
            return after(config.run_duration, patch(_exit(pod, config, now, 0)))
        if mode == "never-ready":
            return Decision((), memory)
        status = {
            "conditions": _pod_conditions(pod, now, sandbox=True, initialized=True, ready=True),
            "containerStatuses": _running_statuses(pod, config, now, ready=True),
        }
        return after(_ready_delay(pod, config), patch(status))
    if stage.startswith("ready:") and mode in ("crash", "exit-0", "exit-1"):
        # A failure injected after the pod became ready (e.g. an annotation added later).
        code = 0 if mode == "exit-0" else 1
        return after(config.run_duration, patch(_exit(pod, config, now, code)))
    return Decision((), memory)


# -- Jobs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobMemory:
    launched: bool = False
    outcome: JobOutcome | None = None


def _job_finished(job: Json) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions
    )


def plan_job(job: Json, memory: JobMemory, at: Instant) -> tuple[tuple[Action, ...], JobMemory]:
    """What the Job controller does about ``job`` now."""
    metadata = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    rv = str(metadata.get("resourceVersion") or "")
    if _job_finished(job) or metadata.get("deletionTimestamp") or spec.get("suspend"):
        return (), memory
    if not status.get("startTime"):
        started: Json = {"startTime": at.wall, "active": 1, "ready": 0, "terminating": 0}
        started["uncountedTerminatedPods"] = {}
        return (PatchStatus(started, rv),), memory
    if memory.outcome is None:
        if memory.launched:
            return (), memory
        return (LaunchJob(),), replace(memory, launched=True)
    completions = int(spec.get("completions") or 1)
    conditions = list(status.get("conditions") or [])
    if memory.outcome.succeeded:
        final: Json = {
            "active": 0,
            "ready": 0,
            "succeeded": completions,
            "completionTime": at.wall,
            "conditions": [
                *conditions,
                {
                    "type": "Complete",
                    "status": "True",
                    "reason": "CompletionsReached",
                    "message": memory.outcome.message
                    or "Reached expected number of succeeded pods",
                    "lastProbeTime": at.wall,
                    "lastTransitionTime": at.wall,
                },
            ],
        }
    else:
        backoff_limit = spec.get("backoffLimit")
        final = {
            "active": 0,
            "ready": 0,
            "failed": int(6 if backoff_limit is None else backoff_limit) + 1,
            "conditions": [
                *conditions,
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": memory.outcome.message
                    or "Job has reached the specified backoff limit",
                    "lastProbeTime": at.wall,
                    "lastTransitionTime": at.wall,
                },
            ],
        }
    return (PatchStatus(final, rv),), memory


def default_job_action(config: KubeletConfig) -> JobAction:
    """Succeed after ``job_delay``; fail if the Job or its template is annotated to fail."""

    async def run(job: Json) -> JobOutcome:
        await asyncio.sleep(config.scaled(config.job_delay))
        template = ((job.get("spec") or {}).get("template")) or {}
        modes = {failure_mode(job, config), failure_mode(template, config)}
        if modes & {"crash", "exit-1", "image-pull"}:
            return JobOutcome(False)
        return JobOutcome(True)

    return run


# ============================================================================================
# Imperative shell
# ============================================================================================


def _split_key(key: Hashable) -> tuple[str, str, str]:
    parts: tuple[Any, ...] = key  # type: ignore[assignment]
    return str(parts[0]), str(parts[1]), str(parts[2])


def _wall_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kubelet:
    """The scheduler, kubelets and Job controller as one in-process controller over HTTP.

    ``async with Kubelet(url, config):`` registers the nodes, waits for the first lists and runs
    until the block exits.
    """

    def __init__(
        self,
        base_url: str,
        config: KubeletConfig | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.config = config or KubeletConfig()
        self._headers = dict(headers or {})
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._job_tasks: set[asyncio.Task[Any]] = set()
        self._queue = WorkQueue()
        self._memory: dict[str, StageMemory] = {}
        self._job_memory: dict[str, JobMemory] = {}
        # Decisions made but not yet visible in the cache: another pod must not get the same IP
        # or be counted on a node a moment later.
        self._reserved_ips: dict[str, tuple[str, str]] = {}  # uid -> (node, ip)
        self._reserved_nodes: dict[str, str] = {}  # uid -> node
        # The scheduler's tally, kept per pod event rather than recounted per decision (which
        # made a burst of N pods cost N²): every live pod that holds a node and is not
        # finished, with its IP, and the sums per node.
        self._placed: dict[str, tuple[str, str]] = {}  # uid -> (node, pod IP or "")
        self._pods_on_node: Counter[str] = Counter()
        # Unschedulable Pods, tried again whenever a Pod leaves a node (its room may be theirs).
        self._unschedulable: set[Hashable] = set()
        self._ips_on_node: dict[str, Counter[str]] = {}
        self.nodes = tuple(
            NodeInfo(
                node_name(self.config, index),
                index,
                {
                    "kubernetes.io/hostname": node_name(self.config, index),
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            )
            for index in range(self.config.nodes)
        )
        self._pods: Informer | None = None
        self._jobs: Informer | None = None

    async def __aenter__(self) -> Kubelet:
        try:
            await self.start()
        except BaseException:
            # Cancelled (or failed) half-way: a failed __aenter__ gets no __aexit__.
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            headers={"User-Agent": "devcluster-kubelet", **self._headers}, read_bufsize=2**21
        )
        await self._register_nodes()
        self._pods = Informer(self._session, self.base_url, "/api/v1/pods", self._on_pod)
        informers = [self._pods]
        if self.config.manage_jobs:
            self._jobs = Informer(self._session, self.base_url, "/apis/batch/v1/jobs", self._on_job)
            informers.append(self._jobs)
        self._tasks = [asyncio.create_task(informer.run()) for informer in informers]
        self._tasks += [
            asyncio.create_task(self._worker()) for _ in range(max(1, self.config.workers))
        ]
        await asyncio.gather(*(informer.synced.wait() for informer in informers))

    async def stop(self) -> None:
        await cancel_tasks([*self._tasks, *self._job_tasks])
        self._tasks.clear()
        self._job_tasks.clear()
        self._queue.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- nodes ---------------------------------------------------------------------------------

    def _node_object(self, node: NodeInfo) -> Json:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node.name, "labels": dict(node.labels)},
            "spec": {"podCIDR": node_pod_cidr(node.index), "podCIDRs": [node_pod_cidr(node.index)]},
        }

    def _node_status(self, node: NodeInfo) -> Json:
        now = _wall_now()

        def condition(kind: str, status: str, reason: str, message: str) -> Json:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }

        resources = {
            "cpu": "8",
            "memory": "32Gi",
            "pods": str(self.config.max_pods),
            "ephemeral-storage": "100Gi",
        }
        return {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                condition(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": node.ip},
                {"type": "Hostname", "address": node.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": "sandbus devcluster",
                "kernelVersion": "6.0.0",
                "containerRuntimeVersion": "containerd://simulated",
                "kubeletVersion": "v1.31.0",
                "kubeProxyVersion": "v1.31.0",
                "machineID": _digest("machine", node.name)[:32],
                "systemUUID": _digest("system", node.name)[:32],
                "bootID": _digest("boot", node.name)[:32],
            },
        }

    async def _register_nodes(self) -> None:
        assert self._session is not None
        for node in self.nodes:
            url = f"{self.base_url}/api/v1/nodes"
            async with self._session.post(url, json=self._node_object(node)) as response:
                if response.status not in (200, 201, 409):
                    raise RuntimeError(
                        f"registering node {node.name}: HTTP {response.status} "
                        f"{await response.text()}"
                    )
            # Status goes through the subresource, which is how a kubelet reports it.
            async with self._session.patch(
                f"{url}/{node.name}/status",
                params={"fieldManager": self.config.field_manager},
                json={"status": self._node_status(node)},
                headers={"Content-Type": "application/merge-patch+json"},
            ) as response:
                if response.status != 200:
                    raise RuntimeError(
                        f"reporting status of node {node.name}: HTTP {response.status} "
                        f"{await response.text()}"
                    )

    # -- events --------------------------------------------------------------------------------

    def _on_pod(self, kind: str, pod: Json, old: Json | None) -> None:
        key: Hashable = ("pod", *object_key(pod))
        if kind == "DELETED":
            uid = (pod.get("metadata") or {}).get("uid", "")
            self._memory.pop(uid, None)
            self._reserved_ips.pop(uid, None)
            self._reserved_nodes.pop(uid, None)
            self._unschedulable.discard(key)
            self._place(uid, None)
            self._queue.forget(key)
            return
        if _is_unschedulable(pod):
            self._unschedulable.add(key)
        else:
            self._unschedulable.discard(key)
        # A reservation ends once the API shows the decision (or the pod no longer needs it).
        uid = (pod.get("metadata") or {}).get("uid", "")
        status = pod.get("status") or {}
        if status.get("podIP") or status.get("phase") in ("Succeeded", "Failed"):
            self._reserved_ips.pop(uid, None)
        if (pod.get("spec") or {}).get("nodeName"):
            self._reserved_nodes.pop(uid, None)
        old_uid = ((old or {}).get("metadata") or {}).get("uid", "")
        if old is not None and old_uid != uid:  # same name, new pod (seen through a relist)
            self._place(old_uid, None)
        self._place(uid, pod)
        self._queue.add(key)

    def _place(self, uid: str, pod: Json | None) -> None:
        """Bring the tally up to date with one pod (None: it is gone)."""
        previous = self._placed.pop(uid, None)
        if previous is not None:
            node, ip = previous
            self._pods_on_node[node] -= 1
            if ip:
                ips = self._ips_on_node[node]
                ips[ip] -= 1
                if ips[ip] <= 0:
                    del ips[ip]
        held: str | None = None
        status: Json = {}
        if pod is not None:
            held = (pod.get("spec") or {}).get("nodeName") or self._reserved_nodes.get(uid)
            status = pod.get("status") or {}
        if not held or status.get("phase") in ("Succeeded", "Failed"):
            if previous is not None:  # it left its node
                for waiting in self._unschedulable:
                    self._queue.add(waiting)
            return
        node, ip = str(held), str(status.get("podIP") or "")
        self._placed[uid] = (node, ip)
        self._pods_on_node[node] += 1
        if ip:
            self._ips_on_node.setdefault(node, Counter())[ip] += 1

    def _on_job(self, kind: str, job: Json, old: Json | None) -> None:
        key: Hashable = ("job", *object_key(job))
        if kind == "DELETED":
            self._job_memory.pop((job.get("metadata") or {}).get("uid", ""), None)
            self._queue.forget(key)
            return
        self._queue.add(key)

    # -- the view ------------------------------------------------------------------------------

    def cluster_view(self) -> ClusterView:
        """Pods and IPs per node: the cached pods (as tallied by :meth:`_place`) plus the
        reservations not yet visible in the cache."""
        counts = {node: count for node, count in self._pods_on_node.items() if count > 0}
        ips = {node: set(in_use) for node, in_use in self._ips_on_node.items() if in_use}
        for node, ip in self._reserved_ips.values():
            ips.setdefault(node, set()).add(ip)
        return ClusterView(
            self.nodes,
            counts,
            {node: frozenset(values) for node, values in ips.items()},
            max_pods=self.config.max_pods,
        )

    # -- work ----------------------------------------------------------------------------------

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            try:
                kind, namespace, name = _split_key(key)
                if kind == "pod":
                    await self._reconcile_pod((namespace, name), key)
                else:
                    await self._reconcile_job((namespace, name), key)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("kubelet: reconciling %s failed", key)
                self._queue.add_after(key, 0.5)
            finally:
                self._queue.done(key)

    async def _reconcile_pod(self, key: ObjectKey, queue_key: Hashable) -> None:
        assert self._pods is not None
        pod = self._pods.get(key)
        if pod is None:
            return
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        at = Instant(asyncio.get_running_loop().time(), _wall_now())
        # Only scheduling and IP allocation look at other pods; the rest plan with the nodes.
        view = ClusterView(self.nodes)
        if observe_stage(pod, view) in ("unbound", "creating"):
            view = self.cluster_view()
        decision = plan_pod(pod, self._memory.get(uid), at, self.config, view)
        if decision.memory is not None:
            self._memory[uid] = decision.memory
        for action in decision.actions:
            self._reserve(pod, action)
            if not await self._execute_pod_action(pod, action):
                break
        if decision.wake_after is not None:
            self._queue.add_after(queue_key, decision.wake_after)

    def _reserve(self, pod: Json, action: Action) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if isinstance(action, BindPod):
            self._reserved_nodes[uid] = action.node
            # Tally the cache's version of the pod: ``pod`` may be older than the cache by now.
            cached = self._pods.get(object_key(pod)) if self._pods is not None else None
            same = cached is not None and (cached.get("metadata") or {}).get("uid", "") == uid
            if same:
                self._place(uid, cached)
        elif isinstance(action, PatchStatus) and action.pod_ip:
            node = (pod.get("spec") or {}).get("nodeName") or self._reserved_nodes.get(uid, "")
            self._reserved_ips[uid] = (node, action.pod_ip)

    async def _execute_pod_action(self, pod: Json, action: Action) -> bool:
        """Carry out one write; False when the rest of the plan should wait for the next event."""
        assert self._session is not None
        metadata = pod.get("metadata") or {}
        namespace, name = metadata.get("namespace", ""), metadata.get("name", "")
        base = f"{self.base_url}/api/v1/namespaces/{namespace}/pods/{name}"
        if isinstance(action, BindPod):
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace, "uid": metadata.get("uid")},
                "target": {"apiVersion": "v1", "kind": "Node", "name": action.node},
            }
            async with self._session.post(f"{base}/binding", json=binding) as response:
                return self._accept(response.status, "bind", name, await response.text())
        if isinstance(action, PatchStatus):
            return await self._patch_status(f"{base}/status", action, name)
        if isinstance(action, DeletePod):
            options = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": action.uid},
            }
            async with self._session.delete(base, json=options) as response:
                return self._accept(response.status, "delete", name, await response.text())
        return True

    async def _patch_status(self, url: str, action: PatchStatus, name: str) -> bool:
        assert self._session is not None
        body = {"metadata": {"resourceVersion": action.resource_version}, "status": action.status}
        async with self._session.patch(
            url,
            params={"fieldManager": self.config.field_manager},
            json=body,
            headers={"Content-Type": "application/merge-patch+json"},
        ) as response:
            return self._accept(response.status, "update status of", name, await response.text())

    @staticmethod
    def _accept(status: int, verb: str, name: str, body: str) -> bool:
        if 200 <= status < 300:
            return True
        if status in (404, 409):
            # Gone, or changed since we looked: the watch brings the next version to plan from.
            log.debug("kubelet: %s %s: HTTP %s", verb, name, status)
            return False
        raise RuntimeError(f"kubelet: {verb} {name}: HTTP {status}: {body}")

    # -- jobs ----------------------------------------------------------------------------------

    async def _reconcile_job(self, key: ObjectKey, queue_key: Hashable) -> None:
        assert self._jobs is not None
        job = self._jobs.get(key)
        if job is None:
            return
        uid = str((job.get("metadata") or {}).get("uid") or "")
        at = Instant(asyncio.get_running_loop().time(), _wall_now())
        actions, memory = plan_job(job, self._job_memory.get(uid, JobMemory()), at)
        self._job_memory[uid] = memory
        namespace, name = key
        for action in actions:
            if isinstance(action, LaunchJob):
                task = asyncio.create_task(self._run_job(job, uid, queue_key))
                self._job_tasks.add(task)
                task.add_done_callback(self._job_tasks.discard)
            elif isinstance(action, PatchStatus):
                url = f"{self.base_url}/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status"
                if not await self._patch_status(url, action, name):
                    break

    async def _run_job(self, job: Json, uid: str, queue_key: Hashable) -> None:
        action = self.config.job_action or default_job_action(self.config)
        try:
            result = await action(job)
            outcome = result if isinstance(result, JobOutcome) else JobOutcome(bool(result))
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a failing action is a failed Job, not a dead controller
            outcome = JobOutcome(False, f"job action raised {error!r}")
        memory = self._job_memory.get(uid)
        if memory is not None:
            self._job_memory[uid] = replace(memory, outcome=outcome)
            self._queue.add(queue_key)


async def run(ctx: ControllerContext) -> None:
    """Controller entry point for :class:`~services.devcluster.cluster.DevCluster`.

    ``ctx.settings.options["kubelet"]`` may hold a :class:`KubeletConfig` or a dict of its
    fields; ``nodes``, ``pod_ready_delay`` and the seed come from the settings themselves.
    """
    overrides = ctx.settings.options.get("kubelet")
    if isinstance(overrides, KubeletConfig):
        config = overrides
    else:
        config = KubeletConfig(
            nodes=ctx.settings.nodes,
            pod_ready_delay=ctx.settings.pod_ready_delay,
            seed=ctx.seed,
            **dict(overrides or {}),
        )
    async with Kubelet(ctx.url, config):
        await asyncio.Event().wait()
