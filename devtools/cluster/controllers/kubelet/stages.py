"""A Pod's life as stages read off the object, and the planner that moves it to the next one.

:func:`observe_stage` reads which stage a Pod is in from the object alone: ``unbound``,
``bound``, ``creating``, ``running:<restarts>``, ``ready:<restarts>``, ``backoff:<restarts>``,
``exited`` (a container's process ended while the Pod runs), ``image-pull-error``,
``image-pull-backoff``, ``deleting`` (and ``deleting-unbound``, which needs no kubelet),
``terminal``, ``foreign`` for a Pod on a node this kubelet does not run or for another
scheduler, and ``job-pod`` (``deleting-job-pod``) for a Pod controlled by a Job, whose status
the Job simulation writes in one go (:mod:`.jobs`): while that simulation runs, the kubelet
neither binds, starts nor patches it, and only finishes its deletion. Nothing but the object
says where a Pod is, so a restarted shell, a relist or a write by someone else cannot put the
simulation out of step with what the API shows.

What the shell remembers is only *when* it first saw the current stage (:class:`StageMemory`),
because the delays run from there: :func:`plan_pod` returns the write that moves the Pod on
once the stage's delay has passed, or no write and how long to wait (:class:`Decision`). A
status write carries the resourceVersion it was planned from, so a plan made from a stale
version is refused by the server and made again from the next one. The delays, all scaled by
``time_scale``:

- unbound → bound after ``schedule_delay`` (:mod:`.scheduling` picks the node);
- bound → creating at once (Pending, ContainerCreating or PodInitializing);
- creating → running after ``start_delay``, with the pod IP allocated here; under
  ``image-pull`` the pull fails instead, backs off after ``image_pull_backoff_delay`` and
  stays so;
- running → ready after the first container's ``readinessProbe.initialDelaySeconds``, or
  ``pod_ready_delay`` without one; under ``crash`` and ``exit-*`` the containers end after
  ``run_duration`` instead, and those the ``restartPolicy`` restarts wait in CrashLoopBackOff
  for :func:`~.statuses.crash_backoff`;
- exited (a container's PID 1 ended, e.g. ``kill 1`` through ``pods/exec``, see
  :mod:`devtools.cluster.http.podexec`) → running again after ``start_delay``, under a new
  containerID, as the ``restartPolicy`` says (:func:`~.statuses.restart_exited_status`), then
  ready as above;
- deleting → terminal after ``termination_delay`` (or the grace period, if shorter), and a
  terminal Pod marked for deletion is deleted.

A Pod that runs OpenSandbox's task executor (:mod:`.executor`, unless
``task_executor_command`` is None) has a real process, which the shell runs while the executor
container runs and reports as an :class:`~.executor.ExecutorState`, the planner's one input
besides the object. That changes four things: its IP comes from the loopback range
(``task_executor_network``, so the process can listen on it); running → ready waits, beyond
the delay, until the process answered ``/health`` (no wake-up: the shell requeues the Pod when
it does), so a controller never finds a Ready Pod without its executor; a process that ended by
itself while the container ran is reported as that container's crash
(:func:`~.statuses.container_crashed_status`: CrashLoopBackOff, then restarted after
:func:`~.statuses.crash_backoff`, and the shell starts a new process for the new container
instance); and deleting → terminal, like the final delete, waits until the process is gone, so
no executor outlives its Pod. A Pod that asks for agent-sandbox's runtime
(``sandbox_runtime_command``) is treated the same way, its process probed at ``GET /`` on 8888.
"""

from __future__ import annotations

from dataclasses import dataclass

