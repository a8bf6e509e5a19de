"""What the snapshot worker's component tests share: the worker itself, with a registry and an
API client of its own; the BatchSandbox whose Pod they snapshot, and a reader that waits for
that Pod to run.

A plain module, not a test module, so that every test of this directory can import it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from nats.js import JetStreamContext

from devtools.cluster import DevCluster
from services.runtime.bus import BusConfig
from services.runtime.kube import KubeApi
from services.runtime.reconcile.worker import Worker
from services.runtime.worker_api import WorkerSettings
from services.snapshot.core.plan import CONTROLLER_NAME, SnapshotSettings
from services.snapshot.worker import snapshot_worker
from tests.support.samples import NS, Json
from tests.support.stack import api_client, bounded, loaded

API_VERSION = "sandbox.opensandbox.io/v1alpha1"
"""The apiVersion of BatchSandboxes and SandboxSnapshots."""
REGISTRY = "registry.component.local/snapshots"
"""Where the snapshot worker pushes what it commits."""
SANDBOX = "notebook"
"""The BatchSandbox that :func:`sandbox_body` makes, whose one Pod is ``notebook-0``."""
WITHIN = 30.0


@contextlib.asynccontextmanager
async def snapshot_worker_running(
    cluster: DevCluster, js: JetStreamContext, bus: BusConfig, tmp_path: Path
) -> AsyncIterator[Worker]:
    """The snapshot worker with a registry, an API client of its own, loaded until the block
    ends."""
    async with bounded(
        api_client(cluster, tmp_path, "snapshot"), "the snapshot worker's API client"
    ) as client:
        worker = Worker(
            snapshot_worker(SnapshotSettings(registry=REGISTRY)),
            js=js,
            api=KubeApi(client, field_manager=CONTROLLER_NAME),
            bus=bus,
            settings=WorkerSettings(concurrency=4, max_delay=2.0),
        )
        async with loaded(worker, "snapshot worker"):
            yield worker


def sandbox_body() -> Json:
    """The template-mode BatchSandbox :data:`SANDBOX`, of one replica."""
    return {
        "apiVersion": API_VERSION,
        "kind": "BatchSandbox",
        "metadata": {"name": SANDBOX, "namespace": NS},
        "spec": {
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "sandbox", "image": "python:3.12"}]}},
        },
    }


async def running_pod(kube: KubeApi) -> Json | None:
    """The Pod of :data:`SANDBOX`, once it is Running, or None."""
    for pod in await kube.list("Pod", NS):
        owned = pod["metadata"]["name"] == f"{SANDBOX}-0"
        if owned and (pod.get("status") or {}).get("phase") == "Running":
            return pod
    return None
