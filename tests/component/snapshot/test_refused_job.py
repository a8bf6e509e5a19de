"""A SandboxSnapshot whose commit Job the API server refuses says so, on the object (issue #32,
docs/conditions.md §4), against the real thing: the development cluster refusing the snapshot
worker's Job creates with 403 Forbidden (as a quota or an admission policy would), a
nats-server with the bus, the watcher, the claim worker (which makes the BatchSandbox's Pod)
and the snapshot worker, all in this process, and a real ``kubectl describe``.

Upstream only emits a Warning ``FailedCreateJob``; here the snapshot stays Pending with the
condition ``CommitJobFailure``/``FailedCreateJob`` in the server's words, and the same Warning
Event once; when the API server lets the Job through, the snapshot is Committing, then
Succeed, and the condition is gone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.cluster.http.faults import FaultRule
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi
from services.snapshot.core.plan import CONTROLLER_NAME
from tests.component.snapshot.harness import (
    API_VERSION,
    SANDBOX,
    WITHIN,
    running_pod,
    sandbox_body,
    snapshot_worker_running,
)
from tests.support.events import events_about, warned_and_described
from tests.support.kubectl import KUBECTL
from tests.support.samples import NS, Json
from tests.support.stack import api_client, bounded, claim_worker_running, cluster_and_watcher
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason=f"no kubectl at {KUBECTL}")

NAME = "refused"


def failure(snapshot: Json | None) -> Json | None:
    for each in ((snapshot or {}).get("status") or {}).get("conditions") or ():
        if each.get("type") == "CommitJobFailure" and each.get("status") == "True":
            return dict(each)
    return None


async def test_a_snapshot_whose_commit_job_is_refused_says_so_until_it_goes_through(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
        claim_worker_running(cluster, js, bus, tmp_path),
        snapshot_worker_running(cluster, js, bus, tmp_path),
    ):
        kube = KubeApi(client, field_manager="component-test")
        key = ObjectKey("SandboxSnapshot", NS, NAME)
        await kube.create(sandbox_body())
        await until(lambda: running_pod(kube), within=WITHIN)
        fault = cluster.faults.add(
            FaultRule(
                "error",
                verb="create",
                resource="jobs",
                namespace=NS,
                field_manager=CONTROLLER_NAME,
                code=403,
            )
        )
        await kube.create(
            {
                "apiVersion": API_VERSION,
                "kind": "SandboxSnapshot",
                "metadata": {"name": NAME, "namespace": NS},
                "spec": {"sandboxName": SANDBOX},
            }
        )

        async def refused() -> Json | None:
            return failure(await kube.get(key))

        found = await until(refused, within=WITHIN)
        assert found["reason"] == "FailedCreateJob"
        assert found["message"] == (
            f"the API server refuses the commit Job {NAME}-commit (Forbidden, 403): forbidden: "
            "injected fault. Fix what refuses it (a quota, an admission policy, the committer's "
            "settings); it is created again with backoff"
        )
        stored = await kube.get(key)
        assert stored["status"]["phase"] == "Pending"

        await warned_and_described(
            kube,
            cluster,
            tmp_path,
            "SandboxSnapshot",
            NAME,
            condition="CommitJobFailure",
            reason="FailedCreateJob",
            message=found["message"],
            within=WITHIN,
        )

        # The API server lets the Job through: the snapshot commits, the condition goes.
        cluster.faults.remove(fault.id)

        async def committed() -> Json | None:
            snapshot = await kube.get(key)
            phase = (snapshot.get("status") or {}).get("phase")
            return snapshot if phase in ("Committing", "Succeed") else None

        snapshot = await until(committed, within=WITHIN)
        assert failure(snapshot) is None
        warnings = await events_about(
            kube, "SandboxSnapshot", NAME, reason="FailedCreateJob", type="Warning"
        )
        assert len(warnings) == 1, "one Warning for the one appearance"
