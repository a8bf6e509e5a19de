"""Everything a claim goes through, in this process, each service with a tracer of its own if it
is given one: the development cluster (fast kubelet, garbage collector), a real nats-server with
the bus, the watcher, and the sandbox, pool and claim workers.

The stack of :mod:`tests.support.stack`, with the watcher's tracer and the two more
workers a warm claim needs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import nats
from nats.js import JetStreamContext
from opentelemetry.trace import Tracer

from devtools.cluster import DevCluster, LatencyModel, SimulationSettings, WatchSettings
from services.claim.core.plan import CONTROLLER_NAME as CLAIM_CONTROLLER
from services.claim.worker import claim_worker
from services.pool.core.plan import CONTROLLER_NAME as POOL_CONTROLLER
from services.pool.worker import pool_worker
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.kube import KubeApi
from services.runtime.lease import LeaseTimings
from services.runtime.reconcile.worker import Worker
from services.runtime.worker_api import WorkerDefinition, WorkerSettings
from services.watcher.config import WatcherConfig
from services.watcher.service import Watcher
from tests.support.samples import NS, Json
from tests.support.stack import (
    FAST_KUBELET,
    api_client,
    bounded,
    finish,
    loaded,
    running,
    sandbox_worker_running,
    wait_ready,
)

__all__ = ["NS", "Stack", "claim_body", "pool_body", "stack", "template_body"]


def template_body(name: str = "python") -> Json:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "app", "image": "python:3.12"}]}}
        },
    }


def pool_body(name: str, replicas: int, template: str = "python") -> Json:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}},
    }


def claim_body(name: str, pool: str) -> Json:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"warmPoolRef": {"name": pool}},
    }


@dataclass
class Stack:
    cluster: DevCluster
    js: JetStreamContext
    bus: BusConfig
    kube: KubeApi
    """The test's own client, writing as a user would."""
    workers: Mapping[str, Worker]


@contextlib.asynccontextmanager
async def _worker(
    name: str,
    definition: WorkerDefinition,
    field_manager: str,
    cluster: DevCluster,
    js: JetStreamContext,
    bus: BusConfig,
    tmp_path: Path,
    tracer: Tracer | None,
) -> AsyncIterator[Worker]:
    async with bounded(api_client(cluster, tmp_path, name), f"the {name} worker's client") as c:
        worker = Worker(
            definition,
            js=js,
            api=KubeApi(c, field_manager=field_manager),
            bus=bus,
            settings=WorkerSettings(concurrency=4, max_delay=2.0),
            tracer=tracer,
        )
        async with loaded(worker, f"{name} worker"):
            yield worker


@contextlib.asynccontextmanager
async def stack(
    nats_url: str, tmp_path: Path, tracers: Mapping[str, Tracer] | None = None
) -> AsyncIterator[Stack]:
    """The whole stack; ``tracers`` by service (watcher, sandbox, pool, claim)."""
    tracers = tracers or {}
    bus = BusConfig(storage="memory")
    cluster = DevCluster(
        port=0,
        latency=LatencyModel.zero(),
        simulation=SimulationSettings(pod_ready_delay=0.05, options={"kubelet": FAST_KUBELET}),
        watch=WatchSettings(bookmark_interval=1.0, bookmark_before_deadline=0.3, idle_check=0.05),
    )
    async with bounded(cluster, "the development cluster"):
        nc = await nats.connect(nats_url)
        try:
            js = nc.jetstream()
            await ensure_bus(js, bus)
            async with (
                bounded(api_client(cluster, tmp_path, "watcher"), "the watcher's client") as wc,
                bounded(api_client(cluster, tmp_path, "test"), "the test's client") as tc,
            ):
                config = WatcherConfig(
                    identity="watcher-tracing-test",
                    lease=LeaseTimings.for_duration(2.0),
                    inactivity_limit=5.0,
                    bus=bus,
                )
                watcher = Watcher(nc, wc, config, tracer=tracers.get("watcher"))
                async with running(watcher.run(), "watcher", tolerate_hang=True) as task:
                    await wait_ready(watcher, task)
                    async with (
                        sandbox_worker_running(
                            cluster, js, bus, tmp_path, "sandbox", tracer=tracers.get("sandbox")
                        ) as (sandbox, _),
                        _worker(
                            "pool",
                            pool_worker(),
                            POOL_CONTROLLER,
                            cluster,
                            js,
                            bus,
                            tmp_path,
                            tracers.get("pool"),
                        ) as pool,
                        _worker(
                            "claim",
                            claim_worker(),
                            CLAIM_CONTROLLER,
                            cluster,
                            js,
                            bus,
                            tmp_path,
                            tracers.get("claim"),
                        ) as claim,
                    ):
                        workers = {"sandbox": sandbox, "pool": pool, "claim": claim}
                        yield Stack(cluster, js, bus, KubeApi(tc, field_manager="test"), workers)
        finally:
            await finish(asyncio.ensure_future(nc.close()), "closing NATS", cancel=False)
