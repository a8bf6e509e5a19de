"""The soak's world: a three-node NATS cluster, the development cluster in this process, and every
sandbus service as processes of its own, two replicas of each, supervised.

A replica that exits (SIGKILLed by a fault, or gone for good after NATS stayed down longer than
its reconnect budget) is started again after a short backoff with the same identity, as a
kubelet restarts a container in the same Pod. Every timing the services wait on is shortened
through their settings (leases of 2 s, a claim replica counted dead after 3 s), so that a fault
plays out in seconds rather than minutes; nothing else about them differs from production.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from devtools.natsd import NatsCluster
from services.cli.processes import die_with_parent, free_port
from services.runtime.kube import KubeApi

__all__ = ["LOAD_AGENT", "Replica", "Services", "World", "world"]

SERVICES = ("watcher", "sandbox", "pool", "claim", "snapshot")
REPLICAS = 2
LOAD_AGENT = "soak-load"
"""The User-Agent of the load's and the checker's requests: the API faults spare them (a user
who sees a 500 retries; the soak wants to know what it created)."""

SERVICE_ENV = {
    "SANDBUS_BUS_REPLICAS": "3",
    "SANDBUS_WATCHER_LEASE_SECONDS": "2",
    "SANDBUS_SANDBOX_LEASE_SECONDS": "2",
    "SANDBUS_POOL_LEASE_SECONDS": "2",
    "SANDBUS_SNAPSHOT_LEASE_SECONDS": "2",
    # Where a paused BatchSandbox's snapshot goes (the development cluster's commit Jobs are
    # simulated and push nowhere); without one every pause fails with RegistryNotConfigured.
    "SANDBUS_SNAPSHOT_REGISTRY": "registry.soak.local/snapshots",
    "SANDBUS_CLAIM_REPLICA_TTL": "3",
    # NATS down for longer than this: the service exits non-zero and is started again.
    "SANDBUS_NATS_RECONNECT_BUDGET": "20",
    "SANDBUS_SANDBOX_STATUS_WINDOW": "1",
    "PYTHONUNBUFFERED": "1",
}
_RUN = (sys.executable, "-m", "services.cli", "run")
"""``sandbus run``, which logs at INFO (``SANDBUS_LOG_LEVEL``): a violation leaves a trail."""
_RESTART_BACKOFF = (0.5, 4.0)
"""Seconds before a replica that exited is started again: doubling from the first, up to the
second, reset once a run lasted longer than the second."""


@dataclass
class Replica:
    """One process of a service, started again whenever it exits."""

    service: str
    index: int
    metrics_port: int
    process: asyncio.subprocess.Process | None = None
    starts: int = 0
    started_at: float = 0.0
    paused: bool = False
    exits: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.service}-{self.index}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None


class Services:
    """Every replica of every service, each supervised by a task of its own."""

    def __init__(
        self, nats_url: str, kubeconfig: Path, logs: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self._nats_url = nats_url
        self._kubeconfig = kubeconfig
        self._logs = logs
        self._env = {**SERVICE_ENV, **(env or {})}
        self.replicas = [
            Replica(service, index, free_port())
            for service in SERVICES
            for index in range(REPLICAS)
        ]
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._supervise(replica), name=f"supervise {replica.name}")
            for replica in self.replicas
        ]

    async def _spawn(self, replica: Replica) -> None:
        identity = replica.name
        env = {
            **os.environ,
            **self._env,
            "SANDBUS_IDENTITY": identity,
            "SANDBUS_WATCHER_IDENTITY": identity,
            "SANDBUS_METRICS_ADDRESS": f"127.0.0.1:{replica.metrics_port}",
        }
        with (self._logs / f"{replica.name}.log").open("ab") as log:
            replica.process = await asyncio.create_subprocess_exec(
                *_RUN,
                replica.service,
                "--nats",
                self._nats_url,
                "--kubeconfig",
                str(self._kubeconfig),
                stdout=log,
                stderr=log,
                env=env,
                preexec_fn=die_with_parent,
            )
        replica.starts += 1
        replica.started_at = time.monotonic()
        replica.paused = False

    async def _supervise(self, replica: Replica) -> None:
        backoff = _RESTART_BACKOFF[0]
        while not self._stopping:
            await self._spawn(replica)
            assert replica.process is not None
            code = await replica.process.wait()
            if self._stopping:
                return
            replica.exits.append(code)
            lasted = time.monotonic() - replica.started_at
            backoff = _RESTART_BACKOFF[0] if lasted > _RESTART_BACKOFF[1] else backoff
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _RESTART_BACKOFF[1])

    def kill(self, replica: Replica) -> None:
        """SIGKILL, as the OOM killer or a node's loss would; the supervisor starts it again."""
        if replica.running and replica.process is not None:
            if replica.paused:
                replica.process.send_signal(signal.SIGCONT)
            replica.process.kill()

    def pause(self, replica: Replica) -> bool:
        """SIGSTOP: alive to the kernel and its sockets, silent to everyone else."""
        if not replica.running or replica.paused or replica.process is None:
            return False
        replica.process.send_signal(signal.SIGSTOP)
        replica.paused = True
        return True

    def resume(self, replica: Replica) -> None:
        if replica.paused and replica.running and replica.process is not None:
            replica.process.send_signal(signal.SIGCONT)
        replica.paused = False

    async def ready(self, http: aiohttp.ClientSession, replica: Replica) -> bool:
        """Does the replica answer ``/readyz`` with 200?"""
        try:
            async with http.get(
                f"http://127.0.0.1:{replica.metrics_port}/readyz",
                timeout=aiohttp.ClientTimeout(total=2),
            ) as answer:
                return answer.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def stop(self) -> None:
        self._stopping = True
        for replica in self.replicas:
            self.resume(replica)
            if replica.running and replica.process is not None:
                replica.process.terminate()
        for replica in self.replicas:
            if replica.process is not None and replica.process.returncode is None:
                try:
                    async with asyncio.timeout(10):
                        await replica.process.wait()
                except TimeoutError:
                    replica.process.kill()
                    await replica.process.wait()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@dataclass
class World:
    bus: NatsCluster
    cluster: DevCluster
    services: Services
    kube: KubeApi
    logs: Path


@contextlib.asynccontextmanager
async def world(directory: Path, *, seed: int, nodes: int = 6) -> AsyncIterator[World]:
    """The NATS cluster, the development cluster and a client of it (``LOAD_AGENT``); the
    services are made but not started (:meth:`Services.start`)."""
    logs = directory / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    simulation = SimulationSettings(
        nodes=nodes,
        pod_ready_delay=0.05,
        options={
            "kubelet": {
                "schedule_delay": 0.01,
                "start_delay": 0.02,
                "termination_delay": 0.01,
                "run_duration": 0.1,
            }
        },
    )
    latency = LatencyModel(read=(0.0, 0.0), write=(0.0005, 0.003), watch=(0.0, 0.001), seed=seed)
    async with (
        NatsCluster(3, store_dir=directory / "nats") as bus,
        DevCluster(port=0, latency=latency, simulation=simulation, seed=seed) as cluster,
    ):
        kubeconfig = cluster.write_kubeconfig(directory / "kubeconfig")
        configuration = k8s.Configuration()
        await k8s_config.load_kube_config(
            config_file=str(kubeconfig), client_configuration=configuration
        )
        async with k8s.ApiClient(configuration) as client:
            client.user_agent = LOAD_AGENT
            services = Services(bus.url, kubeconfig, logs)
            try:
                yield World(bus, cluster, services, KubeApi(client, field_manager=LOAD_AGENT), logs)
            finally:
                await services.stop()
