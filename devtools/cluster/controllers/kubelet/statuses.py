"""The status objects a kubelet writes for a Pod, built from the Pod as last observed.

Each ``*_status`` function returns a fresh ``status`` (or the part of it that changes) for one
moment of a Pod's life: pending in ContainerCreating or PodInitializing, an image pull failing
and backing off, started, restarted, ready, exited with a code, one container's PID 1 ending
(``kill 1`` through ``pods/exec``, or a real task executor's process dying) and that container
started again, terminated for a graceful deletion; and, for the Job controller, a Job's Pod
that ran and finished (:func:`job_pod_status`). :mod:`.stages` decides which one applies and
when; this module only knows what a real kubelet puts in it, so that clients reading the object
(kubectl, client libraries' typed models, our own watcher) see the shapes they would see on a
cluster:

- Conditions come in upstream order (PodReadyToStartContainers, Initialized, Ready,
  ContainersReady, PodScheduled), with the reasons and messages upstream uses, and a
  condition's ``lastTransitionTime`` moves only when its status does (:func:`condition`), so
  rewriting the status at every stage does not look like flapping.
- Container statuses keep what a container keeps across writes: its ``containerID`` while it
  runs, ``startedAt`` of the running state, ``restartCount`` and ``lastState``. Container ids are
  derived from the seed, the pod's uid, the container's name and restart count, so a run is
  reproducible and every restart gets a new id.
- A crash waits in CrashLoopBackOff for :func:`crash_backoff`, which doubles per restart up to
  a cap, as upstream does from 10 s to 5 min; the message quotes it as Go prints a duration.
"""

from __future__ import annotations

from api.objects import Json
from devtools.cluster.controllers.kubelet.config import KubeletConfig
from devtools.cluster.controllers.kubelet.nodes import digest

__all__ = [
    "condition",
    "container_crashed_status",
    "container_exit_status",
    "container_statuses",
    "containers",
    "crash_backoff",
    "exited_status",
    "go_duration",
    "job_pod_status",
    "pending_status",
    "pull_backoff_status",
    "pull_failed_status",
    "ready_status",
    "restart_exited_status",
    "restarted_status",
    "started_status",
    "terminated_status",
]


def containers(pod: Json) -> list[Json]:
    return [c for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]


def _init_containers(pod: Json) -> list[Json]:
    return [c for c in (pod.get("spec") or {}).get("initContainers") or [] if isinstance(c, dict)]


def _image_id(image: str) -> str:
    repository = image.split("@", 1)[0].rsplit(":", 1)[0] if "/" in image or ":" in image else image
    return f"{repository}@sha256:{digest('image', image)}"


def _container_id(config: KubeletConfig, pod: Json, name: str, restarts: int) -> str:
    uid = (pod.get("metadata") or {}).get("uid", "")
    return "containerd://" + digest(config.seed, uid, name, restarts)


