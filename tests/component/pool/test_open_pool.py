"""sandbus's pool worker serving an OpenSandbox Pool (docs/opensandbox.md §2) against the real
thing: the development cluster (its kubelet makes Pods Running and Ready), a nats-server with
the bus, the watcher and the pool worker, all in this process.

One Pool (bufferMin 1, bufferMax 3, poolMin 0, poolMax 5) through its life: it fills its buffer
with Ready Pods and reports its status; a pooled BatchSandbox of two replicas is given two of
its Pods (alloc-status, the pool-allocation finalizer, status.allocated); a release of one of
them under the default Delete recycle deletes that Pod and records it in alloc-released; the
deletion of the BatchSandbox releases the other and lets the object go; the Pool refills its
buffer. No BatchSandbox controller runs here: the test writes what it would (alloc-release).
"""

from __future__ import annotations

import json
from pathlib import Path

from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASE,
    ANNOTATION_ALLOC_RELEASED,
    ANNOTATION_ALLOC_STATUS,
    FINALIZER_POOL_ALLOCATION,
    LABEL_POOL_NAME,
    LABEL_POOL_REVISION,
)
from events.envelope import ObjectKey
from services.pool.core.opensandbox.plan import template_revision
from services.runtime.kube import KubeApi, KubeError
from tests.support.samples import NS, Json, is_ready
from tests.support.stack import api_client, bounded, cluster_and_watcher, pool_worker_running
from tests.support.waiting import until

POOL = "open-pool"
SANDBOX = "pooled"
API_VERSION = "sandbox.opensandbox.io/v1alpha1"
WITHIN = 20.0


def pool_body() -> Json:
    return {
        "apiVersion": API_VERSION,
        "kind": "Pool",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "open-pool"}},
                "spec": {"containers": [{"name": "main", "image": "python:3.12"}]},
            },
            "capacitySpec": {"bufferMin": 1, "bufferMax": 3, "poolMin": 0, "poolMax": 5},
        },
    }


def sandbox_body() -> Json:
    return {
        "apiVersion": API_VERSION,
        "kind": "BatchSandbox",
        "metadata": {"name": SANDBOX, "namespace": NS},
        "spec": {"replicas": 2, "poolRef": POOL},
    }


def pods_of(obj: Json | None, key: str) -> list[str]:
    text = ((obj or {}).get("metadata") or {}).get("annotations", {}).get(key)
    return list(json.loads(text)["pods"]) if text else []


def running_and_ready(pod: Json) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and is_ready(pod)


async def test_a_pool_fills_allocates_releases_and_refills(nats_url: str, tmp_path: Path) -> None:
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
    ):
        kube = KubeApi(client, field_manager="e2e-test")

        async def get(kind: str, name: str) -> Json | None:
            try:
                return await kube.get(ObjectKey(kind, NS, name))
            except KubeError as error:
                if error.not_found:
                    return None
                raise

        async def pool_pods() -> list[Json]:
            """The Pool's Pods that are not being deleted."""
            return [
                p
                for p in await kube.list("Pod", NS)
                if (p["metadata"].get("labels") or {}).get(LABEL_POOL_NAME) == POOL
                and not p["metadata"].get("deletionTimestamp")
            ]

        async def pool_status() -> Json:
            return dict((await get("Pool", POOL) or {}).get("status") or {})

        async with pool_worker_running(cluster, js, bus, tmp_path):
            pool = await kube.create(pool_body())
            revision = template_revision(pool)

            # 1. It fills its buffer with Ready Pods and says so.
            async def filled() -> Json:
                status = await pool_status()
                pods = await pool_pods()
                ready = [p for p in pods if running_and_ready(p)]
                steady = (
                    1 <= len(ready) == len(pods) <= 3
                    and status.get("total") == len(pods)
                    and status.get("available") == len(ready)
                )
                return status if steady else {}

            status = await until(filled, within=WITHIN)
            assert status["revision"] == revision
            assert status["allocated"] == 0
            assert status["updated"] == status["total"]
            assert status["observedGeneration"] == pool["metadata"].get("generation")
            for each in await pool_pods():
                labels = each["metadata"]["labels"]
                assert labels[LABEL_POOL_REVISION] == revision and labels["app"] == "open-pool"
                (owner,) = each["metadata"]["ownerReferences"]
                assert owner["uid"] == pool["metadata"]["uid"] and owner["controller"]

            # 2. A pooled BatchSandbox of two replicas gets two of its Pods.
            await kube.create(sandbox_body())

            async def allocated() -> Json | None:
                box = await get("BatchSandbox", SANDBOX)
                given = pods_of(box, ANNOTATION_ALLOC_STATUS)
                status = await pool_status()
                return box if len(given) == 2 and status.get("allocated") == 2 else None

            box = await until(allocated, within=WITHIN)
            given = pods_of(box, ANNOTATION_ALLOC_STATUS)
            assert FINALIZER_POOL_ALLOCATION in box["metadata"]["finalizers"]
            live = {p["metadata"]["name"]: p for p in await pool_pods()}
            assert set(given) <= set(live), "two of the Pool's own Pods"
            assert all(running_and_ready(live[name]) for name in given)

            # 3. Releasing one under the default Delete recycle deletes it.
            first, second = given
            await kube.patch(
                ObjectKey("BatchSandbox", NS, SANDBOX),
                {
                    "metadata": {
                        "annotations": {ANNOTATION_ALLOC_RELEASE: json.dumps({"pods": [first]})}
                    }
                },
            )

            async def released() -> Json | None:
                box = await get("BatchSandbox", SANDBOX)
                gone = await get("Pod", first) is None
                done = pods_of(box, ANNOTATION_ALLOC_RELEASED) == [first]
                return box if gone and done else None

            box = await until(released, within=WITHIN)
            assert pods_of(box, ANNOTATION_ALLOC_STATUS) == given, "it only grows"
            assert await get("Pod", second) is not None

            async def one_left() -> bool:
                return (await pool_status()).get("allocated") == 1

            await until(one_left, within=WITHIN)

            # 4. Deleting the BatchSandbox releases the other and lets the object go.
            await kube.delete(ObjectKey("BatchSandbox", NS, SANDBOX))

            async def let_go() -> bool:
                box_gone = await get("BatchSandbox", SANDBOX) is None
                return box_gone and await get("Pod", second) is None

            await until(let_go, within=WITHIN)

            # 5. The Pool refills its buffer.
            async def refilled() -> Json:
                status = await filled()
                return status if status and status.get("allocated") == 0 else {}

            status = await until(refilled, within=WITHIN)
            names = {p["metadata"]["name"] for p in await pool_pods()}
            assert not names & {first, second}, "a released Pod never comes back"
            assert status["total"] == len(names) >= 1
