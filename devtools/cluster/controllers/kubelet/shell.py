"""The shell of the simulated scheduler, kubelets and Job controller: :class:`Kubelet`.

It talks to the API server over HTTP exactly as the real components do, never to the store, so every
write goes through admission, validation and watch fan-out like any client's. On start it registers
one Node per configured node (status through ``nodes/status``), then list+watches Pods (and Jobs)
through an :class:`~devtools.cluster.controllers.informer.Informer`, which relists on 410 (the
Pods' one shared with the garbage collector when the cluster hands it
:class:`~devtools.cluster.controllers.informer.SharedInformers`). Every
event puts the object's key on the work queue (:class:`api.workqueue.WorkQueue`); a few workers
take keys off it, plan with :func:`~.stages.plan_pod` or :func:`~.jobs.plan_job` from the cached
object, carry out the actions in order and requeue the key after the wait the plan asked for. Each
pass works that wait out afresh from the object, so a pass serves every wake-up asked for before
it (taking a key cancels its timer, as controller-runtime's queue does); a deleted object's
wake-up is dropped.
The writes: bind through ``pods/binding``, merge-patch ``pods/status`` (or ``jobs/status``) with the
observed resourceVersion as a precondition, delete with a uid precondition, as the kubelet's status
manager does. A 404 or 409 ends the plan quietly (the watch brings the version to plan from next);
anything else is logged and retried after 0.5 s.

The Job controller's action runs as a task of its own, handed a lookup into the Pod cache (an
image-committer Job commits from the Pod it names). When the outcome carries what the Job's Pod
reports, the Pod is created (a 409 AlreadyExists is an earlier pass's) and its finished status
written through ``pods/status`` before the Job's own; Pods controlled by a Job are otherwise
left alone, by the kubelet's planner and by the scheduler's tally below.

The scheduler's tally lives here, because only the shell sees every pod event: for each live
pod that holds a node and has not finished, its node and IP, with the sums per node, updated per
event rather than recounted per decision (which made a burst of N pods cost N²). Decisions the
cache does not show yet are held as reservations (a node bound to, an IP handed out), so that
the next pod, planned a moment later, is not put on the same full node or given the same IP.
Pods found unschedulable are queued again whenever a pod leaves a node.

The Pods that run OpenSandbox's task executor get a real process (:mod:`.executor`), run by an
:class:`~.supervisor.ExecutorSupervisor` the shell starts before the informers (it claims the
loopback range their IPs come from, which the planner then reads from the config). At every pass
over such a Pod the shell tells the supervisor which process the Pod should have and hands what
it saw of it to the planner; the supervisor's own tasks start, probe and stop the processes and
requeue the Pod when one answers ``/health`` or ends, so no worker ever waits on a process. A
deleted Pod's process is stopped and its directory removed; stopping the kubelet stops them all.
The default command runs ``python -m services.taskexecutor``: where that has nothing to run
(the module is absent, or a package without its ``__main__`` yet), the feature is off, with a
warning, so such Pods are simulated like any other rather than crash-looping.
:meth:`Kubelet.task_executor` says where a Pod's executor keeps its data, log and pid file.
The Pods that ask for agent-sandbox's runtime (:mod:`devtools.sandboxruntime`) get their
process from the same supervisor (see :mod:`.executor`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from api.objects import Json
from api.workqueue import QueueShutDown, WorkQueue
from devtools.cluster.controllers.informer import (
    Informer,
    NamespacedName,
    SharedInformers,
    cancel_tasks,
    namespaced_name,
)
from devtools.cluster.controllers.kubelet.actions import (
    Action,
    BindPod,
    CreatePod,
    DeletePod,
    Instant,
    LaunchJob,
    PatchStatus,
)
from devtools.cluster.controllers.kubelet.config import (
    DEFAULT_TASK_EXECUTOR_COMMAND,
    DEFAULT_TASK_EXECUTOR_MODULE,
    KubeletConfig,
)
from devtools.cluster.controllers.kubelet.executor import ExecutorState, wanted_executor
from devtools.cluster.controllers.kubelet.jobs import (
    JobMemory,
    JobOutcome,
    controlled_by_job,
    default_job_action,
    plan_job,
)
from devtools.cluster.controllers.kubelet.nodes import (
    ClusterView,
    node_object,
    node_status,
    nodes_for,
)
from devtools.cluster.controllers.kubelet.scheduling import is_unschedulable
from devtools.cluster.controllers.kubelet.stages import StageMemory, observe_stage, plan_pod
from devtools.cluster.controllers.kubelet.supervisor import (
    ExecutorFiles,
    ExecutorSupervisor,
    runnable_module,
)

if TYPE_CHECKING:
    from devtools.cluster.controllers.plug import ControllerContext

__all__ = ["Kubelet", "run"]

log = logging.getLogger(__name__)


_PODS = "/api/v1/pods"


def _split_key(key: Hashable) -> tuple[str, str, str]:
    parts: tuple[Any, ...] = key  # type: ignore[assignment]
    return str(parts[0]), str(parts[1]), str(parts[2])


def _wall_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _with_available_executor(config: KubeletConfig) -> KubeletConfig:
    """The config, with the feature off when its default command has no module to run."""
    if config.task_executor_command != DEFAULT_TASK_EXECUTOR_COMMAND:
        return config
    if runnable_module(DEFAULT_TASK_EXECUTOR_MODULE):
        return config
    log.warning(
        "kubelet: python -m %s has nothing to run; pods that run the task executor are "
        "simulated without one (set task_executor_command to run another)",
        DEFAULT_TASK_EXECUTOR_MODULE,
    )
    return replace(config, task_executor_command=None)


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
        informers: SharedInformers | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.config = config or KubeletConfig()
        self._headers = dict(headers or {})
        self._shared = informers  # the Pods are watched through it when given
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._job_tasks: set[asyncio.Task[Any]] = set()
        self._queue: WorkQueue[Hashable] = WorkQueue()
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
        self.nodes = nodes_for(self.config)
        self._pods: Informer | None = None
        self._jobs: Informer | None = None
        self._executors: ExecutorSupervisor | None = None

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
        self.config = _with_available_executor(self.config)
        if self.config.runs_processes:
            self._executors = ExecutorSupervisor(self.config, self._queue.add)
            await self._executors.start()
            # The planner allocates executor pods' IPs from the range the supervisor claimed.
            self.config = replace(self.config, task_executor_network=self._executors.network)
        self._session = aiohttp.ClientSession(
            headers={"User-Agent": "devcluster-kubelet", **self._headers}, read_bufsize=2**21
        )
        await self._register_nodes()
        own: list[Informer] = []  # the informers this kubelet runs itself
        if self._shared is not None:
            # Shared with the garbage collector, which also reads every Pod: one watch.
            self._pods = self._shared.informer(_PODS)
            self._pods.add_handler(self._on_pod)
        else:
            self._pods = Informer(self._session, self.base_url, _PODS, self._on_pod)
            own.append(self._pods)
        if self.config.manage_jobs:
            self._jobs = Informer(self._session, self.base_url, "/apis/batch/v1/jobs", self._on_job)
            own.append(self._jobs)
        self._tasks = [asyncio.create_task(informer.run()) for informer in own]
        self._tasks += [
            asyncio.create_task(self._worker()) for _ in range(max(1, self.config.workers))
        ]
        watched = [self._pods, *([self._jobs] if self._jobs is not None else [])]
        await asyncio.gather(*(informer.synced.wait() for informer in watched))

    async def stop(self) -> None:
        if self._shared is not None and self._pods is not None:
            self._pods.remove_handler(self._on_pod)
        await cancel_tasks([*self._tasks, *self._job_tasks])
        self._tasks.clear()
        self._job_tasks.clear()
        self._queue.shutdown()
        if self._executors is not None:  # after the workers: none may start another meanwhile
            await self._executors.close()
            self._executors = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- task executors ------------------------------------------------------------------------

    def task_executor(self, uid: str) -> ExecutorFiles | None:
        """Where the task executor of the pod with this uid keeps its data dir, log and pid
        file, and the pid of its process now (None: the pod has none here)."""
        return None if self._executors is None else self._executors.files(uid)

    @property
    def task_executor_root(self) -> Path | None:
        """The directory of every pod's executor files (None: no executors are run)."""
        return None if self._executors is None else self._executors.root

    # -- nodes ---------------------------------------------------------------------------------

    async def _register_nodes(self) -> None:
        assert self._session is not None
        for node in self.nodes:
            url = f"{self.base_url}/api/v1/nodes"
            async with self._session.post(url, json=node_object(node)) as response:
                if response.status not in (200, 201, 409):
                    raise RuntimeError(
                        f"registering node {node.name}: HTTP {response.status} "
                        f"{await response.text()}"
                    )
            # Status goes through the subresource, which is how a kubelet reports it.
            async with self._session.patch(
                f"{url}/{node.name}/status",
                params={"fieldManager": self.config.field_manager},
                json={"status": node_status(node, max_pods=self.config.max_pods, now=_wall_now())},
                headers={"Content-Type": "application/merge-patch+json"},
            ) as response:
                if response.status != 200:
                    raise RuntimeError(
                        f"reporting status of node {node.name}: HTTP {response.status} "
                        f"{await response.text()}"
                    )

    # -- events --------------------------------------------------------------------------------

    def _on_pod(self, kind: str, pod: Json, old: Json | None) -> None:
        key: Hashable = ("pod", *namespaced_name(pod))
        if kind == "DELETED":
            uid = (pod.get("metadata") or {}).get("uid", "")
            if self._executors is not None:
                self._executors.release(uid)
            self._memory.pop(uid, None)
            self._reserved_ips.pop(uid, None)
            self._reserved_nodes.pop(uid, None)
            self._unschedulable.discard(key)
            self._place(uid, None)
            self._queue.unschedule(key)
            return
        if is_unschedulable(pod):
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
        if pod is not None and not self._written_by_jobs(pod):
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

    def _written_by_jobs(self, pod: Json) -> bool:
        """A Job's Pod, which the Job simulation writes finished: it takes no room on a node."""
        return self.config.manage_jobs and controlled_by_job(pod)

    def _on_job(self, kind: str, job: Json, old: Json | None) -> None:
        key: Hashable = ("job", *namespaced_name(job))
        if kind == "DELETED":
            self._job_memory.pop((job.get("metadata") or {}).get("uid", ""), None)
            self._queue.unschedule(key)
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
            try:
                key, _ = await self._queue.get()
            except QueueShutDown:
                return
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

    async def _reconcile_pod(self, key: NamespacedName, queue_key: Hashable) -> None:
        assert self._pods is not None
        pod = self._pods.get(key)
        if pod is None:
            return
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        at = Instant(asyncio.get_running_loop().time(), _wall_now())
        # Only scheduling and IP allocation look at other pods; the rest plan with the nodes.
        view = ClusterView(self.nodes)
        stage = observe_stage(pod, view, jobs_simulated=self.config.manage_jobs)
        if stage in ("unbound", "creating"):
            view = self.cluster_view()
        executor: ExecutorState | None = None
        if self._executors is not None:
            self._executors.ensure(uid, queue_key, wanted_executor(pod, stage, self.config))
            executor = self._executors.state(uid)
        decision = plan_pod(pod, self._memory.get(uid), at, self.config, view, executor=executor)
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
            cached = self._pods.get(namespaced_name(pod)) if self._pods is not None else None
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
        body: Json = {"status": action.status}
        if action.resource_version:  # empty: no precondition (a Pod the Job controller made)
            body["metadata"] = {"resourceVersion": action.resource_version}
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

    async def _reconcile_job(self, key: NamespacedName, queue_key: Hashable) -> None:
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
            elif isinstance(action, CreatePod):
                if not await self._create_job_pod(action):
                    # No event of the Job's would bring it back: look again shortly.
                    self._queue.add_after(queue_key, 0.5)
                    break
            elif isinstance(action, PatchStatus):
                url = f"{self.base_url}/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status"
                if not await self._patch_status(url, action, name):
                    break

    async def _create_job_pod(self, action: CreatePod) -> bool:
        """Create the Job's Pod, then write its finished status."""
        assert self._session is not None
        metadata = action.pod.get("metadata") or {}
        namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
        url = f"{self.base_url}/api/v1/namespaces/{namespace}/pods"
        async with self._session.post(
            url, params={"fieldManager": self.config.field_manager}, json=action.pod
        ) as response:
            body = await response.text()
            # 409: the name comes from the Job's uid, so it is an earlier pass's Pod of this
            # Job (its status write may not have gone out): write the status all the same.
            if response.status != 409 and not self._accept(response.status, "create", name, body):
                return False
        # No resourceVersion precondition: nobody else writes this Pod's status.
        return await self._patch_status(
            f"{url}/{name}/status", PatchStatus(action.status, ""), name
        )

    def _cached_pod(self, namespace: str, name: str) -> Json | None:
        return self._pods.get((namespace, name)) if self._pods is not None else None

    async def _run_job(self, job: Json, uid: str, queue_key: Hashable) -> None:
        action = self.config.job_action or default_job_action(self.config, self._cached_pod)
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
    """Controller entry point for :class:`~devtools.cluster.cluster.DevCluster`.

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
    async with Kubelet(ctx.url, config, informers=ctx.informers):
        await asyncio.Event().wait()