from api.objects import Json
from devtools.cluster.controllers.kubelet.actions import Action, DeletePod, Instant, PatchStatus
from devtools.cluster.controllers.kubelet.config import KubeletConfig, failure_mode
from devtools.cluster.controllers.kubelet.executor import (
    ExecutorState,
    current_state,
    real_container,
)
from devtools.cluster.controllers.kubelet.jobs import controlled_by_job
from devtools.cluster.controllers.kubelet.nodes import (
    LOOPBACK_POD_NETWORK,
    POD_NETWORK,
    ClusterView,
    allocate_pod_ip,
)
from devtools.cluster.controllers.kubelet.scheduling import DEFAULT_SCHEDULER, schedule
from devtools.cluster.controllers.kubelet.statuses import (
    container_crashed_status,
    container_statuses,
    containers,
    crash_backoff,
    exited_status,
    pending_status,
    pull_backoff_status,
    pull_failed_status,
    ready_status,
    restart_exited_status,
    restarted_status,
    started_status,
    terminated_status,
)

__all__ = ["Decision", "StageMemory", "observe_stage", "plan_pod", "pod_network"]


# Timers fire a hair early or late; a wake-up this close to its deadline counts as on time.
_TIME_TOLERANCE = 1e-6


@dataclass(frozen=True)
class StageMemory:
    """What the kubelet remembers about a pod: the stage it last saw and when it first saw it."""

    stage: str
    since: float


@dataclass(frozen=True)
class Decision:
    actions: tuple[Action, ...] = ()
    memory: StageMemory | None = None
    wake_after: float | None = None  # seconds from now; None: only a new event wakes it


def observe_stage(pod: Json, view: ClusterView, *, jobs_simulated: bool = True) -> str:
    """Which stage of its life the pod is in, read from the object alone.

    ``jobs_simulated``: the Job simulation runs (``manage_jobs``), so it, not the kubelet,
    writes the Pods of Jobs; without it they are run like any other."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    metadata = pod.get("metadata") or {}
    node = spec.get("nodeName")
    if node and view.node(node) is None:
        return "foreign"  # bound to a node this kubelet does not run
    if jobs_simulated and controlled_by_job(pod):
        # No container of a Job's Pod runs: the Job simulation writes what it shows.
        return "deleting-job-pod" if metadata.get("deletionTimestamp") else "job-pod"
    if status.get("phase") in ("Succeeded", "Failed"):
        return "terminal"
    if metadata.get("deletionTimestamp"):
        return "deleting" if node else "deleting-unbound"
    if not node:
        if (spec.get("schedulerName") or DEFAULT_SCHEDULER) != DEFAULT_SCHEDULER:
            return "foreign"
        return "unbound"
    statuses = container_statuses(pod)
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
    if status.get("phase") == "Running" and any("terminated" in state for state in states):
        return "exited"
    if all("running" in state for state in states):
        restarts = max(int(s.get("restartCount", 0)) for s in statuses)
        if all(s.get("ready") for s in statuses):
            return f"ready:{restarts}"
        return f"running:{restarts}"
    return "creating"


def _ready_delay(pod: Json, config: KubeletConfig) -> float:
    declared = containers(pod)
    probe = declared[0].get("readinessProbe") if declared else None
    if isinstance(probe, dict) and "initialDelaySeconds" in probe:
        return float(probe.get("initialDelaySeconds") or 0)
    return config.pod_ready_delay


def _executor_runner(pod: Json, config: KubeletConfig) -> str | None:
    """The container whose process is real (a task executor's or an agent-sandbox runtime's),
    if the config runs that kind."""
    found = real_container(pod, config)
    return None if found is None else found[1]


def pod_network(pod: Json, config: KubeletConfig) -> str:
    """The first two octets of the range the pod's IP comes from."""
    if _executor_runner(pod, config) is None:
        return POD_NETWORK
    return config.task_executor_network or LOOPBACK_POD_NETWORK


