"""End to end: two sandbox-worker processes, active-passive on the Lease ``sandbus-sandbox``; the
active one is killed (SIGKILL) in the middle of 100 Sandbox creates.

What must hold: the standby takes the Lease over and finishes the work; every Sandbox ends
Ready with exactly one Pod (the Pod adoption and creation are race-safe, and the successor
resumes the shared durable consumer, so nothing is missed and nothing doubled).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from devtools.natsd import NatsServer
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi, KubeError
from services.runtime.lease import holder_of
from tests.e2e.sandbox.harness import pods_of_sandboxes
from tests.e2e.services import log_tails, service
from tests.support.samples import NS, condition, sandbox_body
from tests.support.stack import FAST_KUBELET, api_client
from tests.support.waiting import until

pytestmark = pytest.mark.slow

COUNT = 100
LEASE = ObjectKey("Lease", NS, "sandbus-sandbox")


async def ready_names(kube: KubeApi) -> set[str]:
    return {
        sandbox["metadata"]["name"]
        for sandbox in await kube.list("Sandbox", NS)
        if condition(sandbox) == ("True", "DependenciesReady")
        and (sandbox.get("status") or {}).get("podIPs")
    }


async def lease_holder(kube: KubeApi) -> str | None:
    try:
        return holder_of(await kube.get(LEASE)) or None
    except KubeError as error:
        if error.not_found:
            return None
        raise


async def test_killing_the_active_replica_mid_burst_leaves_every_sandbox_ready_once(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    try:
        await run_burst_across_failover(tmp_path, logs)
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n{log_tails(logs)}") from None


async def run_burst_across_failover(tmp_path: Path, logs: Path) -> None:
    simulation = SimulationSettings(
        nodes=2, pod_ready_delay=0.05, options={"kubelet": dict(FAST_KUBELET)}
    )
    lease_env = {"SANDBUS_SANDBOX_LEASE_SECONDS": "2"}
    async with (
        NatsServer(store_dir=tmp_path / "nats") as nats_server,
        DevCluster(port=0, latency=LatencyModel.zero(), simulation=simulation) as cluster,
        api_client(cluster, tmp_path, "test") as client,
    ):
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        kube = KubeApi(client, field_manager="e2e-test")
        core = k8s.CoreV1Api(client)

        def replica(identity: str):  # type: ignore[no-untyped-def]
            return service(
                "sandbox",
                nats_server.url,
                kubeconfig,
                logs,
                env={**lease_env, "SANDBUS_IDENTITY": identity},
                log_name=f"sandbox-{identity}",
            )

        async with (
            service("watcher", nats_server.url, kubeconfig, logs),
            replica("a") as a,
            replica("b") as b,
        ):
            processes = {"a": a, "b": b}
            leader = await until(lambda: lease_holder(kube), within=30)
            assert leader in processes

            async def create(index: int) -> None:
                await kube.create(sandbox_body(f"sb-{index}"))

            creating = asyncio.gather(*(create(i) for i in range(COUNT)))

            async def some_ready() -> bool:
                return len(await ready_names(kube)) >= 5

            await until(some_ready, within=60)
            processes[leader].send_signal(signal.SIGKILL)
            await processes[leader].wait()
            await creating
            assert len(await ready_names(kube)) < COUNT, "killed in the middle of the work"

            standby = next(name for name in processes if name != leader)

            async def taken_over() -> bool:
                return await lease_holder(kube) == standby

            await until(taken_over, within=30, interval=0.2)

            async def all_ready() -> bool:
                return len(await ready_names(kube)) == COUNT

            await until(all_ready, within=120, interval=0.5)
            owners = await pods_of_sandboxes(core)
            assert owners == {f"sb-{index}": 1 for index in range(COUNT)}
            pods = (await core.list_namespaced_pod(NS)).items
            assert len(pods) == COUNT, "no Pod without its Sandbox either"
