"""A BatchSandbox whose ``poolRef`` names no Pool says why it waits, on the object (issue #32,
docs/conditions.md), against the real thing: the development cluster, a nats-server with the
bus, the watcher, the claim worker and the pool worker, all in this process, and a real
``kubectl describe``.

Upstream writes nothing for it (no status, no condition, no Event). Here two sandboxes name a
Pool that does not exist yet, one pooled and one with a ``template`` beside its ``poolRef``
(which sandbus's Pool serves all the same): each carries ``PoolAllocationPending`` (upstream's
type) with reason ``PoolNotFound`` and a Warning Event; once the Pool is created, each gets its
Pods and the condition goes.
"""

from __future__ import annotations

import json
from pathlib import Path

from api.opensandbox import ANNOTATION_ALLOC_STATUS
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi
from tests.support.events import events_about, warned_and_described
from tests.support.kubectl import kubectl_for
from tests.support.samples import NS, Json
from tests.support.stack import (
    api_client,
    bounded,
    claim_worker_running,
    cluster_and_watcher,
    pool_worker_running,
)
from tests.support.waiting import until

API_VERSION = "sandbox.opensandbox.io/v1alpha1"
POOL = "later-pool"
WITHIN = 20.0
TEMPLATE: Json = {"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}}


def sandbox_body(name: str, *, template: Json | None = None) -> Json:
    spec: Json = {"replicas": 2, "poolRef": POOL}
    if template is not None:
        spec["template"] = template
    return {
        "apiVersion": API_VERSION,
        "kind": "BatchSandbox",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def pool_body() -> Json:
    return {
        "apiVersion": API_VERSION,
        "kind": "Pool",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {
            "template": TEMPLATE,
            "capacitySpec": {"bufferMin": 4, "bufferMax": 6, "poolMin": 0, "poolMax": 8},
            "scaleStrategy": {"maxUnavailable": "100%"},
        },
    }


def pending(sandbox: Json | None) -> Json | None:
    for each in ((sandbox or {}).get("status") or {}).get("conditions") or ():
        if each.get("type") == "PoolAllocationPending" and each.get("status") == "True":
            return dict(each)
    return None


def given(sandbox: Json) -> list[str]:
    text = (sandbox["metadata"].get("annotations") or {}).get(ANNOTATION_ALLOC_STATUS)
    return list(json.loads(text)["pods"]) if text else []


async def test_a_sandbox_of_a_missing_pool_says_so_until_the_pool_is_created(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
        claim_worker_running(cluster, js, bus, tmp_path),
        pool_worker_running(cluster, js, bus, tmp_path),
    ):
        kube = KubeApi(client, field_manager="e2e-test")
        names = ("orphan", "templated")
        await kube.create(sandbox_body("orphan"))
        await kube.create(sandbox_body("templated", template=TEMPLATE))

        for name in names:

            async def waiting(name: str = name) -> Json | None:
                return pending(await kube.get(ObjectKey("BatchSandbox", NS, name)))

            found = await until(waiting, within=WITHIN)
            assert found["reason"] == "PoolNotFound"
            assert found["message"] == (
                f"Pool {POOL} does not exist in namespace {NS}: create it, or set spec.poolRef "
                "to a Pool that exists; waiting for 2 Pods"
            )

        async def warned() -> dict[str, Json]:
            found = await events_about(kube, "BatchSandbox", reason="PoolNotFound", type="Warning")
            return {event["regarding"]["name"]: event for event in found}

        async def each_warned() -> dict[str, Json] | None:
            found = await warned()
            return found if set(found) == set(names) else None

        events = await until(each_warned, within=WITHIN)
        assert f"Pool {POOL} does not exist" in events["orphan"]["note"]

        kubectl = kubectl_for(cluster, tmp_path)
        described = await kubectl.ok("describe", "batchsandbox", "orphan", "-n", NS)
        print(f"\n$ kubectl describe batchsandbox orphan\n{described}")
        assert "PoolAllocationPending" in described and "PoolNotFound" in described
        assert f"Pool {POOL} does not exist" in described

        # The Pool is created: each sandbox gets its Pods, and the condition goes.
        await kube.create(pool_body())
        for name in names:

            async def served(name: str = name) -> Json | None:
                sandbox = await kube.get(ObjectKey("BatchSandbox", NS, name))
                ok = len(given(sandbox)) == 2 and pending(sandbox) is None
                return sandbox if ok else None

            sandbox = await until(served, within=WITHIN)
            assert (sandbox.get("status") or {}).get("phase") in ("Pending", "Succeed")
        assert set(await warned()) == set(names), "one Warning each, for the one transition"


def invalid(sandbox: Json | None) -> Json | None:
    for each in ((sandbox or {}).get("status") or {}).get("conditions") or ():
        if each.get("type") == "InvalidSpec" and each.get("status") == "True":
            return dict(each)
    return None


async def test_a_sandbox_without_template_or_pool_says_so_until_it_gets_a_template(
    nats_url: str, tmp_path: Path
) -> None:
    """Neither ``template`` nor ``poolRef`` (issue #32): upstream sends Pods without containers,
    pass after pass; here ``InvalidSpec``/``NoTemplate`` and one Warning Event, until the
    sandbox gets a template; then its Pods are made and the condition goes."""
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
        claim_worker_running(cluster, js, bus, tmp_path),
    ):
        kube = KubeApi(client, field_manager="e2e-test")
        name = "nothing-to-run"
        key = ObjectKey("BatchSandbox", NS, name)
        body = sandbox_body(name)
        del body["spec"]["poolRef"]
        await kube.create(body)

        async def refused() -> Json | None:
            return invalid(await kube.get(key))

        found = await until(refused, within=WITHIN)
        assert found["reason"] == "NoTemplate"
        assert found["message"] == (
            "neither spec.template nor spec.poolRef is set: there is nothing to make its 2 "
            "Pod(s) from; set spec.template, or spec.poolRef to take them from a Pool"
        )

        await warned_and_described(
            kube,
            cluster,
            tmp_path,
            "BatchSandbox",
            name,
            condition="InvalidSpec",
            reason="NoTemplate",
            message=found["message"],
            within=WITHIN,
        )

        # It gets a template: its Pods are made, the condition goes.
        await kube.patch(key, {"spec": {"template": TEMPLATE}})

        async def served() -> Json | None:
            sandbox = await kube.get(key)
            pods = [
                p
                for p in await kube.list("Pod", NS)
                if any(o.get("name") == name for o in p["metadata"].get("ownerReferences") or ())
            ]
            return sandbox if len(pods) == 2 and invalid(sandbox) is None else None

        await until(served, within=WITHIN)
        warnings = await events_about(
            kube, "BatchSandbox", name, reason="NoTemplate", type="Warning"
        )
        assert len(warnings) == 1, "one Warning for the one appearance"