def plan_pod(
    pod: Json,
    memory: StageMemory | None,
    at: Instant,
    config: KubeletConfig,
    view: ClusterView,
    *,
    executor: ExecutorState | None = None,
) -> Decision:
    """What the scheduler and kubelet do about ``pod`` now, and when to look at it again.

    ``executor``: what the shell saw of the pod's task executor process, if it runs one."""
    stage = observe_stage(pod, view, jobs_simulated=config.manage_jobs)
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

    runner = _executor_runner(pod, config)
    # Only a process of the container instance the pod shows now counts (not an earlier one's).
    process = current_state(pod, executor) if runner is not None else None
    # Its process still runs: the pod may not finish its deletion yet (the shell is stopping it
    # and requeues the pod once it is gone).
    stopping = executor is not None and executor.alive

    if stage in ("foreign", "deleting-unbound", "job-pod"):
        return Decision((), memory)
    if stage == "deleting-job-pod":
        return Decision((DeletePod(uid),), memory)  # nothing runs that needs stopping
    if stage == "terminal":
        if (pod.get("metadata") or {}).get("deletionTimestamp") and not stopping:
            return Decision((DeletePod(uid),), memory)
        return Decision((), memory)
    if stage == "deleting":
        if stopping:
            return Decision((), memory)
        grace = (pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
        delay = config.termination_delay
        if grace is not None:
            delay = min(float(grace), delay)
        return after(delay, patch(terminated_status(pod, now)))

    if stage == "unbound":
        action = schedule(pod, view, injected=mode == "unschedulable", now=now)
        if action is None:
            return Decision((), memory)  # already marked Unschedulable: wait for room
        return after(config.schedule_delay, action)

    node_info = view.node(str((pod.get("spec") or {}).get("nodeName")))
    assert node_info is not None  # observe_stage returned "foreign" otherwise
    if stage == "bound":
        return Decision((patch(pending_status(pod, node_info.ip, now)),), memory)
    if stage == "creating":
        if mode == "image-pull":
            return after(config.start_delay, patch(pull_failed_status(pod)))
        ip = (pod.get("status") or {}).get("podIP") or allocate_pod_ip(
            node_info.index,
            view.ips_in_use.get(node_info.name, frozenset()),
            pod_network(pod, config),
        )
        if ip is None:
            return Decision((), memory)  # the node's CIDR is full: stay ContainerCreating
        return after(config.start_delay, patch(started_status(pod, config, now, ip), pod_ip=ip))
    if stage == "exited":
        restarted = restart_exited_status(pod, config, now)
        if restarted is None:
            return Decision((), memory)  # the restartPolicy keeps it down; the others run on
        return after(config.start_delay, patch(restarted))
    if stage == "image-pull-error":
        return after(config.image_pull_backoff_delay, patch(pull_backoff_status(pod)))
    if stage == "image-pull-backoff":
        return Decision((), memory)
    if stage.startswith("backoff:"):
        restarts = int(stage.split(":", 1)[1])
        return after(crash_backoff(config, restarts), patch(restarted_status(pod, config, now)))
    ended = None if process is None else process.exit_code
    if runner is not None and ended is not None and stage.startswith(("running:", "ready:")):
        # The process ended by itself while its container ran: that container crashed.
        status = container_crashed_status(pod, config, runner, ended, now)
        return Decision((patch(status),), memory)
    if stage.startswith("running:"):
        if mode in ("crash", "exit-1"):
            return after(config.run_duration, patch(exited_status(pod, config, now, 1)))
        if mode == "exit-0":
            return after(config.run_duration, patch(exited_status(pod, config, now, 0)))
        if mode == "never-ready":
            return Decision((), memory)
        if runner is not None and (process is None or not process.healthy):
            return Decision((), memory)  # the shell requeues the pod once /health answers
        return after(_ready_delay(pod, config), patch(ready_status(pod, config, now)))
    if stage.startswith("ready:") and mode in ("crash", "exit-0", "exit-1"):
        # A failure injected after the pod became ready (e.g. an annotation added later).
        code = 0 if mode == "exit-0" else 1
        return after(config.run_duration, patch(exited_status(pod, config, now, code)))
    return Decision((), memory)
