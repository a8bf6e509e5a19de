"""End to end: pause and resume of BatchSandboxes with the watcher, the pool worker, the claim
worker (BatchSandbox, pause and resume) and the snapshot worker (the commit Jobs) as their own
processes, on the development cluster, whose Job controller runs image-committer Jobs as a
simulated commit (devtools/cluster/controllers/kubelet/committer.py).

What must hold: a pause reaches Paused and a resume Succeed again, pooled and not, on the
snapshot's images under the same name and uid, and ``sandbus explain`` tells it from the
request to Paused; the snapshot worker killed (SIGKILL) in the middle of a commit finishes it
without a second commit Job; a renewal of ``expireTime`` after a resume does not send the
sandbox through Resuming again (upstream's replayed pause, docs/opensandbox.md §9.18); and a
commit that fails leaves the sandbox running with PauseFailed and the reason.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from api.objects import Json
from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from devtools.cluster.controllers.kubelet.config import FAIL_COMMIT_ANNOTATION
from devtools.natsd import NatsServer
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi
from tests.component.watcher.harness import ClusterHistory
from tests.e2e.opensandbox.harness import conditions, get, pods_of, pool_body, run
from tests.e2e.services import log_tails, service
from tests.e2e.up import SANDBUS
from tests.support.samples import NS, stamp
from tests.support.stack import FAST_KUBELET, api_client
from tests.support.waiting import until

pytestmark = pytest.mark.slow

REGISTRY = "registry.e2e.local/snapshots"
SNAPSHOT_ENV = {"SANDBUS_SNAPSHOT_REGISTRY": REGISTRY, "SANDBUS_SNAPSHOT_LEASE_SECONDS": "1"}
POOL_ENV = {"SANDBUS_POOL_LEASE_SECONDS": "1"}


@asynccontextmanager
async def world(
    tmp_path: Path, *, job_delay: float = 0.2
) -> AsyncIterator[tuple[str, KubeApi, Path, ClusterHistory, Path]]:
    """NATS, the development cluster (its commit Jobs taking ``job_delay``) and the four
    services; yields the NATS URL, an API client, the kubeconfig, the cluster's history and the
    logs directory."""
    logs = tmp_path / "logs"
    logs.mkdir()
    simulation = SimulationSettings(
        nodes=2,
        pod_ready_delay=0.05,
        options={"kubelet": {**FAST_KUBELET, "job_delay": job_delay}},
    )
    history = ClusterHistory()
    latency = LatencyModel(read=(0.0, 0.0), write=(0.0, 0.0), watch=(0.0, 0.0))
    async with (
        NatsServer(store_dir=tmp_path / "nats") as nats_server,
        DevCluster(port=0, latency=latency, simulation=simulation) as cluster,
        api_client(cluster, tmp_path, "test") as client,
    ):
        cluster.store.subscribe(None, history.sink)
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        url = nats_server.url
        async with (
            service("watcher", url, kubeconfig, logs),
            service("pool", url, kubeconfig, logs, env=POOL_ENV),
            service("claim", url, kubeconfig, logs),
        ):
            yield url, KubeApi(client, field_manager="e2e-test"), kubeconfig, history, logs


def template(**annotations: str) -> Json:
    body: Json = {
        "metadata": {"labels": {"app": "agent"}},
        "spec": {
            "containers": [
                {"name": "sandbox", "image": "python:3.12"},
                {"name": "log-shipper", "image": "busybox:1.36"},
            ]
        },
    }
    if annotations:
        body["metadata"]["annotations"] = annotations
    return body


def sandbox_body(name: str, *, pool: str | None = None, **annotations: str) -> Json:
    spec: Json = {"replicas": 1}
    if pool is not None:
        spec["poolRef"] = pool
    else:
        spec["template"] = template(**annotations)
    return {
        "apiVersion": "sandbox.opensandbox.io/v1alpha1",
        "kind": "BatchSandbox",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


async def phase(kube: KubeApi, name: str) -> str:
    sandbox = await get(kube, "BatchSandbox", name)
    return str(((sandbox or {}).get("status") or {}).get("phase") or "")


async def reaches(kube: KubeApi, name: str, wanted: str, *, within: float = 60) -> Json:
    async def there() -> Json | None:
        sandbox = await get(kube, "BatchSandbox", name)
        status = (sandbox or {}).get("status") or {}
        return sandbox if status.get("phase") == wanted else None

    reached: Json = await until(there, within=within, interval=0.1)
    return reached


async def ask(kube: KubeApi, name: str, pause: bool) -> None:
    await kube.patch(ObjectKey("BatchSandbox", NS, name), {"spec": {"pause": pause}})


def commit_jobs(history: ClusterHistory, snapshot: str) -> set[str]:
    """The uids of every commit Job of ``snapshot`` the cluster ever committed."""
    return {
        change.uid
        for change in history.of(["Job"])
        if change.type == "ADDED" and change.name == f"{snapshot}-commit"
    }


async def round_trip(kube: KubeApi, name: str) -> Json:
    """Pause, then resume ``name``; returns the snapshot as it was when Paused."""
    before = await reaches(kube, name, "Succeed")
    await ask(kube, name, True)
    paused = await reaches(kube, name, "Paused")
    assert paused["metadata"]["uid"] == before["metadata"]["uid"]
    assert paused["status"]["pauseObservedGeneration"] == paused["metadata"]["generation"]
    snapshot = await get(kube, "SandboxSnapshot", f"{name}-pause")
    assert snapshot is not None and snapshot["status"]["phase"] == "Succeed"
    assert await until(lambda: _no_pods_of(kube, name), within=30, interval=0.1)
    await ask(kube, name, False)
    resumed = await reaches(kube, name, "Succeed")
    assert resumed["metadata"]["uid"] == before["metadata"]["uid"]
    pod = await get(kube, "Pod", f"{name}-0")
    assert pod is not None
    images = {c["containerName"]: c["imageUri"] for c in snapshot["status"]["containers"]}
    assert {c["name"]: c["image"] for c in pod["spec"]["containers"]} == images
    await until(lambda: _gone(kube, "SandboxSnapshot", f"{name}-pause"), within=30, interval=0.1)
    return snapshot


async def _gone(kube: KubeApi, kind: str, name: str) -> bool:
    return await get(kube, kind, name) is None


async def _no_pods_of(kube: KubeApi, name: str) -> bool:
    sandbox = await get(kube, "BatchSandbox", name)
    uid = (sandbox or {}).get("metadata", {}).get("uid")
    for pod in await kube.list("Pod", NS):
        owners = pod["metadata"].get("ownerReferences") or ()
        if any(o.get("uid") == uid for o in owners) and not pod["metadata"].get(
            "deletionTimestamp"
        ):
            return False
    return True


@pytest.mark.timeout(240)
async def test_pause_and_resume_round_trips_pooled_and_not(tmp_path: Path) -> None:
    async with world(tmp_path) as (url, kube, kubeconfig, _history, logs):
        try:
            async with service("snapshot", url, kubeconfig, logs, env=SNAPSHOT_ENV):
                # Not pooled: the Pod is deleted on pause and made again from the snapshot.
                await kube.create(sandbox_body("solo"))
                snapshot = await round_trip(kube, "solo")
                assert snapshot["status"]["sourcePodName"] == "solo-0"
                uris = [c["imageUri"] for c in snapshot["status"]["containers"]]
                assert uris == [
                    f"{REGISTRY}/solo-sandbox:snap-gen2",
                    f"{REGISTRY}/solo-log-shipper:snap-gen2",
                ]
                assert all(
                    c["imageDigest"].startswith("sha256:") for c in snapshot["status"]["containers"]
                )
                explained = await run(SANDBUS, "explain", f"BatchSandbox/{NS}/solo", "--nats", url)
                for step in ("pause asked", "pausing: snapshot", "paused", "resume asked"):
                    assert step in explained, explained

                # A renewal after the resume is a spec change like any other: no Resuming.
                renewal = stamp(datetime.now(UTC) + timedelta(hours=1))
                await kube.patch(
                    ObjectKey("BatchSandbox", NS, "solo"), {"spec": {"expireTime": renewal}}
                )
                seen: list[str] = []
                for _ in range(30):
                    seen.append(await phase(kube, "solo"))
                    await asyncio.sleep(0.1)
                assert set(seen) == {"Succeed"}, seen
                assert await get(kube, "SandboxSnapshot", "solo-pause") is None

                # Pooled: the Pod goes back to the Pool and the sandbox keeps its template.
                await kube.create(pool_body("warm", buffer=(1, 2), pool=(1, 4)))
                await kube.create(sandbox_body("pooled", pool="warm"))
                pooled = await reaches(kube, "pooled", "Succeed")
                [given] = pods_of(pooled)
                snapshot = await round_trip(kube, "pooled")
                assert snapshot["status"]["sourcePodName"] == given
                after = await get(kube, "BatchSandbox", "pooled")
                assert after is not None
                assert after["spec"]["poolRef"] == ""
                assert after["spec"]["template"]["spec"]["containers"][0]["name"] == "main"
                # Its Pool took its Pod back (recycled by deletion, the default).
                await until(lambda: _gone(kube, "Pod", given), within=30, interval=0.1)
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None


@pytest.mark.timeout(180)
async def test_a_snapshot_worker_killed_mid_commit_makes_no_second_commit_job(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, job_delay=3.0) as (url, kube, kubeconfig, history, logs):
        try:
            async with service(
                "snapshot", url, kubeconfig, logs, env=SNAPSHOT_ENV, log_name="snapshot-1"
            ) as first:
                await kube.create(sandbox_body("busy"))
                await reaches(kube, "busy", "Succeed")
                await ask(kube, "busy", True)

                async def committing() -> bool:
                    snapshot = await get(kube, "SandboxSnapshot", "busy-pause")
                    status = (snapshot or {}).get("status") or {}
                    return status.get("phase") == "Committing"

                await until(committing, within=30, interval=0.05)
                first.send_signal(signal.SIGKILL)
                await first.wait()
            assert len(commit_jobs(history, "busy-pause")) == 1
            async with service(
                "snapshot", url, kubeconfig, logs, env=SNAPSHOT_ENV, log_name="snapshot-2"
            ):
                await reaches(kube, "busy", "Paused")
                snapshot = await get(kube, "SandboxSnapshot", "busy-pause")
                assert snapshot is not None and snapshot["status"]["phase"] == "Succeed"
                assert len(commit_jobs(history, "busy-pause")) == 1
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None


@pytest.mark.timeout(180)
async def test_a_failed_commit_leaves_the_sandbox_running_with_pause_failed(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as (url, kube, kubeconfig, _history, logs):
        try:
            async with service("snapshot", url, kubeconfig, logs, env=SNAPSHOT_ENV):
                await kube.create(
                    sandbox_body("stuck", **{FAIL_COMMIT_ANNOTATION: "push denied: quota"})
                )
                await reaches(kube, "stuck", "Succeed")
                await ask(kube, "stuck", True)

                async def pause_failed() -> Json | None:
                    sandbox = await get(kube, "BatchSandbox", "stuck")
                    return sandbox if "PauseFailed" in conditions(sandbox) else None

                sandbox = await until(pause_failed, within=60, interval=0.1)
                assert sandbox["status"]["phase"] == "Succeed"
                [failed] = [
                    c for c in sandbox["status"]["conditions"] if c["type"] == "PauseFailed"
                ]
                assert failed["reason"] == "SnapshotFailed"
                assert "push denied: quota" in failed["message"]
                pod = await get(kube, "Pod", "stuck-0")
                assert pod is not None and pod["status"]["phase"] == "Running"
                snapshot = await get(kube, "SandboxSnapshot", "stuck-pause")
                assert snapshot is not None and snapshot["status"]["phase"] == "Failed"
                assert await get(kube, "Job", "stuck-pause-unpause") is not None
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None