def go_duration(seconds: float) -> str:
    """A duration the way Go prints it, for the messages that quote one ("back-off 10s")."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    minutes, secs = divmod(whole, 60)
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def condition(
    old: list[Json], kind: str, status: str, now: str, reason: str = "", message: str = ""
) -> Json:
    """A pod condition whose lastTransitionTime moves only when its status does."""
    previous = next((c for c in old if c.get("type") == kind), None)
    transition = now
    if previous is not None and previous.get("status") == status:
        transition = previous.get("lastTransitionTime") or now
    result: Json = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": transition,
    }
    if reason:
        result["reason"] = reason
    if message:
        result["message"] = message
    return result


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
    names = not_ready_names if not_ready_names is not None else [c["name"] for c in containers(pod)]
    unready_message = f"containers with unready status: [{' '.join(names)}]"
    ready_reason = "" if ready else not_ready_reason
    ready_message = "" if ready or not_ready_reason == "PodCompleted" else unready_message
    init_names = " ".join(c.get("name", "") for c in _init_containers(pod))
    conditions = [
        condition(old, "PodReadyToStartContainers", "True" if sandbox else "False", now),
        condition(
            old,
            "Initialized",
            "True" if initialized else "False",
            now,
            "" if initialized else "ContainersNotInitialized",
            "" if initialized else f"containers with incomplete status: [{init_names}]",
        ),
        condition(old, "Ready", "True" if ready else "False", now, ready_reason, ready_message),
        condition(
            old, "ContainersReady", "True" if ready else "False", now, ready_reason, ready_message
        ),
        condition(old, "PodScheduled", "True", now),
    ]
    conditions += [c for c in old if c.get("type") not in _OWN_CONDITIONS]
    return conditions


def container_statuses(pod: Json) -> list[Json]:
    return list((pod.get("status") or {}).get("containerStatuses") or [])


def _status_of(pod: Json, name: str) -> Json:
    return next((s for s in container_statuses(pod) if s.get("name") == name), {})


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
    for container in containers(pod):
        status = _base_container_status(container, _status_of(pod, container.get("name", "")))
        waiting: Json = {"reason": reason}
        if message:
            waiting["message"] = message.format(image=container.get("image", ""))
        status["state"] = {"waiting": waiting}
        result.append(status)
    return result


def _running_statuses(pod: Json, config: KubeletConfig, now: str, *, ready: bool) -> list[Json]:
    result = []
    for container in containers(pod):
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


def _completed_init_statuses(pod: Json, config: KubeletConfig, now: str) -> list[Json]:
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


def pending_status(pod: Json, host_ip: str, now: str) -> Json:
    """Bound to a node whose kubelet is creating the sandbox (init containers, if any, first)."""
    has_init = bool(_init_containers(pod))
    status: Json = {
        "phase": "Pending",
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
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
    return status


def pull_failed_status(pod: Json) -> Json:
    """The image could not be pulled (ErrImagePull)."""
    return {
        "containerStatuses": _waiting_statuses(
            pod, "ErrImagePull", 'failed to pull and unpack image "{image}": not found'
        )
    }


def pull_backoff_status(pod: Json) -> Json:
    """The kubelet waits before pulling again (ImagePullBackOff)."""
    return {
        "containerStatuses": _waiting_statuses(
            pod, "ImagePullBackOff", 'Back-off pulling image "{image}"'
        )
    }


def started_status(pod: Json, config: KubeletConfig, now: str, ip: str) -> Json:
    """The sandbox has its IP and the containers run, not ready yet (init containers done)."""
    status: Json = {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": _pod_conditions(pod, now, sandbox=True, initialized=True, ready=False),
        "containerStatuses": _running_statuses(pod, config, now, ready=False),
    }
    if _init_containers(pod):
        status["initContainerStatuses"] = _completed_init_statuses(pod, config, now)
    return status


def restarted_status(pod: Json, config: KubeletConfig, now: str) -> Json:
    """The containers run again after a CrashLoopBackOff, not ready yet."""
    return {
        "phase": "Running",
        "conditions": _pod_conditions(pod, now, sandbox=True, initialized=True, ready=False),
        "containerStatuses": _running_statuses(pod, config, now, ready=False),
    }


def ready_status(pod: Json, config: KubeletConfig, now: str) -> Json:
    """Every container passed its readiness probe."""
    return {
        "conditions": _pod_conditions(pod, now, sandbox=True, initialized=True, ready=True),
        "containerStatuses": _running_statuses(pod, config, now, ready=True),
    }


def crash_backoff(config: KubeletConfig, restarts: int) -> float:
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


def _crash_loop_waiting(pod: Json, config: KubeletConfig, name: str, restarts: int) -> Json:
    """The waiting state of a container the kubelet restarts after a back-off."""
    metadata = pod.get("metadata") or {}
    backoff = go_duration(config.scaled(crash_backoff(config, restarts)))
    return {
        "reason": "CrashLoopBackOff",
        "message": (
            f"back-off {backoff} restarting failed container={name} "
            f"pod={metadata.get('name')}_{metadata.get('namespace')}({metadata.get('uid')})"
        ),
    }


def exited_status(pod: Json, config: KubeletConfig, now: str, exit_code: int) -> Json:
    """Status after every container exited with ``exit_code``; restartPolicy decides what next."""
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    restart = policy == "Always" or (policy == "OnFailure" and exit_code != 0)
    reason = "Completed" if exit_code == 0 else "Error"
    statuses = []
    for container in containers(pod):
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
            status["lastState"] = {"terminated": terminated}
            status["state"] = {
                "waiting": _crash_loop_waiting(pod, config, status["name"], status["restartCount"])
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


def _exit(previous: Json, exit_code: int, now: str) -> Json:
    running = (previous.get("state") or {}).get("running") or {}
    return {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": running.get("startedAt", now),
        "finishedAt": now,
        "containerID": previous.get("containerID", ""),
    }


def _with_unready_conditions(pod: Json, now: str, statuses: list[Json]) -> list[Json]:
    unready = [str(s.get("name", "")) for s in statuses if not s.get("ready")]
    return _pod_conditions(
        pod, now, sandbox=True, initialized=True, ready=not unready, not_ready_names=unready
    )


def container_exit_status(pod: Json, name: str, exit_code: int, now: str) -> Json:
    """PID 1 of container ``name`` ended with ``exit_code`` while the Pod runs (``kill 1``
    through exec): what the kubelet reports until it starts the container again
    (:func:`restart_exited_status`). That container is terminated and not ready, so the Pod is
    not Ready; the other containers are as they were."""
    statuses = []
    for previous in container_statuses(pod):
        status = dict(previous)
        if previous.get("name") == name:
            status.update(
                ready=False, started=False, state={"terminated": _exit(previous, exit_code, now)}
            )
        statuses.append(status)
    return {
        "conditions": _with_unready_conditions(pod, now, statuses),
        "containerStatuses": statuses,
    }


def container_crashed_status(
    pod: Json, config: KubeletConfig, name: str, exit_code: int, now: str
) -> Json:
    """The process of container ``name`` ended by itself while the Pod ran (a real task
    executor died, see :mod:`.executor`). If the ``restartPolicy`` restarts it, as the
    ``crash`` mode shows a crash, for that container alone: ``restartCount`` + 1, the exit as
    ``lastState.terminated``, waiting in CrashLoopBackOff (the Pod not Ready), after which
    :func:`restarted_status` starts it again. Otherwise it stays terminated, as after
    ``kill 1`` (:func:`container_exit_status`)."""
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    if not (policy == "Always" or (policy == "OnFailure" and exit_code != 0)):
        return container_exit_status(pod, name, exit_code, now)
    statuses = []
    for previous in container_statuses(pod):
        status = dict(previous)
        if previous.get("name") == name:
            restarts = int(previous.get("restartCount", 0)) + 1
            status.update(
                ready=False,
                started=False,
                restartCount=restarts,
                lastState={"terminated": _exit(previous, exit_code, now)},
                state={"waiting": _crash_loop_waiting(pod, config, name, restarts)},
            )
        statuses.append(status)
    return {
        "phase": "Running",
        "conditions": _with_unready_conditions(pod, now, statuses),
        "containerStatuses": statuses,
    }


def restart_exited_status(pod: Json, config: KubeletConfig, now: str) -> Json | None:
    """The kubelet starts again the containers whose process ended while the Pod ran, as the
    ``restartPolicy`` says (Always; OnFailure after a non-zero exit): a new containerID,
    ``restartCount`` + 1, the exit as ``lastState``, running and not ready yet. None when the
    policy restarts none of them and another container still runs; when none runs any more
    the Pod is finished (Succeeded if every container exited 0, else Failed)."""
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    statuses = []
    restarted = False
    for previous in container_statuses(pod):
        status = dict(previous)
        terminated = (previous.get("state") or {}).get("terminated")
        if isinstance(terminated, dict) and (
            policy == "Always" or (policy == "OnFailure" and terminated.get("exitCode") != 0)
        ):
            restarts = int(previous.get("restartCount", 0)) + 1
            status.update(
                containerID=_container_id(config, pod, str(previous.get("name", "")), restarts),
                restartCount=restarts,
                lastState={"terminated": terminated},
                state={"running": {"startedAt": now}},
                started=True,
                ready=False,
            )
            restarted = True
        statuses.append(status)
    if restarted:
        return {
            "phase": "Running",
            "conditions": _with_unready_conditions(pod, now, statuses),
            "containerStatuses": statuses,
        }
    if any("running" in (s.get("state") or {}) for s in statuses):
        return None
    failed = any(
        ((s.get("state") or {}).get("terminated") or {}).get("exitCode") != 0 for s in statuses
    )
    return _finished(pod, now, "Failed" if failed else "Succeeded", statuses)


def terminated_status(pod: Json, now: str) -> Json:
    """Status once the containers stopped for a graceful deletion (kubelet's terminal phase)."""
    statuses = []
    any_failed = False
    for container in containers(pod):
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
        elif isinstance(state.get("terminated"), dict):  # its process had ended already
            terminated = state["terminated"]
            any_failed = any_failed or terminated.get("exitCode") != 0
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


def job_pod_status(pod: Json, exit_code: int, message: str, started: str, finished: str) -> Json:
    """A Job's Pod whose containers ran from ``started`` and all exited ``exit_code`` at
    ``finished``, ``message`` in their termination log: the one status the Job simulation
    writes for it. It is planned before the Pod exists, so the container ids come from the
    Pod's namespace and name (which carry the Job's uid), not from a uid it has yet to get."""
    metadata = pod.get("metadata") or {}
    statuses = []
    for container in containers(pod):
        name = str(container.get("name", ""))
        container_id = "containerd://" + digest(
            "job-pod", metadata.get("namespace"), metadata.get("name"), name
        )
        terminated: Json = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": started,
            "finishedAt": finished,
            "containerID": container_id,
        }
        if message:  # upstream leaves it out when the log is empty
            terminated["message"] = message
        statuses.append(
            {
                "name": name,
                "image": container.get("image", ""),
                "imageID": _image_id(str(container.get("image", ""))),
                "containerID": container_id,
                "ready": False,
                "started": False,
                "restartCount": 0,
                "lastState": {},
                "state": {"terminated": terminated},
            }
        )
    status = _finished(pod, finished, "Succeeded" if exit_code == 0 else "Failed", statuses)
    status["startTime"] = started
    return status
