"""End to end: the watcher and the sandbox worker as their own processes (``sandbus run``), a
nats-server, and the development cluster; the worker is killed (SIGKILL) in the middle of the
work and started again.

What must hold: fifty Sandboxes all become Ready with their Pod's IP, each with exactly one Pod
(a restart that resumed from a stale view would create a second one or none), and deleting them
takes their Pods along.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from devtools.natsd import NatsServer
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi, KubeError
from tests.e2e.sandbox.harness import pods_of_sandboxes
from tests.e2e.services import log_tails, service
from tests.support.samples import NS, condition, sandbox_body
from tests.support.stack import FAST_KUBELET, api_client
from tests.support.waiting import until

pytestmark = pytest.mark.slow

COUNT = 50


async def ready_count(kube: KubeApi) -> int:
    count = 0
    for index in range(COUNT):
        try:
            found = await kube.get(ObjectKey("Sandbox", NS, f"sb-{index}"))
        except KubeError as error:
            if error.not_found:
                continue
            raise
        if condition(found) == ("True", "DependenciesReady") and found["status"].get("podIPs"):
            count += 1
    return count


async def test_fifty_sandboxes_across_a_worker_kill(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    try:
        await run_fifty_sandboxes(tmp_path, logs)
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n{log_tails(logs)}") from None


async def run_fifty_sandboxes(tmp_path: Path, logs: Path) -> None:
    simulation = SimulationSettings(
        nodes=2, pod_ready_delay=0.05, options={"kubelet": dict(FAST_KUBELET)}
    )
    async with (
        NatsServer(store_dir=tmp_path / "nats") as nats_server,
        DevCluster(port=0, latency=LatencyModel.zero(), simulation=simulation) as cluster,
        api_client(cluster, tmp_path, "test") as client,
    ):
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        kube = KubeApi(client, field_manager="e2e-test")
        core = k8s.CoreV1Api(client)
        async with service("watcher", nats_server.url, kubeconfig, logs):
            async with service("sandbox", nats_server.url, kubeconfig, logs) as worker:
                for index in range(COUNT // 2):
                    await kube.create(sandbox_body(f"sb-{index}"))
                await until(lambda: _at_least(kube, 1), within=60)
                worker.send_signal(signal.SIGKILL)
                await worker.wait()
            for index in range(COUNT // 2, COUNT):
                await kube.create(sandbox_body(f"sb-{index}"))
            async with service("sandbox", nats_server.url, kubeconfig, logs):
                await until(lambda: _at_least(kube, COUNT), within=90, interval=0.5)
                owners = await pods_of_sandboxes(core)
                assert owners == {f"sb-{index}": 1 for index in range(COUNT)}

                for index in range(COUNT):
                    await kube.delete(ObjectKey("Sandbox", NS, f"sb-{index}"))

                async def no_pods_left() -> bool:
                    return not await pods_of_sandboxes(core)

                await until(no_pods_left, within=60, interval=0.5)


async def _at_least(kube: KubeApi, wanted: int) -> bool:
    return await ready_count(kube) >= wanted
