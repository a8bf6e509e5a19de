"""SandboxSnapshot formats (issue #29, docs/opensandbox.md §4.4) against the real thing: the
development cluster, a nats-server with the bus, the watcher, the claim worker (which makes a
template-mode BatchSandbox's Pod) and the snapshot worker, all in this process, and a real
``kubectl get -o yaml``.

A snapshot with ``spec.format: rootfs-v1`` is committed as always and keeps its format
(``status.format: rootfs-v1`` at Succeed). A ``qemu-v1`` snapshot fails with upstream's reason
``IncompatibleSnapshotFormat`` and makes no commit Job. The VM fields another writer puts in its
status (``virtualMachine``, ``kataVMState``, with fields sandbus does not know) are kept by the
CRD and by the worker, and ``kubectl get -o yaml`` shows them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from nats.js import JetStreamContext

from devtools.cluster import DevCluster
from events.envelope import ObjectKey
from services.runtime.bus import BusConfig
from services.runtime.kube import KubeApi
from services.runtime.reconcile.worker import Worker
from services.runtime.worker_api import WorkerSettings
from services.snapshot.core.plan import CONTROLLER_NAME, SnapshotSettings
from services.snapshot.worker import snapshot_worker
from tests.support.kubectl import KUBECTL, Kubectl
from tests.support.samples import NS, Json
from tests.support.stack import (
    api_client,
    bounded,
    claim_worker_running,
    cluster_and_watcher,
    loaded,
)
from tests.support.waiting import until

API_VERSION = "sandbox.opensandbox.io/v1alpha1"
REGISTRY = "registry.component.local/snapshots"
SANDBOX = "notebook"
WITHIN = 30.0
VIRTUAL_MACHINE: Json = {
    "digest": "sha256:9e107d9d372bb6826bd81d3542a419d6e3b3b3f0",
    "size": 268435456,
    "compatibility": {"machine": "pc-q35-8.2", "cpu": "host"},
}
KATA_STATE: Json = {
    "snapshotName": "notebook-vmstate-1",
    "restorePlanSecretName": "notebook-vmstate-1-plan",
    "addedLater": "kept as written",
}

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason=f"no kubectl at {KUBECTL}")


@contextlib.asynccontextmanager
async def snapshot_worker_running(
    cluster: DevCluster, js: JetStreamContext, bus: BusConfig, tmp_path: Path
) -> AsyncIterator[Worker]:
    """The snapshot worker with a registry, an API client of its own, loaded until the block
    ends."""
    async with bounded(
        api_client(cluster, tmp_path, "snapshot"), "the snapshot worker's API client"
    ) as client:
        worker = Worker(
            snapshot_worker(SnapshotSettings(registry=REGISTRY)),
            js=js,
            api=KubeApi(client, field_manager=CONTROLLER_NAME),
            bus=bus,
            settings=WorkerSettings(concurrency=4, max_delay=2.0),
        )
        async with loaded(worker, "snapshot worker"):
            yield worker


def sandbox_body() -> Json:
    return {
        "apiVersion": API_VERSION,
        "kind": "BatchSandbox",
        "metadata": {"name": SANDBOX, "namespace": NS},
        "spec": {
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "sandbox", "image": "python:3.12"}]}},
        },
    }


def snapshot_body(name: str, snapshot_format: str) -> Json:
    return {
        "apiVersion": API_VERSION,
        "kind": "SandboxSnapshot",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"sandboxName": SANDBOX, "format": snapshot_format},
    }


def failed_condition(snapshot: Json) -> Json:
    (condition,) = [
        c for c in (snapshot.get("status") or {}).get("conditions") or () if c["type"] == "Failed"
    ]
    return dict(condition)


async def test_rootfs_commits_and_a_vm_format_is_refused_with_its_vm_fields_kept(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
        claim_worker_running(cluster, js, bus, tmp_path),
        snapshot_worker_running(cluster, js, bus, tmp_path),
    ):
        kube = KubeApi(client, field_manager="component-test")
        await kube.create(sandbox_body())

        async def running_pod() -> Json | None:
            for pod in await kube.list("Pod", NS):
                owned = pod["metadata"]["name"] == f"{SANDBOX}-0"
                if owned and (pod.get("status") or {}).get("phase") == "Running":
                    return pod
            return None

        await until(running_pod, within=WITHIN)

        # rootfs-v1: committed, and the format is kept through the commit.
        await kube.create(snapshot_body("rootfs", "rootfs-v1"))

        async def terminal(name: str) -> Json | None:
            snapshot = await kube.get(ObjectKey("SandboxSnapshot", NS, name))
            phase = (snapshot.get("status") or {}).get("phase")
            return snapshot if phase in ("Succeed", "Failed") else None

        done = await until(lambda: terminal("rootfs"), within=WITHIN)
        assert done["status"]["phase"] == "Succeed", done["status"]
        assert done["spec"]["format"] == "rootfs-v1"
        assert done["status"]["format"] == "rootfs-v1"
        assert done["status"]["containers"][0]["imageUri"].startswith(f"{REGISTRY}/{SANDBOX}-")

        # qemu-v1: refused with upstream's reason, no commit Job.
        await kube.create(snapshot_body("vm", "qemu-v1"))
        refused = await until(lambda: terminal("vm"), within=WITHIN)
        assert refused["status"]["phase"] == "Failed"
        condition = failed_condition(refused)
        assert condition["reason"] == "IncompatibleSnapshotFormat"
        assert "commits only rootfs-v1" in condition["message"]
        assert "format" not in refused["status"]
        jobs = {job["metadata"]["name"] for job in await kube.list("Job", NS)}
        assert "vm-commit" not in jobs and "rootfs-commit" in jobs

        # Another writer records VM state in its status: nothing is pruned (and the worker
        # writes nothing more to a terminal snapshot).
        await kube.patch(
            ObjectKey("SandboxSnapshot", NS, "vm"),
            {"status": {"virtualMachine": VIRTUAL_MACHINE, "kataVMState": KATA_STATE}},
            subresource="status",
        )
        home = tmp_path / "home"
        home.mkdir()
        kubectl = Kubectl(cluster.write_kubeconfig(tmp_path / "kubeconfig-kubectl"), tmp_path, home)
        shown = await kubectl.ok("get", "sandboxsnapshot", "vm", "-n", NS, "-o", "yaml")
        print(f"\n$ kubectl get sandboxsnapshot vm -o yaml\n{shown}")
        got = yaml.safe_load(shown)
        assert got["spec"]["format"] == "qemu-v1"
        assert got["status"]["virtualMachine"] == VIRTUAL_MACHINE
        assert got["status"]["kataVMState"] == KATA_STATE
        assert got["status"]["phase"] == "Failed"
        assert failed_condition(got)["reason"] == "IncompatibleSnapshotFormat"

        rootfs = await kubectl.json("get", "sandboxsnapshot", "rootfs", "-n", NS)
        assert (rootfs["spec"]["format"], rootfs["status"]["format"]) == ("rootfs-v1", "rootfs-v1")
