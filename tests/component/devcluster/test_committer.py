"""OpenSandbox's image-committer Jobs against a real in-process DevCluster.

A snapshot worker creates the commit Job on the source Pod's node and reads the digests off the
Job's Pod (``job-name`` label, the ``commit`` container's termination message); these tests do
the same over HTTP, and check that the simulated kubelet leaves that Pod as the Job controller
wrote it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from devtools.cluster import DevCluster
from devtools.cluster.controllers.kubelet.committer import image_digest
from devtools.cluster.controllers.kubelet.config import FAIL_COMMIT_ANNOTATION
from devtools.cluster.controllers.kubelet.jobs import job_pod_name
from tests.component.devcluster.kubelets import (
    FAST,
    JOBS,
    PODS,
    job_condition,
    pod_body,
    start_cluster,
)
from tests.component.devcluster.rest import Json, create, watch_until
from tests.support.samples import is_ready

URI = "registry.sandbus.local/snapshots/bs-main:snap-gen1"
SIDECAR_URI = "registry.sandbus.local/snapshots/bs-main-sidecar:snap-gen1"
SNAPSHOT_LABEL = "sandbox.opensandbox.io/sandbox-snapshot-name"


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


def committer_job(name: str, node: str, args: list[str], *, backoff_limit: int = 3) -> Json:
    """The Job as the snapshot worker writes it (the parts the committer looks at)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {SNAPSHOT_LABEL: "snap"}},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"labels": {SNAPSHOT_LABEL: "snap"}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "commit",
                            "image": "image-committer:dev",
                            "command": ["/usr/local/bin/image-committer"],
                            "args": args,
                        }
                    ],
                },
            },
        },
    }


async def ready_source(
    http: aiohttp.ClientSession, name: str = "bs-main", annotations: Json | None = None
) -> Json:
    """A running sandbox Pod with two containers, as the kubelet shows it once Ready."""
    containers = [{"name": "main", "image": "sandbox:1"}, {"name": "sidecar", "image": "side:1"}]
    await create(http, PODS, pod_body(name, annotations=annotations, containers=containers))
    ready = (await watch_until(http, PODS, name, is_ready))[-1]
    assert ready is not None
    return ready


def commit_args(pod: str = "bs-main") -> list[str]:
    return [pod, "default", f"main:{URI}", f"sidecar:{SIDECAR_URI}"]


async def finished(http: aiohttp.ClientSession, job: str) -> Json:
    seen = await watch_until(http, JOBS, job, lambda j: job_condition(j) is not None)
    assert seen[-1] is not None
    return seen[-1]


async def job_pods(http: aiohttp.ClientSession, job: str) -> list[Json]:
    async with http.get(PODS, params={"labelSelector": f"job-name={job}"}) as response:
        assert response.status == 200
        items: list[Json] = (await response.json())["items"]
        return items


def commit_status(pod: Json) -> Json:
    statuses = pod["status"]["containerStatuses"]
    status: Json = next(s for s in statuses if s["name"] == "commit")
    return status


def failed_message(job: Json) -> str:
    return str(next(c for c in job["status"]["conditions"] if c["type"] == "Failed")["message"])


async def test_a_commit_job_completes_and_its_pod_reports_every_image(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    source = await ready_source(http)
    node = source["spec"]["nodeName"]
    job = await create(http, JOBS, committer_job("snap-commit", node, commit_args()))
    done = await finished(http, "snap-commit")
    assert job_condition(done) == "Complete"
    assert done["status"]["succeeded"] == 1

    # The Pod is there by the time the Job says Complete: it was written first.
    (pod,) = await job_pods(http, "snap-commit")
    assert pod["metadata"]["name"] == job_pod_name(job)
    labels = pod["metadata"]["labels"]
    assert labels["batch.kubernetes.io/job-name"] == "snap-commit"
    assert labels["controller-uid"] == job["metadata"]["uid"]
    assert labels[SNAPSHOT_LABEL] == "snap"
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "Job",
        job["metadata"]["uid"],
        True,
    )
    assert pod["spec"]["nodeName"] == node
    assert pod["status"]["phase"] == "Succeeded"
    status = commit_status(pod)
    terminated = status["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], status["ready"]) == (
        0,
        "Completed",
        False,
    )
    uid = source["metadata"]["uid"]
    assert json.loads(terminated["message"]) == {
        "containers": [
            {"name": "main", "image": URI, "digest": image_digest(uid, "main", URI)},
            {
                "name": "sidecar",
                "image": SIDECAR_URI,
                "digest": image_digest(uid, "sidecar", SIDECAR_URI),
            },
        ]
    }


