"""The sandbox worker against the real thing, in this process: a nats-server with the bus, the
development cluster with its simulated kubelet and garbage collector, the watcher, and the
sandbox worker; and the context managers that start and stop each part within a bound.

Tests talk to the cluster the way users do (through the API), and wait for what they expect
by reading it back with a deadline (:func:`tests.support.waiting.until`): the cluster is another
actor, there is no event of ours to await. The ``stack`` fixture of tests/component/sandbox
is :func:`running_stack`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from nats.aio.client import Client
from nats.js import JetStreamContext
from opentelemetry.trace import Tracer

from devtools.cluster import DevCluster, LatencyModel, SimulationSettings, WatchSettings
from events.codec import decode_event
from events.envelope import ObjectKey
from events.subjects import decision_filter
from events.types import DecisionMade
from services.claim.core.plan import CONTROLLER_NAME as CLAIM_CONTROLLER
from services.claim.worker import claim_worker
from services.pool.core.plan import CONTROLLER_NAME as POOL_CONTROLLER
from services.pool.worker import pool_worker
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.kube import KubeApi, KubeError
from services.runtime.lease import LeaseTimings
from services.runtime.reconcile.worker import Worker
from services.runtime.streams import read_to_end
from services.runtime.worker_api import WorkerDefinition, WorkerSettings
from services.sandbox.core.plan import CONTROLLER_NAME
from services.sandbox.worker import sandbox_worker
from services.watcher.config import WatcherConfig
from services.watcher.service import Watcher
from tests.support.samples import NS, Json, condition
from tests.support.waiting import until

__all__ = [
    "FAST_KUBELET",
    "STOP_BOUND",
    "Stack",
    "api_client",
    "bounded",
    "cluster_and_watcher",
    "decisions_for",
    "finish",
    "gone",
    "loaded",
    "pool_worker_running",
    "ready_sandbox",
    "running",
    "running_stack",
    "sandbox_worker_running",
    "wait_ready",
]

log = logging.getLogger(__name__)

STOP_BOUND = 20.0
"""Seconds any part of the stack may take to stop; a hang fails with the names of the tasks."""

FAST_KUBELET = {
    "schedule_delay": 0.01,
    "start_delay": 0.02,
    "termination_delay": 0.01,
    "run_duration": 0.1,
}


@dataclass
class Stack:
    """The running stack, as a test talks to it: the objects of namespace :data:`NS` by kind
    and name, through the worker's own API client."""

    cluster: DevCluster
    nc: Client
    js: JetStreamContext
    kube: KubeApi
    worker: Worker
    bus: BusConfig

    async def create(self, body: Json) -> Json:
        return await self.kube.create(body)

    async def get(self, kind: str, name: str) -> Json | None:
        try:
            return await self.kube.get(ObjectKey(kind, NS, name))
        except KubeError as error:
            if error.not_found:
                return None
            raise

    async def patch(self, kind: str, name: str, patch: Json) -> Json:
        return await self.kube.patch(ObjectKey(kind, NS, name), patch)

    async def delete(self, kind: str, name: str) -> None:
        await self.kube.delete(ObjectKey(kind, NS, name))


async def wait_ready(watcher: Watcher, task: asyncio.Task[None]) -> None:
    """Return once ``watcher`` (run by ``task``) has a ready session; fail if it stopped."""

    async def ready() -> bool:
        if task.done():
            task.result()
            raise AssertionError("the watcher stopped")
        return watcher.session is not None and watcher.session.ready.is_set()

    await until(ready, within=20, what="the watcher's session to be ready")


@contextlib.asynccontextmanager
async def api_client(
    cluster: DevCluster, tmp_path: Path, name: str
) -> AsyncIterator[k8s.ApiClient]:
    """A Kubernetes client of ``cluster``, through a kubeconfig of its own named ``name``."""
    kubeconfig = cluster.write_kubeconfig(tmp_path / f"kubeconfig-{name}")
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    async with k8s.ApiClient(configuration) as client:
        yield client


def _hung(what: str) -> AssertionError:
    stacks = "\n".join(f"{t.get_name()}: {t.get_stack(limit=8)}" for t in asyncio.all_tasks())
    return AssertionError(f"{what} did not finish within its bound; tasks:\n{stacks}")


