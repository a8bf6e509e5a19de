"""The claim worker's BatchSandbox reconciler against the real thing: the development cluster
(its simulated kubelet and garbage collector), a nats-server, the watcher and the claim worker,
all in this process. Template mode, so no Pool is needed.

One sandbox's life, told through the API as a user sees it (docs/opensandbox.md §3.3, §3.6-3.8,
and upstream's envtest cases batchsandbox_controller_test.go:122, :175, :203, :235, :329): its
Pods are made from the template with their shard patches applied as strategic merge patches;
the status and the endpoints follow the Pods; a deleted Pod comes back under its name; one
more replica is one more Pod; the expiry deletes the sandbox. Every wait is bounded.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from api.opensandbox import ANNOTATION_ENDPOINTS, LABEL_BATCH_SANDBOX_NAME, LABEL_POD_INDEX
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi, KubeError
from tests.support.samples import NS, Json, stamp
from tests.support.stack import api_client, bounded, claim_worker_running, cluster_and_watcher
from tests.support.waiting import until

NAME = "batch-demo"
IMAGE = "nginx:1.27"


def batch_sandbox_body(replicas: int) -> Json:
    return {
        "apiVersion": "sandbox.opensandbox.io/v1alpha1",
        "kind": "BatchSandbox",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"app": "demo"}},
                "spec": {
                    "containers": [{"name": "main", "image": IMAGE, "command": ["sleep", "3600"]}]
                },
            },
            "shardPatches": [
                {},
                {"spec": {"containers": [{"name": "main", "command": ["custom-command-1"]}]}},
            ],
        },
    }


async def test_a_batch_sandbox_in_template_mode(nats_url: str, tmp_path: Path) -> None:
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
        claim_worker_running(cluster, js, bus, tmp_path),
    ):
        kube = KubeApi(client, field_manager="component-test")
        key = ObjectKey("BatchSandbox", NS, NAME)

        async def get(kind: str, name: str) -> Json | None:
            try:
                return await kube.get(ObjectKey(kind, NS, name))
            except KubeError as error:
                if error.not_found:
                    return None
                raise

        async def live_pods(count: int) -> list[Json]:
            """Pods <name>-0..count-1, each there and not terminating, or [] until then."""
            found = [await get("Pod", f"{NAME}-{i}") for i in range(count)]
            if any(p is None or p["metadata"].get("deletionTimestamp") for p in found):
                return []
            return [p for p in found if p is not None]

        async def reported(replicas: int) -> Json | None:
            sandbox = await get("BatchSandbox", NAME)
            status = (sandbox or {}).get("status") or {}
            done = (status.get("replicas"), status.get("ready"), status.get("phase")) == (
                replicas,
                replicas,
                "Succeed",
            )
            return sandbox if done else None

        await kube.create(batch_sandbox_body(3))

        # Pods <name>-0..2 from the template, replica 1's main container patched by name.
        pods = await until(lambda: live_pods(3), within=20, interval=0.1)
        for index, obj in enumerate(pods):
            labels = obj["metadata"]["labels"]
            assert labels[LABEL_POD_INDEX] == str(index)
            assert labels[LABEL_BATCH_SANDBOX_NAME] == NAME
            assert labels["app"] == "demo"
            [main] = obj["spec"]["containers"]
            assert main["name"] == "main"
            assert main["image"] == IMAGE
            wanted = ["custom-command-1"] if index == 1 else ["sleep", "3600"]
            assert main["command"] == wanted
            [owner] = obj["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"], owner["controller"]) == (
                "BatchSandbox",
                NAME,
                True,
            )

        # The status and the endpoints follow the Pods.
        sandbox = await until(lambda: reported(3), within=20, interval=0.1)
        status = sandbox["status"]
        assert status["observedGeneration"] == sandbox["metadata"]["generation"]
        assert status["allocated"] == 3
        conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
        assert conditions == {"Ready": ("True", "PodsReady")}

        async def endpoints_listed() -> list[str] | None:
            sandbox = await get("BatchSandbox", NAME) or {}
            text = (sandbox.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_ENDPOINTS)
            ips = [str((p.get("status") or {}).get("podIP") or "") for p in await live_pods(3)]
            return ips if text is not None and json.loads(text) == ips and all(ips) else None

        ips = await until(endpoints_listed, within=20, interval=0.1)
        assert len(set(ips)) == 3

        # A deleted Pod comes back under its name, as a new Pod.
        old = pods[1]["metadata"]["uid"]
        await kube.delete(ObjectKey("Pod", NS, f"{NAME}-1"))

        async def recreated() -> Json | None:
            obj = await get("Pod", f"{NAME}-1")
            if obj is None or obj["metadata"]["uid"] == old:
                return None
            return None if obj["metadata"].get("deletionTimestamp") else obj

        again = await until(recreated, within=20, interval=0.1)
        [main] = again["spec"]["containers"]
        assert main["command"] == ["custom-command-1"]
        await until(lambda: reported(3), within=20, interval=0.1)

        # One more replica is one more Pod, the next index.
        await kube.patch(key, {"spec": {"replicas": 4}})
        pods = await until(lambda: live_pods(4), within=20, interval=0.1)
        assert pods[3]["spec"]["containers"][0]["command"] == ["sleep", "3600"]
        sandbox = await until(lambda: reported(4), within=20, interval=0.1)
        assert sandbox["status"]["observedGeneration"] == sandbox["metadata"]["generation"]

        # An expireTime a few seconds ahead deletes it when it passes, and its Pods with it.
        expire = stamp(datetime.now(UTC) + timedelta(seconds=3))
        await kube.patch(key, {"spec": {"expireTime": expire}})
        assert await get("BatchSandbox", NAME) is not None

        async def gone() -> bool:
            return await get("BatchSandbox", NAME) is None

        await until(gone, within=20, interval=0.1)
        assert datetime.now(UTC) >= datetime.fromisoformat(expire.replace("Z", "+00:00"))

        async def pods_gone() -> bool:
            return all([await get("Pod", f"{NAME}-{i}") is None for i in range(4)])

        await until(pods_gone, within=20, interval=0.1)
