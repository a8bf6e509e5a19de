"""The simulated kubelet's settings and the objects its component tests create: a fast kubelet
(:data:`FAST`), the same with a stand-in task executor (:data:`FAST_WITH_EXECUTOR`, running
fake_task_executor.py with this interpreter), and a development cluster that runs it.

A plain module, not a test module, so that the kubelet's tests, the committer's and the
task-executor Pods' tests (and a cluster started in a process of its own) can all import it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from devtools.cluster.controllers.kubelet.config import KubeletConfig
from tests.component.devcluster.rest import Json

FAST = KubeletConfig(
    nodes=2,
    schedule_delay=0.01,
    start_delay=0.03,
    pod_ready_delay=0.05,
    termination_delay=0.03,
    run_duration=0.05,
    image_pull_backoff_delay=0.03,
    crash_backoff=0.05,
    max_crash_backoff=0.2,
    job_delay=0.05,
)
PODS = "/api/v1/namespaces/default/pods"
JOBS = "/apis/batch/v1/namespaces/default/jobs"


async def start_cluster(config: KubeletConfig) -> DevCluster:
    settings = SimulationSettings(
        nodes=config.nodes, garbage_collector=False, options={"kubelet": config}
    )
    cluster = DevCluster(port=0, crd_dirs=None, latency=LatencyModel.zero(), simulation=settings)
    await cluster.start()
    return cluster


def pod_body(
    name: str, *, annotations: Json | None = None, labels: Json | None = None, **spec: Any
) -> Json:
    spec.setdefault("containers", [{"name": "app", "image": "nginx:1.25"}])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
        "spec": spec,
    }


def job_condition(job: Json | None) -> str | None:
    for item in ((job or {}).get("status") or {}).get("conditions") or []:
        if item["status"] == "True" and item["type"] in ("Complete", "Failed"):
            return str(item["type"])
    return None


FAKE_EXECUTOR = Path(__file__).with_name("fake_task_executor.py")
FAKE_COMMAND = (
    sys.executable,
    str(FAKE_EXECUTOR),
    "--host",
    "{host}",
    "--port",
    "{port}",
    "--data-dir",
    "{data_dir}",
)
FAST_WITH_EXECUTOR = KubeletConfig(
    nodes=1,
    schedule_delay=0.01,
    start_delay=0.03,
    pod_ready_delay=0.05,
    termination_delay=0.03,
    crash_backoff=0.05,
    max_crash_backoff=0.2,
    task_executor_command=FAKE_COMMAND,
    task_executor_grace=2.0,
)