async def test_the_kubelet_never_touches_the_jobs_pod(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    source = await ready_source(http)
    async with http.get(PODS) as response:
        before = (await response.json())["metadata"]["resourceVersion"]
    await create(
        http, JOBS, committer_job("snap-commit", source["spec"]["nodeName"], commit_args())
    )
    await finished(http, "snap-commit")
    # Several of the kubelet's delays later, the watch from before the Job shows every write
    # the Pod ever got: the create and the Job controller's status, nobody else's.
    await asyncio.sleep(10 * FAST.start_delay)
    params = {
        "watch": "true",
        "resourceVersion": before,
        "labelSelector": "job-name=snap-commit",
        "timeoutSeconds": "1",
    }
    events: list[tuple[str, Json]] = []
    async with asyncio.timeout(5), http.get(PODS, params=params) as response:
        async for line in response.content:
            event = json.loads(line)
            events.append((event["type"], event["object"]))
    assert [kind for kind, _ in events] == ["ADDED", "MODIFIED"]
    assert [pod["status"]["phase"] for _, pod in events] == ["Pending", "Succeeded"]
    assert not any(pod["status"].get("podIP") for _, pod in events)
    (pod,) = await job_pods(http, "snap-commit")
    assert pod["metadata"]["resourceVersion"] == events[-1][1]["metadata"]["resourceVersion"]


async def test_a_source_pod_annotated_to_fail_the_commit_fails_the_job(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    source = await ready_source(http, annotations={FAIL_COMMIT_ANNOTATION: "registry said no"})
    await create(
        http, JOBS, committer_job("snap-commit", source["spec"]["nodeName"], commit_args())
    )
    done = await finished(http, "snap-commit")
    assert job_condition(done) == "Failed"
    assert "registry said no" in failed_message(done)
    assert done["status"]["failed"] == 4  # backoffLimit 3 + 1
    (pod,) = await job_pods(http, "snap-commit")
    assert pod["status"]["phase"] == "Failed"
    terminated = commit_status(pod)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
        1,
        "Error",
        "registry said no",
    )


async def test_a_missing_container_fails_with_the_committers_message(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    source = await ready_source(http)
    args = ["bs-main", "default", f"main:{URI}", f"ghost:{URI}"]
    await create(http, JOBS, committer_job("snap-commit", source["spec"]["nodeName"], args))
    done = await finished(http, "snap-commit")
    assert job_condition(done) == "Failed"
    assert failed_message(done) == 'container "ghost" not found in pod default/bs-main'
    (pod,) = await job_pods(http, "snap-commit")
    assert commit_status(pod)["state"]["terminated"]["exitCode"] == 1


async def test_a_missing_source_pod_fails_the_commit(
    cluster: DevCluster, http: aiohttp.ClientSession
) -> None:
    await create(http, JOBS, committer_job("snap-commit", "devcluster-node-0", commit_args("gone")))
    done = await finished(http, "snap-commit")
    assert failed_message(done) == "pod default/gone not found"


async def test_an_unpause_job_succeeds(cluster: DevCluster, http: aiohttp.ClientSession) -> None:
    source = await ready_source(http)
    args = ["unpause", "bs-main", "default", "main", "sidecar"]
    body = committer_job("snap-unpause", source["spec"]["nodeName"], args, backoff_limit=0)
    await create(http, JOBS, body)
    done = await finished(http, "snap-unpause")
    assert job_condition(done) == "Complete"
    (pod,) = await job_pods(http, "snap-unpause")
    assert pod["status"]["phase"] == "Succeeded"
    assert commit_status(pod)["state"]["terminated"]["exitCode"] == 0
    # The source Pod runs on, untouched by the unpause.
    async with http.get(f"{PODS}/bs-main") as response:
        assert is_ready(await response.json())


async def test_a_jobs_pod_already_there_is_left_alone_and_gets_the_status() -> None:
    """The Pod's name comes from the Job's uid, so one a previous pass created (here: the test,
    while the Job runs) answers the create with 409 AlreadyExists and gets the status all the
    same. Until then the kubelet neither starts it nor counts it on its node: on a node with
    room for two Pods, the source Pod and that one, a third still fits."""
    slow = await start_cluster(dataclasses.replace(FAST, nodes=1, max_pods=2, job_delay=2.0))
    try:
        async with aiohttp.ClientSession(base_url=slow.url) as http:
            source = await ready_source(http)
            node = source["spec"]["nodeName"]
            job = await create(http, JOBS, committer_job("snap-commit", node, commit_args()))
            template = job["spec"]["template"]
            early = pod_body(job_pod_name(job), labels=template["metadata"]["labels"])
            early["spec"] = template["spec"]
            early["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "snap-commit",
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                }
            ]
            created = await create(http, PODS, early)
            await create(http, PODS, pod_body("neighbour"))
            # Well within the Job's run: once its Pod has finished, there is room anyway.
            await watch_until(http, PODS, "neighbour", is_ready, within=1.0)
            async with http.get(f"{PODS}/{created['metadata']['name']}") as response:
                waiting = await response.json()
            assert "podIP" not in waiting["status"]
            assert waiting["status"]["phase"] in ("Pending", "Succeeded")  # not started by us

            done = await finished(http, "snap-commit")
            assert job_condition(done) == "Complete"
            (pod,) = await job_pods(http, "snap-commit")
            assert pod["metadata"]["uid"] == created["metadata"]["uid"]
            assert pod["status"]["phase"] == "Succeeded"
            assert "podIP" not in pod["status"]
            assert json.loads(commit_status(pod)["state"]["terminated"]["message"])["containers"]
    finally:
        await slow.stop()
