"""The world the end-to-end tests run services in, and the warm pools they fill there:
:func:`cluster_world` starts an embedded nats-server and the development cluster (fast kubelet)
in this process, with a client of the cluster and the cluster's record of every commit; the
builders and readers make and read SandboxTemplates, SandboxWarmPools and their members.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from api.keys import LABEL_WARM_POOL_SANDBOX, name_hash
from api.objects import Json
from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from devtools.natsd import NatsServer
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi
from tests.component.watcher.harness import ClusterHistory
from tests.support.samples import NS, condition
from tests.support.stack import FAST_KUBELET, api_client


def template_body(name: str = "tpl", image: str = "python:3.12", **annotations: str) -> Json:
    pod_template: Json = {"spec": {"containers": [{"name": "app", "image": image}]}}
    if annotations:
        pod_template["metadata"] = {"annotations": annotations}
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"podTemplate": pod_template},
    }


def pool_body(name: str, replicas: int, template: str = "tpl", strategy: str | None = None) -> Json:
    spec: Json = {"replicas": replicas, "sandboxTemplateRef": {"name": template}}
    if strategy:
        spec["updateStrategy"] = {"type": strategy}
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def creates_of(history: ClusterHistory, pool: str) -> int:
    wanted = name_hash(pool)
    return sum(
        1
        for change in history.of(["Sandbox"])
        if change.type == "ADDED" and change.labels.get(LABEL_WARM_POOL_SANDBOX) == wanted
    )


async def members(kube: KubeApi, pool: str) -> list[Json]:
    wanted = name_hash(pool)
    return [
        s
        for s in await kube.list("Sandbox", NS)
        if (s["metadata"].get("labels") or {}).get(LABEL_WARM_POOL_SANDBOX) == wanted
        and not s["metadata"].get("deletionTimestamp")
    ]


async def ready_members(kube: KubeApi, pool: str) -> int:
    return sum(
        1 for s in await members(kube, pool) if condition(s) == ("True", "DependenciesReady")
    )


async def pool_status(kube: KubeApi, pool: str) -> Json:
    return (await kube.get(ObjectKey("SandboxWarmPool", NS, pool))).get("status") or {}


@asynccontextmanager
async def cluster_world(
    tmp_path: Path, *, watch_lag: tuple[float, float] = (0.0, 0.0), nodes: int = 3
) -> AsyncIterator[tuple[NatsServer, DevCluster, KubeApi, Path, ClusterHistory]]:
    simulation = SimulationSettings(
        nodes=nodes, pod_ready_delay=0.05, options={"kubelet": dict(FAST_KUBELET)}
    )
    latency = LatencyModel(read=(0.0, 0.0), write=(0.0, 0.0), watch=watch_lag)
    history = ClusterHistory()
    async with (
        NatsServer(store_dir=tmp_path / "nats") as nats_server,
        DevCluster(port=0, latency=latency, simulation=simulation) as cluster,
        api_client(cluster, tmp_path, "test") as client,
    ):
        cluster.store.subscribe(None, history.sink)
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        yield nats_server, cluster, KubeApi(client, field_manager="e2e-test"), kubeconfig, history
