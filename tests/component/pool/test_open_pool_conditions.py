"""An OpenSandbox Pool that cannot make progress says why, on the object (issue #32,
docs/conditions.md), against the real thing: the development cluster, a nats-server with the
bus, the watcher and the pool worker, all in this process, and a real ``kubectl describe``.

- A Pool whose template the API refuses (a container without an image): every Pod create
  comes back 422. The Pool carries ``ReplicaFailure``/``FailedCreate`` with the API's own
  message and a Warning Event says the same; once the template has an image the Pods come
  and the condition goes.
- A Pool with inverted bounds (bufferMin 5 > bufferMax 2, poolMin 4 > poolMax 1): the CRD
  refuses it now; one stored before the rule existed (the CRD installed without it for the
  create) is refused by the pool worker with ``InvalidSpec``/``InvertedCapacity`` and a
  Warning Event, makes no Pod, and fills once the bounds are fixed.
"""

from __future__ import annotations

import copy
from pathlib import Path

from api.crd import crd_for
from api.opensandbox import LABEL_POOL_NAME, Pool
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi, KubeError
from tests.component.pool.harness import (
    open_pool_body,
    open_pool_warnings,
    true_condition,
)
from tests.support.kubectl import kubectl_for
from tests.support.samples import NS, Json
from tests.support.stack import api_client, bounded, cluster_and_watcher, pool_worker_running
from tests.support.waiting import until

WITHIN = 20.0


async def test_a_pool_whose_pods_the_api_refuses_says_why_until_its_template_is_fixed(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
        pool_worker_running(cluster, js, bus, tmp_path),
    ):
        kube = KubeApi(client, field_manager="e2e-test")
        name = "no-image"
        await kube.create(open_pool_body(name, {"name": "main"}, (1, 2, 0, 3)))

        async def refused() -> Json | None:
            return true_condition(await kube.get(ObjectKey("Pool", NS, name)), "ReplicaFailure")

        found = await until(refused, within=WITHIN)
        assert found["reason"] == "FailedCreate"
        assert "spec.containers[0].image: Required value" in found["message"], found
        assert "(Invalid, 422)" in found["message"]

        async def warned() -> list[Json]:
            return [
                e for e in await open_pool_warnings(kube, name) if e["reason"] == "FailedCreate"
            ]

        (event,) = await until(warned, within=WITHIN)
        assert "spec.containers[0].image: Required value" in event["note"]

        described = await kubectl_for(cluster, tmp_path).ok("describe", "pool", name, "-n", NS)
        print(f"\n$ kubectl describe pool {name}\n{described}")
        assert "ReplicaFailure" in described and "FailedCreate" in described
        assert "spec.containers[0].image: Required value" in described

        # The template gets an image: the Pods come, the condition goes.
        await kube.patch(
            ObjectKey("Pool", NS, name),
            {
                "spec": {
                    "template": {"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}}
                }
            },
        )

        async def served() -> Json | None:
            pool = await kube.get(ObjectKey("Pool", NS, name))
            pods = [
                p
                for p in await kube.list("Pod", NS)
                if (p["metadata"].get("labels") or {}).get(LABEL_POOL_NAME) == name
            ]
            ok = pods and true_condition(pool, "ReplicaFailure") is None
            return pool if ok else None

        pool = await until(served, within=WITHIN)
        assert not (pool.get("status") or {}).get("conditions")
        assert len(await warned()) == 1, "one Warning for the one transition"


def without_capacity_rules(crd: Json) -> Json:
    """The Pool CRD as it was before ``capacitySpec`` had its rules."""
    crd = copy.deepcopy(crd)
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["properties"]["capacitySpec"].pop("x-kubernetes-validations", None)
    return crd


async def test_inverted_capacity_is_refused_by_the_crd_and_by_the_pool_worker(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
        pool_worker_running(cluster, js, bus, tmp_path),
    ):
        kube = KubeApi(client, field_manager="e2e-test")
        name = "inverted"
        body = open_pool_body(name, {"name": "main", "image": "python:3.12"}, (5, 2, 4, 1))

        # 1. The CRD refuses it, in a person's words.
        try:
            await kube.create(body)
        except KubeError as error:
            assert error.status == 422
            assert "bufferMin must not be greater than bufferMax" in error.message
            assert "poolMin must not be greater than poolMax" in error.message
        else:
            raise AssertionError("an inverted Pool was accepted")

        # 2. One stored before the rule existed: the pool worker refuses it.
        crd = crd_for(Pool)
        await cluster.install_crd_documents([without_capacity_rules(crd)])
        await kube.create(body)
        await cluster.install_crd_documents([crd])

        async def refused() -> Json | None:
            return true_condition(await kube.get(ObjectKey("Pool", NS, name)), "InvalidSpec")

        found = await until(refused, within=WITHIN)
        assert found["reason"] == "InvertedCapacity"
        assert found["message"] == (
            "capacitySpec.bufferMin (5) is greater than bufferMax (2); capacitySpec.poolMin (4) is "
            "greater than poolMax (1): the Pool neither scales nor updates its Pods until this is "
            "fixed"
        )

        async def warned() -> list[Json]:
            events = await open_pool_warnings(kube, name)
            return [e for e in events if e["reason"] == "InvertedCapacity"]

        (event,) = await until(warned, within=WITHIN)
        assert "bufferMin (5) is greater than bufferMax (2)" in event["note"]
        pods = [
            p
            for p in await kube.list("Pod", NS)
            if (p["metadata"].get("labels") or {}).get(LABEL_POOL_NAME) == name
        ]
        assert pods == [], "upstream would run it at poolMax; this Pool makes nothing"

        described = await kubectl_for(cluster, tmp_path).ok("describe", "pool", name, "-n", NS)
        print(f"\n$ kubectl describe pool {name}\n{described}")
        assert "InvertedCapacity" in described and "is greater than bufferMax" in described

        # Fixed: the condition goes and the Pool fills its buffer.
        await kube.patch(
            ObjectKey("Pool", NS, name),
            {
                "spec": {
                    "capacitySpec": {"bufferMin": 1, "bufferMax": 2, "poolMin": 0, "poolMax": 4}
                }
            },
        )

        async def filled() -> Json | None:
            pool = await kube.get(ObjectKey("Pool", NS, name))
            status = pool.get("status") or {}
            ok = status.get("available", 0) >= 1 and not status.get("conditions")
            return pool if ok else None

        await until(filled, within=WITHIN)
