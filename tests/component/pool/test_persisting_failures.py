"""A write that keeps failing for a reason that passes (a 500) is reported once it persists
(issue #32, docs/conditions.md), against the real thing: the development cluster answering
every create of the pool worker's with an injected 500, a nats-server with the bus, the
watcher and the workers, all in this process, and a real API client.

The runtime tells a planner when a key's passes have failed in a row for
``WorkerSettings.report_failures_after`` (shrunk to :data:`DELAY` here; 60 s by default):

- an OpenSandbox Pool whose Pod creates keep failing: ``ReplicaFailure``/``FailedCreate`` with
  the server's words, saying it keeps failing, and a Warning Event; not before the delay;
  removed once the fault is and the Pods come;
- a SandboxWarmPool whose Sandbox creates keep failing: ``Progressing=False``/``FailedCreate``
  and a Warning ``WarmPoolNotProgressing``; then a Normal ``WarmPoolProgressing`` once the
  creates go through.
"""

from __future__ import annotations

import time
from pathlib import Path

from api.keys import LABEL_WARM_POOL_SANDBOX, name_hash
from api.opensandbox import LABEL_POOL_NAME
from devtools.cluster.http.faults import FaultRule
from events.envelope import ObjectKey
from services.pool.core.plan import CONTROLLER_NAME as POOL_CONTROLLER
from services.runtime.kube import KubeApi
from services.runtime.worker_api import WorkerSettings
from tests.component.pool.harness import (
    open_pool_body,
    open_pool_warnings,
    progressing,
    template_body,
    true_condition,
    warm_pool_body,
    warm_pool_events,
)
from tests.support.samples import NS, Json
from tests.support.stack import (
    api_client,
    bounded,
    cluster_and_watcher,
    pool_worker_running,
    sandbox_worker_running,
)
from tests.support.waiting import until

DELAY = 1.5
"""Seconds of failing passes before they are reported (``report_failures_after``)."""
SETTINGS = WorkerSettings(concurrency=4, max_delay=0.5, report_failures_after=DELAY)
WITHIN = 20.0
SERVER_SAYS = "Internal error occurred: injected fault"


def failing_creates(resource: str) -> FaultRule:
    """Every create of ``resource`` by the pool worker answered with a 500."""
    return FaultRule(
        "error", verb="create", resource=resource, namespace=NS, field_manager=POOL_CONTROLLER
    )


async def test_a_pool_whose_pod_creates_keep_failing_says_so_once_it_persists(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
        pool_worker_running(cluster, js, bus, tmp_path, SETTINGS),
    ):
        kube = KubeApi(client, field_manager="e2e-test")
        name = "broken-api"
        key = ObjectKey("Pool", NS, name)
        fault = cluster.faults.add(failing_creates("pods"))
        await kube.create(
            open_pool_body(name, {"name": "main", "image": "python:3.12"}, (1, 2, 0, 3))
        )

        async def failed_once() -> bool:
            return fault.fired > 0

        await until(failed_once, within=WITHIN)
        first_failure = time.monotonic()
        assert true_condition(await kube.get(key), "ReplicaFailure") is None, "not at once: a 500"

        async def reported() -> Json | None:
            return true_condition(await kube.get(key), "ReplicaFailure")

        found = await until(reported, within=WITHIN)
        assert time.monotonic() - first_failure >= DELAY * 0.9, "only once it persisted"
        assert found["reason"] == "FailedCreate"
        assert found["message"] == (
            f"the Pool's Pod creates keep failing (InternalError, 500): {SERVER_SAYS}; they are "
            "retried with backoff"
        )

        async def warned() -> list[Json]:
            return [
                e for e in await open_pool_warnings(kube, name) if e["reason"] == "FailedCreate"
            ]

        (event,) = await until(warned, within=WITHIN)
        assert event["note"] == f"ReplicaFailure: {found['message']}"

        # The API server recovers: the Pods come, the condition goes.
        cluster.faults.remove(fault.id)

        async def recovered() -> Json | None:
            pool = await kube.get(key)
            pods = [
                p
                for p in await kube.list("Pod", NS)
                if (p["metadata"].get("labels") or {}).get(LABEL_POOL_NAME) == name
            ]
            return pool if pods and true_condition(pool, "ReplicaFailure") is None else None

        pool = await until(recovered, within=WITHIN)
        assert not (pool.get("status") or {}).get("conditions")
        assert len(await warned()) == 1, "one Warning for the one appearance"


async def test_a_warm_pool_whose_sandbox_creates_keep_failing_says_so_once_it_persists(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
        sandbox_worker_running(cluster, js, bus, tmp_path),
        pool_worker_running(cluster, js, bus, tmp_path, SETTINGS),
    ):
        kube = KubeApi(client, field_manager="e2e-test")
        name, template = "broken-api-warm", "fine-tpl"
        key = ObjectKey("SandboxWarmPool", NS, name)
        fault = cluster.faults.add(failing_creates("sandboxes"))
        await kube.create(template_body(template, {"name": "main", "image": "python:3.12"}))
        await kube.create(warm_pool_body(name, template, 2))

        async def failed_once() -> bool:
            return fault.fired > 0

        await until(failed_once, within=WITHIN)
        first_failure = time.monotonic()
        assert progressing(await kube.get(key)) is None, "not at once: a 500"

        async def stalled() -> Json | None:
            return progressing(await kube.get(key))

        found = await until(stalled, within=WITHIN)
        assert time.monotonic() - first_failure >= DELAY * 0.9, "only once it persisted"
        assert (found["status"], found["reason"]) == ("False", "FailedCreate")
        assert found["message"] == (
            f"the pool's Sandbox creates keep failing: {SERVER_SAYS} (InternalError, 500). The "
            "pool tries again with backoff; if it lasts, look at the API server"
        )

        async def warned() -> list[Json]:
            return await warm_pool_events(kube, name, "WarmPoolNotProgressing")

        (event,) = await until(warned, within=WITHIN)
        assert event["type"] == "Warning" and event["note"] == f"FailedCreate: {found['message']}"

        # The API server recovers: the members come, the condition goes, and a Normal says so.
        cluster.faults.remove(fault.id)

        async def recovered() -> Json | None:
            pool = await kube.get(key)
            members = [
                s
                for s in await kube.list("Sandbox", NS)
                if (s["metadata"].get("labels") or {}).get(LABEL_WARM_POOL_SANDBOX)
                == name_hash(name)
            ]
            return pool if len(members) == 2 and progressing(pool) is None else None

        await until(recovered, within=WITHIN)
        (normal,) = await until(
            lambda: warm_pool_events(kube, name, "WarmPoolProgressing"), within=WITHIN
        )
        assert normal["type"] == "Normal"
        assert len(await warned()) == 1, "one Warning for the one appearance"
