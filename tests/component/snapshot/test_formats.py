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

from pathlib import Path

import pytest
import yaml

from events.envelope import ObjectKey
from services.runtime.kube import KubeApi
from tests.component.snapshot.harness import (
    API_VERSION,
    REGISTRY,
    SANDBOX,
    WITHIN,
    running_pod,
    sandbox_body,
    snapshot_worker_running,
)
from tests.support.kubectl import KUBECTL, kubectl_for
from tests.support.samples import NS, Json
from tests.support.stack import api_client, bounded, claim_worker_running, cluster_and_watcher
from tests.support.waiting import until

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
        await until(lambda: running_pod(kube), within=WITHIN)

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
        kubectl = kubectl_for(cluster, tmp_path)
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
