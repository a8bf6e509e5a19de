"""The simulated scheduler, kubelet and Job controller against a real in-process DevCluster.

Everything is observed the way a controller would observe it: through list+watch on the HTTP
API, and, where it matters, through kubernetes_asyncio's typed models (so the status the kubelet
writes is one the real client can deserialise).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from devtools.cluster import DevCluster
from devtools.cluster.controllers.kubelet.config import FAIL_ANNOTATION, FailureRule, KubeletConfig
from devtools.cluster.controllers.kubelet.jobs import JobOutcome
from tests.component.devcluster.kubelets import (
    FAST,
    JOBS,
    PODS,
    job_condition,
    pod_body,
    start_cluster,
)
from tests.component.devcluster.rest import Json, create, watch_until
from tests.support.samples import condition_status, is_ready


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    running = await start_cluster(FAST)
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
async def http(cluster: DevCluster) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=cluster.url) as session:
        yield session


def phase(pod: Json | None) -> str | None:
    return None if pod is None else (pod.get("status") or {}).get("phase")


def waiting_reason(pod: Json | None) -> str | None:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
    return ((statuses[0].get("state") or {}).get("waiting") or {}).get("reason")


# ----------------------------------------------------------------------------- happy path


async def test_nodes_are_registered_ready(cluster: DevCluster, http: aiohttp.ClientSession) -> None:
    seen = await watch_until(http, "/api/v1/nodes", "devcluster-node-1", is_ready)
    node = seen[-1]
    assert node is not None
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
    assert node["spec"]["podCIDR"] == "10.244.1.0/24"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "devcluster-node-1"


async def test_pod_goes_pending_running_ready_with_an_ip(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    await create(http, PODS, pod_body("web"))
    seen = await watch_until(http, PODS, "web", is_ready)
    phases = [phase(p) for p in seen if p is not None]
    assert phases[0] == "Pending"
    assert phases[-1] == "Running"
    assert phases.index("Running") > 0
    ready = seen[-1]
    assert ready is not None
    status = ready["status"]
    assert ready["spec"]["nodeName"].startswith("devcluster-node-")
    assert status["podIP"].startswith("10.244.")
    assert status["podIPs"] == [{"ip": status["podIP"]}]
    assert status["hostIP"].startswith("172.18.0.")
    assert status["startTime"]
    container = status["containerStatuses"][0]
    assert (container["ready"], container["started"], container["restartCount"]) == (True, True, 0)
    assert {c["type"] for c in status["conditions"]} >= {
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    }
    # The scheduler went through the binding subresource: PodScheduled came from the server.
    assert condition_status(ready, "PodScheduled") == "True"


async def test_typed_client_reads_the_simulated_status(cluster: DevCluster, tmp_path: Any) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    api_config = k8s.Configuration()
    await k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=api_config)
    async with k8s.ApiClient(api_config) as api_client:
        core = k8s.CoreV1Api(api_client)
        await core.create_namespaced_pod("default", pod_body("typed"))
        async with aiohttp.ClientSession(base_url=cluster.url) as http:
            await watch_until(http, PODS, "typed", is_ready)
        pod = await core.read_namespaced_pod("typed", "default")
    assert pod.status.phase == "Running"
    assert pod.status.pod_ip
    assert pod.status.container_statuses[0].state.running.started_at is not None
    assert pod.status.container_statuses[0].ready is True


async def test_pods_get_distinct_ips_and_spread_over_nodes(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    names = [f"spread-{i}" for i in range(6)]
    for name in names:
        await create(http, PODS, pod_body(name))
    ready = [(await watch_until(http, PODS, name, is_ready))[-1] for name in names]
    ips = [p["status"]["podIP"] for p in ready if p is not None]
    nodes = [p["spec"]["nodeName"] for p in ready if p is not None]
    assert len(set(ips)) == 6
    assert sorted(set(nodes)) == ["devcluster-node-0", "devcluster-node-1"]


# ----------------------------------------------------------------------------- failure modes


async def test_image_pull_failure(cluster: DevCluster, http: aiohttp.ClientSession) -> None:
    await create(http, PODS, pod_body("pull", annotations={FAIL_ANNOTATION: "image-pull"}))
    seen = await watch_until(http, PODS, "pull", lambda p: waiting_reason(p) == "ImagePullBackOff")
    assert "ErrImagePull" in [waiting_reason(p) for p in seen]
    assert phase(seen[-1]) == "Pending"


async def test_crash_loop(cluster: DevCluster, http: aiohttp.ClientSession) -> None:
    await create(http, PODS, pod_body("crashy", annotations={FAIL_ANNOTATION: "crash"}))

    def restarted_twice(pod: Json | None) -> bool:
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
        return int(statuses[0].get("restartCount", 0)) >= 2 and waiting_reason(pod) == (
            "CrashLoopBackOff"
        )

    seen = await watch_until(http, PODS, "crashy", restarted_twice)
    last = seen[-1]
    assert last is not None
    container = last["status"]["containerStatuses"][0]
    assert container["lastState"]["terminated"]["exitCode"] == 1
    assert phase(last) == "Running"
    assert not is_ready(last)


@pytest.mark.parametrize(("mode", "final"), [("exit-0", "Succeeded"), ("exit-1", "Failed")])
async def test_exit_modes_with_restart_policy_never(
    cluster: DevCluster, http: aiohttp.ClientSession, mode: str, final: str
) -> None:
    body = pod_body("exits", annotations={FAIL_ANNOTATION: mode}, restartPolicy="Never")
    await create(http, PODS, body)
    seen = await watch_until(http, PODS, "exits", lambda p: phase(p) in ("Succeeded", "Failed"))
    assert phase(seen[-1]) == final
    assert "Running" in [phase(p) for p in seen]


async def test_never_ready_pod_stays_unready(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    await create(http, PODS, pod_body("stuck", annotations={FAIL_ANNOTATION: "never-ready"}))
    await watch_until(http, PODS, "stuck", lambda p: phase(p) == "Running")
    # Ten ready-delays later it is still not ready: waiting for Ready must time out.
    with pytest.raises(TimeoutError):
        await watch_until(http, PODS, "stuck", is_ready, within=10 * FAST.pod_ready_delay)


async def test_unschedulable_pod(cluster: DevCluster, http: aiohttp.ClientSession) -> None:
    await create(http, PODS, pod_body("nowhere", annotations={FAIL_ANNOTATION: "unschedulable"}))
    seen = await watch_until(
        http, PODS, "nowhere", lambda p: condition_status(p, "PodScheduled") == "False"
    )
    last = seen[-1]
    assert last is not None
    scheduled = next(c for c in last["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["reason"] == "Unschedulable"
    assert "nodeName" not in last["spec"]
    assert phase(last) == "Pending"


async def test_a_full_node_leaves_a_pod_unschedulable_until_another_leaves() -> None:
    """Each node holds ``max_pods`` Pods, as a kubelet's --max-pods; kube-scheduler says
    "Too many pods" and tries again when a Pod leaves a node."""
    cluster = await start_cluster(dataclasses.replace(FAST, nodes=1, max_pods=2))
    try:
        async with aiohttp.ClientSession(base_url=cluster.url) as http:
            for name in ("first", "second"):
                await create(http, PODS, pod_body(name))
                await watch_until(http, PODS, name, is_ready)
            await create(http, PODS, pod_body("third"))
            seen = await watch_until(
                http, PODS, "third", lambda p: condition_status(p, "PodScheduled") == "False"
            )
            scheduled = next(
                c for c in (seen[-1] or {})["status"]["conditions"] if c["type"] == "PodScheduled"
            )
            assert scheduled["reason"] == "Unschedulable"
            assert scheduled["message"].startswith("0/1 nodes are available: 1 Too many pods.")
            async with http.get("/api/v1/nodes/devcluster-node-0") as response:
                assert (await response.json())["status"]["capacity"]["pods"] == "2"

            async with http.delete(f"{PODS}/first") as response:
                assert response.status == 200

            seen = await watch_until(http, PODS, "third", is_ready)
            assert (seen[-1] or {})["spec"]["nodeName"] == "devcluster-node-0"
    finally:
        await cluster.stop()


async def test_failure_rules_from_config() -> None:
    config = KubeletConfig(
        nodes=1,
        schedule_delay=0.01,
        start_delay=0.02,
        image_pull_backoff_delay=0.02,
        failure_rules=(FailureRule("image-pull", selector="flaky=true"),),
    )
    cluster = await start_cluster(config)
    try:
        async with aiohttp.ClientSession(base_url=cluster.url) as http:
            await create(http, PODS, pod_body("flaky", labels={"flaky": "true"}))
            await create(http, PODS, pod_body("fine"))
            await watch_until(
                http, PODS, "flaky", lambda p: waiting_reason(p) == "ImagePullBackOff"
            )
            await watch_until(http, PODS, "fine", is_ready)
    finally:
        await cluster.stop()


# ----------------------------------------------------------------------------- deletion


async def test_graceful_deletion(cluster: DevCluster, http: aiohttp.ClientSession) -> None:
    await create(http, PODS, pod_body("bye"))
    await watch_until(http, PODS, "bye", is_ready)
    async with http.delete(f"{PODS}/bye") as response:
        assert response.status == 200
        deleting = await response.json()
    # The API only marked it: the pod is still there, terminating, until the kubelet finishes.
    assert deleting["metadata"]["deletionTimestamp"]
    assert deleting["metadata"]["deletionGracePeriodSeconds"] == 30
    seen = await watch_until(http, PODS, "bye", lambda p: p is None)
    phases = [phase(p) for p in seen if p is not None]
    assert "Succeeded" in phases
    terminated = next(p for p in seen if p is not None and phase(p) == "Succeeded")["status"][
        "containerStatuses"
    ][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0


async def test_kubelet_survives_expired_and_aborted_watches(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    await create(http, PODS, pod_body("before"))
    await watch_until(http, PODS, "before", is_ready)
    cluster.faults.compact()
    cluster.faults.break_watches("expire")
    await create(http, PODS, pod_body("after-expire"))
    await watch_until(http, PODS, "after-expire", is_ready)
    cluster.faults.break_watches("abort")
    await create(http, PODS, pod_body("after-abort"))
    await watch_until(http, PODS, "after-abort", is_ready)


# ----------------------------------------------------------------------------- jobs


def job_body(name: str, annotations: Json | None = None) -> Json:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "work", "image": "busybox"}],
                }
            }
        },
    }


async def test_job_runs_to_completion(cluster: DevCluster, http: aiohttp.ClientSession) -> None:
    await create(http, JOBS, job_body("batch"))
    seen = await watch_until(http, JOBS, "batch", lambda j: job_condition(j) is not None)
    done = seen[-1]
    assert done is not None
    assert job_condition(done) == "Complete"
    assert done["status"]["succeeded"] == 1
    assert done["status"]["startTime"] and done["status"]["completionTime"]
    assert any(((j or {}).get("status") or {}).get("active") == 1 for j in seen)


async def test_job_annotated_to_fail_fails(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    await create(http, JOBS, job_body("doomed", {FAIL_ANNOTATION: "exit-1"}))
    seen = await watch_until(http, JOBS, "doomed", lambda j: job_condition(j) is not None)
    assert job_condition(seen[-1]) == "Failed"
    assert (seen[-1] or {})["status"]["failed"] == 7  # backoffLimit 6 + 1


async def test_job_action_is_pluggable() -> None:
    ran: list[str] = []

    async def action(job: Json) -> JobOutcome:
        ran.append(job["metadata"]["name"])
        return JobOutcome(False, "the action said no")

    cluster = await start_cluster(KubeletConfig(nodes=1, job_action=action))
    try:
        async with aiohttp.ClientSession(base_url=cluster.url) as http:
            await create(http, JOBS, job_body("custom"))
            seen = await watch_until(http, JOBS, "custom", lambda j: job_condition(j) is not None)
        failed = next(c for c in (seen[-1] or {})["status"]["conditions"] if c["type"] == "Failed")
        assert failed["message"] == "the action said no"
        assert ran == ["custom"]
    finally:
        await cluster.stop()
