"""sandbus's pool worker taking over an OpenSandbox Pool from upstream's Go controller: the Pool,
its Pods and a BatchSandbox exist already, written as upstream writes them (docs/opensandbox.md
§1.5, §2.3, §2.6), when the pool worker first starts with no ledger of its own; the development
cluster, NATS, the watcher and the pool worker in this process.

Upstream's Pods carry ``pool-revision`` = the first 8 bytes of the SHA-256 of Go's
``json.Marshal`` of the template, written out here from the template's Go encoding by hand
(k8s.io/api v0.33: ``"metadata":{"creationTimestamp":null}``, ``"resources":{}``), and its
BatchSandbox carries ``alloc-status`` and the ``pool-allocation`` finalizer. What must hold:
no idle Pod is recreated, no allocated Pod moves, nothing is created or deleted, and the Pool
reports what upstream's controller would.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

from api.opensandbox import (
    ANNOTATION_ALLOC_STATUS,
    FINALIZER_POOL_ALLOCATION,
    LABEL_POOL_NAME,
    LABEL_POOL_REVISION,
)
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi
from tests.component.watcher.harness import record_history
from tests.support.samples import NS, Json
from tests.support.stack import api_client, bounded, cluster_and_watcher, pool_worker_running
from tests.support.waiting import until

POOL = "upstream-open-pool"
API_VERSION = "sandbox.opensandbox.io/v1alpha1"
TEMPLATE: Json = {
    "metadata": {"labels": {"app": "upstream"}},
    "spec": {"containers": [{"name": "main", "image": "python:3.12"}]},
}
GO_JSON = (
    '{"metadata":{"creationTimestamp":null,"labels":{"app":"upstream"}},'
    '"spec":{"containers":[{"name":"main","image":"python:3.12","resources":{}}]}}'
)
"""``json.Marshal(pool.Spec.Template)`` of TEMPLATE as upstream's controller writes it."""
REVISION = hashlib.sha256(GO_JSON.encode()).hexdigest()[:16]
PODS = ("upstream-open-pool-4xk2p", "upstream-open-pool-9qrtz", "upstream-open-pool-m7wbn")


def upstream_pod(name: str, pool: Json) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app": "upstream", LABEL_POOL_NAME: POOL, LABEL_POOL_REVISION: REVISION},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "Pool",
                    "name": POOL,
                    "uid": pool["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "main", "image": "python:3.12"}]},
    }


async def test_upstreams_pods_and_allocation_are_kept_as_they_are(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
    ):
        kube = KubeApi(client, field_manager="upstream")
        pool = await kube.create(
            {
                "apiVersion": API_VERSION,
                "kind": "Pool",
                "metadata": {"name": POOL, "namespace": NS},
                "spec": {
                    "template": TEMPLATE,
                    "capacitySpec": {
                        "bufferMin": 1,
                        "bufferMax": 1,
                        "poolMin": 0,
                        "poolMax": 5,
                    },
                },
            }
        )
        uids = {}
        for name in PODS:
            uids[name] = (await kube.create(upstream_pod(name, pool)))["metadata"]["uid"]
        allocated = list(PODS[:2])
        await kube.create(
            {
                "apiVersion": API_VERSION,
                "kind": "BatchSandbox",
                "metadata": {
                    "name": "upstream-batch",
                    "namespace": NS,
                    "annotations": {
                        ANNOTATION_ALLOC_STATUS: json.dumps({"pods": allocated}),
                    },
                    "finalizers": [FINALIZER_POOL_ALLOCATION],
                },
                "spec": {"replicas": 2, "poolRef": POOL},
            }
        )

        async def all_ready() -> bool:
            pods = await kube.list("Pod", NS)
            return len(pods) == 3 and all(
                (p.get("status") or {}).get("phase") == "Running" for p in pods
            )

        await until(all_ready, within=20, interval=0.1)
        history = record_history(cluster)
        async with pool_worker_running(cluster, js, bus, tmp_path):

            async def reported() -> Json:
                status = (await kube.get(ObjectKey("Pool", NS, POOL))).get("status") or {}
                return status if status.get("allocated") == 2 else {}

            status = await until(reported, within=20, interval=0.1)
            await asyncio.sleep(2)  # a late delete, create or reallocation would show by now
            assert status["revision"] == REVISION
            assert (status["total"], status["available"], status["updated"]) == (3, 1, 3)
            pods = await kube.list("Pod", NS)
            assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods} == uids
            written = [
                (change.type, change.name)
                for change in history.of(["Pod"])
                if change.type != "MODIFIED"
            ]
            assert written == [], "no Pod created or deleted"
            batch = await kube.get(ObjectKey("BatchSandbox", NS, "upstream-batch"))
            annotations = batch["metadata"]["annotations"]
            assert json.loads(annotations[ANNOTATION_ALLOC_STATUS]) == {"pods": allocated}
            assert FINALIZER_POOL_ALLOCATION in batch["metadata"]["finalizers"]