async def finish(
    task: asyncio.Future[Any], what: str, *, cancel: bool, tolerate: bool = False
) -> None:
    """Wait for ``task`` at most STOP_BOUND seconds, cancelling it again and again if asked:
    on Python 3.11 a cancellation can be swallowed inside nats-py (see
    services.runtime.cancellation), and a bound that relied on cancelling the
    waiter would be swallowed the same way."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STOP_BOUND
    while not task.done():
        if cancel:
            task.cancel()
        await asyncio.wait({task}, timeout=0.5)
        if not task.done() and loop.time() > deadline:
            if tolerate:
                log.warning("%s", _hung(what))
                return
            raise _hung(what)
    if not task.cancelled():
        task.result()


@contextlib.asynccontextmanager
async def bounded(
    context: contextlib.AbstractAsyncContextManager[Any], what: str
) -> AsyncIterator[Any]:
    """``async with context``, with an exit bounded in time that names what hung."""
    value = await context.__aenter__()
    try:
        yield value
    except BaseException as error:
        exiting = asyncio.ensure_future(context.__aexit__(type(error), error, error.__traceback__))
        await finish(exiting, f"stopping {what}", cancel=False)
        if exiting.result():
            return
        raise
    else:
        exiting = asyncio.ensure_future(context.__aexit__(None, None, None))
        await finish(exiting, f"stopping {what}", cancel=False)


@contextlib.asynccontextmanager
async def running(
    coroutine: Awaitable[None], name: str, *, tolerate_hang: bool = False
) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.ensure_future(coroutine)
    task.set_name(name)
    try:
        yield task
    finally:
        await finish(task, f"{name} (cancelled)", cancel=True, tolerate=tolerate_hang)


@contextlib.asynccontextmanager
async def cluster_and_watcher(
    nats_url: str,
    tmp_path: Path,
    *,
    failure_rules: tuple[Any, ...] = (),
    kubelet: Mapping[str, float] | None = None,
) -> AsyncIterator[tuple[DevCluster, Client, JetStreamContext, BusConfig]]:
    """The development cluster (fast kubelet, unless ``kubelet`` changes its delays; garbage
    collector), NATS with the bus, and a ready watcher."""
    bus = BusConfig(storage="memory")
    simulation = SimulationSettings(
        pod_ready_delay=0.05,
        options={"kubelet": {**FAST_KUBELET, **(kubelet or {}), "failure_rules": failure_rules}},
    )
    cluster = DevCluster(
        port=0,
        latency=LatencyModel.zero(),
        simulation=simulation,
        watch=WatchSettings(bookmark_interval=1.0, bookmark_before_deadline=0.3, idle_check=0.05),
    )
    async with bounded(cluster, "the development cluster"):
        nc = await nats.connect(nats_url)
        try:
            js = nc.jetstream()
            await ensure_bus(js, bus)
            async with bounded(
                api_client(cluster, tmp_path, "watcher"), "the watcher's API client"
            ) as watcher_client:
                config = WatcherConfig(
                    identity="watcher-sandbox-test",
                    lease=LeaseTimings.for_duration(2.0),
                    inactivity_limit=5.0,
                    bus=bus,
                )
                watcher = Watcher(nc, watcher_client, config)
                # The watcher is another service under test elsewhere; a watcher that does not
                # stop when cancelled is logged here, not failed, so that these tests judge
                # the sandbox worker alone.
                async with running(watcher.run(), "watcher") as task:
                    await wait_ready(watcher, task)
                    yield cluster, nc, js, bus
        finally:
            await finish(asyncio.ensure_future(nc.close()), "closing NATS", cancel=False)


@contextlib.asynccontextmanager
async def loaded(worker: Worker, what: str) -> AsyncIterator[Worker]:
    """Run ``worker`` until the block ends; enter once it has loaded the state table."""
    async with running(worker.run(), what) as task:
        async with asyncio.timeout(20):
            while not worker.feed.loaded.is_set():
                if task.done():
                    task.result()
                await asyncio.sleep(0.02)
        yield worker


@contextlib.asynccontextmanager
async def sandbox_worker_running(
    cluster: DevCluster,
    js: JetStreamContext,
    bus: BusConfig,
    tmp_path: Path,
    name: str = "worker",
    *,
    write_behind: float = 0.0,
    status_window: float = 0.0,
    tracer: Tracer | None = None,
) -> AsyncIterator[tuple[Worker, KubeApi]]:
    async with bounded(api_client(cluster, tmp_path, name), "the worker's API client") as client:
        kube = KubeApi(client, field_manager=CONTROLLER_NAME)
        worker = Worker(
            sandbox_worker(write_behind=write_behind, status_window=status_window),
            js=js,
            api=kube,
            bus=bus,
            settings=WorkerSettings(concurrency=16, max_delay=2.0),
            tracer=tracer,
        )
        async with loaded(worker, "sandbox worker"):
            yield worker, kube


@contextlib.asynccontextmanager
async def running_stack(
    nats_url: str,
    tmp_path: Path,
    *,
    kubelet: Mapping[str, float] | None = None,
    **worker_options: Any,
) -> AsyncIterator[Stack]:
    """The whole stack; ``kubelet`` goes to :func:`cluster_and_watcher`, ``worker_options`` to
    :func:`sandbox_worker_running`."""
    async with (
        cluster_and_watcher(nats_url, tmp_path, kubelet=kubelet) as (cluster, nc, js, bus),
        sandbox_worker_running(cluster, js, bus, tmp_path, **worker_options) as (worker, kube),
    ):
        yield Stack(cluster, nc, js, kube, worker, bus)


@contextlib.asynccontextmanager
async def worker_running(
    definition: WorkerDefinition,
    controller: str,
    cluster: DevCluster,
    js: JetStreamContext,
    bus: BusConfig,
    tmp_path: Path,
    settings: WorkerSettings | None = None,
) -> AsyncIterator[Worker]:
    """A worker writing as ``controller``, with an API client of its own, loaded until the block
    ends (``settings``: instead of the tests' own)."""
    name = definition.name
    async with bounded(
        api_client(cluster, tmp_path, name), f"the {name} worker's API client"
    ) as client:
        worker = Worker(
            definition,
            js=js,
            api=KubeApi(client, field_manager=controller),
            bus=bus,
            settings=settings or WorkerSettings(concurrency=4, max_delay=2.0),
        )
        async with loaded(worker, f"{name} worker"):
            yield worker


def pool_worker_running(
    cluster: DevCluster,
    js: JetStreamContext,
    bus: BusConfig,
    tmp_path: Path,
    settings: WorkerSettings | None = None,
) -> contextlib.AbstractAsyncContextManager[Worker]:
    """The pool worker (:func:`worker_running`)."""
    return worker_running(pool_worker(), POOL_CONTROLLER, cluster, js, bus, tmp_path, settings)


def claim_worker_running(
    cluster: DevCluster,
    js: JetStreamContext,
    bus: BusConfig,
    tmp_path: Path,
    settings: WorkerSettings | None = None,
) -> contextlib.AbstractAsyncContextManager[Worker]:
    """The claim worker (:func:`worker_running`)."""
    return worker_running(claim_worker(), CLAIM_CONTROLLER, cluster, js, bus, tmp_path, settings)


# -- reading what the stack did ----------------------------------------------------------------


async def ready_sandbox(stack: Stack, name: str, within: float = 20.0) -> Json:
    """Sandbox ``name`` once it is Ready (reason DependenciesReady)."""

    async def ready() -> Json | None:
        found = await stack.get("Sandbox", name)
        return found if condition(found) == ("True", "DependenciesReady") else None

    result: Json = await until(ready, within=within, what=f"Sandbox {name} to be Ready")
    return result


async def gone(stack: Stack, kind: str, name: str, within: float = 20.0) -> None:
    """Return once ``kind`` ``name`` is gone from the cluster."""

    async def check() -> bool:
        return await stack.get(kind, name) is None

    await until(check, within=within, what=f"{kind} {name} to be gone")


async def decisions_for(stack: Stack, name: str) -> list[DecisionMade]:
    """Every decision the sandbox worker recorded for Sandbox ``name``, in order."""
    found = []
    subject = decision_filter("sandbox", "Sandbox", NS, name)
    async for msg in read_to_end(stack.js, stack.bus.event_log_stream, [subject]):
        event = decode_event(msg.data)
        assert isinstance(event, DecisionMade)
        found.append(event)
    return found
