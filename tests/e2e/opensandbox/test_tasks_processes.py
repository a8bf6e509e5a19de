"""End to end: BatchSandbox tasks run by real task executors, with the watcher, the pool worker and
the claim worker as their own processes on the development cluster, whose kubelet starts a
real ``sandbus task-executor`` for each Pod that runs one (on the Pod's loopback IP).

What must hold: a BatchSandbox of 20 replicas runs a real command on each Pod and ends at
taskSucceed=20; a failing preStart keeps the main process from starting and says so; postStop
runs after the BatchSandbox is deleted; an executor killed in the middle of a task is reported
Unknown, then its task is recovered from its persisted state; a task past its timeout ends
with TaskTimeout; and, opt-in, a claim with env adopts a warm sandbox whose process sees the env.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from api.objects import Json
from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from devtools.natsd import NatsServer
from events.envelope import ObjectKey
from services.claim.core.envtask import ANNOTATION_CLAIM_ENV_TASK
from services.runtime.kube import KubeApi
from tests.e2e.opensandbox.harness import get
from tests.e2e.services import log_tails, service
from tests.support.samples import NS, is_ready
from tests.support.stack import FAST_KUBELET, api_client
from tests.support.waiting import until

pytestmark = pytest.mark.slow

PYTHON = sys.executable
EXECUTOR = {
    "name": "task-executor",
    "image": "task-executor:dev",
    "args": ["-listen-addr=0.0.0.0:5758"],
}


@asynccontextmanager
async def world(
    tmp_path: Path, *services: str, kubelet: Json | None = None
) -> AsyncIterator[tuple[KubeApi, Path, Path]]:
    """NATS, the development cluster with real executors (``kubelet``: further settings of its
    kubelet), and the watcher plus ``services``; yields an API client, the executors'
    directory and the logs directory."""
    logs = tmp_path / "logs"
    logs.mkdir()
    executors = tmp_path / "executors"
    executors.mkdir()
    simulation = SimulationSettings(
        nodes=1,
        pod_ready_delay=0.05,
        options={
            "kubelet": {**FAST_KUBELET, "task_executor_dir": str(executors), **(kubelet or {})}
        },
    )
    latency = LatencyModel(read=(0.0, 0.0), write=(0.0, 0.0), watch=(0.0, 0.0))
    async with (
        NatsServer(store_dir=tmp_path / "nats") as nats_server,
        DevCluster(port=0, latency=latency, simulation=simulation) as cluster,
        api_client(cluster, tmp_path, "test") as client,
    ):
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        url = nats_server.url
        async with AsyncExitStack() as stack:
            for name in ("watcher", *services):
                await stack.enter_async_context(service(name, url, kubeconfig, logs))
            try:
                yield KubeApi(client, field_manager="e2e-test"), executors, logs
            except AssertionError as failure:
                raise AssertionError(f"{failure}\n{log_tails(logs)}") from None


def batch(name: str, replicas: int, process: Json, **task_spec: Any) -> Json:
    return {
        "apiVersion": "sandbox.opensandbox.io/v1alpha1",
        "kind": "BatchSandbox",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {"containers": [{"name": "main", "image": "python:3.12"}, EXECUTOR]}
            },
            "taskTemplate": {"spec": {"process": process, **task_spec}},
        },
    }


def python(code: str, **env: str) -> Json:
    process: Json = {"command": [PYTHON, "-c", code]}
    if env:
        process["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return process


async def status_of(kube: KubeApi, name: str) -> Json:
    return ((await get(kube, "BatchSandbox", name)) or {}).get("status") or {}


async def counters_reach(kube: KubeApi, name: str, within: float = 60, **wanted: int) -> Json:
    async def there() -> Json | None:
        status = await status_of(kube, name)
        return status if all(status.get(k) == v for k, v in wanted.items()) else None

    reached: Json = await until(there, within=within, interval=0.1)
    return reached


@pytest.mark.timeout(240)
async def test_twenty_replicas_run_a_real_command_each(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    code = "import os, pathlib; pathlib.Path(os.environ['OUT'], str(os.getpid())).write_text('ok')"
    async with world(tmp_path, "claim") as (kube, _executors, _logs):
        await kube.create(batch("twenty", 20, python(code, OUT=str(out))))
        status = await counters_reach(kube, "twenty", within=120, taskSucceed=20)
        assert status["taskFailed"] == status["taskUnknown"] == status["taskPending"] == 0
        assert len(list(out.iterdir())) == 20
        sandbox = await get(kube, "BatchSandbox", "twenty")
        assert sandbox is not None
        assert (
            "batch-sandbox.sandbox.opensandbox.io/task-cleanup" in sandbox["metadata"]["finalizers"]
        )


@pytest.mark.timeout(240)
async def test_hooks_and_timeouts(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    write = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('x')"
    async with world(tmp_path, "claim") as (kube, _executors, _logs):
        # A failing preStart: the main process never starts.
        failing = python(write)
        failing["args"] = [str(marks / "main-ran")]
        failing["lifecycle"] = {
            "preStart": {"exec": {"command": [PYTHON, "-c", "import sys; sys.exit(3)"]}}
        }
        await kube.create(batch("prestart", 1, failing))
        # postStop after deletion: a long task, then the sandbox is deleted.
        long = python("import time; time.sleep(60)")
        long["lifecycle"] = {
            "postStop": {"exec": {"command": [PYTHON, "-c", write, str(marks / "post-stop")]}}
        }
        await kube.create(batch("cleanup", 1, long))
        # A timeout.
        await kube.create(batch("slow", 1, python("import time; time.sleep(60)"), timeoutSeconds=1))

        failed = await counters_reach(kube, "prestart", taskFailed=1)
        assert "PreStartHook" in failed.get("taskLastErrorMessage", ""), failed
        assert not (marks / "main-ran").exists()

        timed_out = await counters_reach(kube, "slow", taskFailed=1)
        assert "TaskTimeout" in timed_out.get("taskLastErrorMessage", ""), timed_out

        await counters_reach(kube, "cleanup", taskRunning=1)
        await kube.delete(ObjectKey("BatchSandbox", NS, "cleanup"))

        async def gone() -> bool:
            return await get(kube, "BatchSandbox", "cleanup") is None

        await until(gone, within=60, interval=0.1)
        assert (marks / "post-stop").exists(), "postStop ran before the sandbox went"


@pytest.mark.timeout(240)
async def test_an_executor_killed_mid_task_is_unknown_then_recovered(tmp_path: Path) -> None:
    out = tmp_path / "done"
    code = f"import time, pathlib; time.sleep(6); pathlib.Path({str(out)!r}).write_text('ok')"
    # The executor stays down for the crash back-off: long enough for a look to find it gone.
    async with world(tmp_path, "claim", kubelet={"crash_backoff": 3.0}) as (
        kube,
        executors,
        _logs,
    ):
        await kube.create(batch("crash", 1, python(code)))
        await counters_reach(kube, "crash", taskRunning=1)
        [pid_file] = list(executors.glob("*/*/executor.pid"))
        os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
        await counters_reach(kube, "crash", within=30, taskUnknown=1)
        status = await counters_reach(kube, "crash", within=60, taskSucceed=1)
        assert status["taskFailed"] == 0
        assert out.read_text() == "ok"
        pod = await get(kube, "Pod", "crash-0")
        assert pod is not None
        restarts = {c["name"]: c.get("restartCount", 0) for c in pod["status"]["containerStatuses"]}
        assert restarts["task-executor"] >= 1


@pytest.mark.timeout(240)
async def test_a_claim_with_env_adopts_a_warm_sandbox_whose_process_sees_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "seen"
    code = "import os, pathlib; pathlib.Path(os.environ['OUT']).write_text(os.environ['TOKEN'])"
    template = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {
            "name": "agent",
            "namespace": NS,
            "annotations": {ANNOTATION_CLAIM_ENV_TASK: json.dumps([PYTHON, "-c", code])},
        },
        "spec": {
            "envVarsInjectionPolicy": "Allowed",
            "podTemplate": {"spec": {"containers": [EXECUTOR]}},
        },
    }
    warm_pool = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": "agents", "namespace": NS},
        "spec": {"replicas": 1, "sandboxTemplateRef": {"name": "agent"}},
    }
    claim = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {"name": "ada", "namespace": NS},
        "spec": {
            "warmPoolRef": {"name": "agents"},
            "env": [{"name": "TOKEN", "value": "s3cret"}, {"name": "OUT", "value": str(out)}],
        },
    }
    async with world(tmp_path, "sandbox", "pool", "claim") as (kube, _executors, _logs):
        await kube.create(template)
        await kube.create(warm_pool)

        async def warmed() -> bool:
            status = ((await get(kube, "SandboxWarmPool", "agents")) or {}).get("status") or {}
            return status.get("readyReplicas") == 1

        await until(warmed, within=60, interval=0.1)
        await kube.create(claim)

        async def ready() -> Json | None:
            found = await get(kube, "SandboxClaim", "ada")
            return found if is_ready(found) else None

        ready_claim = await until(ready, within=60, interval=0.05)
        adopted = ready_claim["status"]["sandbox"]["name"]
        assert adopted != "ada", "a warm sandbox was adopted, not a cold one made"

        async def seen() -> bool:
            return out.exists()

        await until(seen, within=30, interval=0.05)
        assert out.read_text() == "s3cret"
