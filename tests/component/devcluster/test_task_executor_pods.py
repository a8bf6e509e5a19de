"""The simulated kubelet runs a real task executor for each Pod that runs one (kubelet/executor.py,
kubelet/supervisor.py), against a real in-process DevCluster.

The executor here is a stand-in (fake_task_executor.py, run with this interpreter through
``task_executor_command``): a tiny HTTP server answering ``/health`` on ``{host}:{port}``, so
these tests hold whether or not the real one (``services.taskexecutor``) exists; the last test
runs the real one when it does. What must hold: such a Pod gets a loopback IP and is Ready only
once its executor answers there on port 5758; deleting the Pod stops the process before the Pod
is gone; a killed process is restarted as a crashed container (restartCount, lastState) on the
same data dir, and ``kill 1`` through exec restarts it too; stopping the cluster leaves no
process behind; and a Pod that does not run the executor is simulated as before.

Every test starts its own cluster, whose executors claim a loopback range of their own, so runs
in parallel (and CI's) never share an address; any process a test saw is killed at teardown
should the test fail half-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from devtools.cluster.controllers.kubelet.config import (
    DEFAULT_TASK_EXECUTOR_COMMAND,
    DEFAULT_TASK_EXECUTOR_MODULE,
)
from devtools.cluster.controllers.kubelet.executor import EXECUTOR_PORT
from devtools.cluster.controllers.kubelet.shell import Kubelet
from devtools.cluster.controllers.kubelet.supervisor import runnable_module
from tests.component.devcluster.kubelets import FAKE_COMMAND, FAST_WITH_EXECUTOR
from tests.component.devcluster.rest import Json, create, watch_until
from tests.support.samples import is_ready
from tests.support.waiting import until

PODS = "/api/v1/namespaces/default/pods"
WITHIN = 15.0  # a Python process starting on a busy machine

StartCluster = Callable[..., Awaitable[DevCluster]]


# --- fixtures and helpers ------------------------------------------------------------------


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[StartCluster]:
    """Start a cluster whose executors keep their files under tmp_path; stop it at teardown,
    and kill whatever executor a test saw that is still alive."""
    clusters: list[DevCluster] = []

    async def starting(**overrides: Any) -> DevCluster:
        config = dataclasses.replace(
            FAST_WITH_EXECUTOR, task_executor_dir=str(tmp_path), **overrides
        )
        settings = SimulationSettings(garbage_collector=False, options={"kubelet": config})
        cluster = DevCluster(
            port=0, crd_dirs=None, latency=LatencyModel.zero(), simulation=settings
        )
        await cluster.start()
        clusters.append(cluster)
        return cluster

    try:
        yield starting
    finally:
        for cluster in clusters:
            await cluster.stop()
        for pid_file in tmp_path.glob("devcluster-executors-*/*/executor.pid"):
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


@pytest.fixture
async def cluster(start: StartCluster) -> DevCluster:
    return await start()


@pytest.fixture
async def http(cluster: DevCluster) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=cluster.url) as session:
        yield session


def executor_pod(name: str) -> Json:
    """As OpenSandbox's sample Pool runs it: the sandbox container's command."""
    command = ["/opt/opensandbox/bin/task-executor", "-listen-addr=0.0.0.0:5758"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "sandbox", "image": "python:3.12-slim", "command": command},
                {"name": "sidecar", "image": "envoy:1.30"},
            ]
        },
    }


def plain_pod(name: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]},
    }


def container(pod: Json | None, name: str) -> Json:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    found: Json = next(s for s in statuses if s["name"] == name)
    return found


async def ready_pod(http: aiohttp.ClientSession, body: Json) -> Json:
    await create(http, PODS, body)
    seen = await watch_until(http, PODS, body["metadata"]["name"], is_ready, within=WITHIN)
    return seen[-1] or {}


async def current(http: aiohttp.ClientSession, name: str) -> Json:
    async with http.get(f"{PODS}/{name}") as response:
        found: Json = await response.json()
        return found


def pod_dir(root: Path, uid: str) -> Path | None:
    return next(root.glob(f"devcluster-executors-*/{uid}"), None)


def pid_of(root: Path, uid: str) -> int | None:
    directory = pod_dir(root, uid)
    pid_file = None if directory is None else directory / "executor.pid"
    if pid_file is None or not pid_file.exists():
        return None
    text = pid_file.read_text().strip()
    return int(text) if text else None


def alive(pid: int) -> bool:
    """Running: neither gone nor a zombie (an orphan's zombie waits for an init that may never
    reap it, in a container)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def listening(ip: str) -> bool:
    try:
        _, writer = await asyncio.open_connection(ip, EXECUTOR_PORT)
    except ConnectionRefusedError:
        return False
    writer.close()
    await writer.wait_closed()
    return True


async def health(ip: str) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{ip}:{EXECUTOR_PORT}/health") as response,
    ):
        return response.status


# --- the pods that run one -----------------------------------------------------------------


async def test_an_executor_pod_is_ready_only_once_its_executor_answers_on_its_ip(
    start: StartCluster, tmp_path: Path
) -> None:
    """The executor is started when the containers are, on a loopback IP of the Pod's own; it
    does not answer yet (held back), and the Pod stays Running, not Ready, well past its ready
    delay; once it answers, the Pod is Ready and its /health answers on podIP:5758."""
    release = tmp_path / "release"
    cluster = await start(task_executor_command=(*FAKE_COMMAND, "--hold-until", str(release)))
    async with aiohttp.ClientSession(base_url=cluster.url) as http:
        created = await create(http, PODS, executor_pod("sandbox-0"))
        uid = created["metadata"]["uid"]

        def running(pod: Json | None) -> bool:
            return ((pod or {}).get("status") or {}).get("phase") == "Running"

        pod = (await watch_until(http, PODS, "sandbox-0", running, within=WITHIN))[-1] or {}
        ip = pod["status"]["podIP"]
        assert ip.startswith("127.") and not ip.startswith("127.0.")
        assert pod["status"]["podIPs"] == [{"ip": ip}]
        assert container(pod, "sandbox")["started"] is True

        pid = await until(lambda: pid_of(tmp_path, uid), within=WITHIN, interval=0.02)
        await asyncio.sleep(10 * FAST_WITH_EXECUTOR.pod_ready_delay)
        assert alive(pid) and not await listening(ip)
        assert not is_ready(await current(http, "sandbox-0"))

        release.touch()
        await watch_until(http, PODS, "sandbox-0", is_ready, within=WITHIN)
        assert await health(ip) == 200
        directory = pod_dir(tmp_path, uid)
        assert directory is not None
        assert (directory / "data" / "starts").read_text() == f"{pid}\n"
        assert "serving on" in (directory / "executor.log").read_text()


async def test_two_executor_pods_get_their_own_ips_and_processes(
    cluster: DevCluster, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    first = await ready_pod(http, executor_pod("sandbox-0"))
    second = await ready_pod(http, executor_pod("sandbox-1"))
    ips = {first["status"]["podIP"], second["status"]["podIP"]}
    assert len(ips) == 2
    pids = {pid_of(tmp_path, pod["metadata"]["uid"]) for pod in (first, second)}
    assert None not in pids and len(pids) == 2
    for ip in ips:
        assert await health(ip) == 200


async def test_the_kubelet_says_where_each_executor_keeps_its_things(tmp_path: Path) -> None:
    """Run in-process, the Kubelet tells a pod's executor pid, data dir and log."""
    settings = SimulationSettings(kubelet=False, garbage_collector=False)
    config = dataclasses.replace(FAST_WITH_EXECUTOR, task_executor_dir=str(tmp_path))
    async with (
        DevCluster(port=0, crd_dirs=None, latency=LatencyModel.zero(), simulation=settings) as c,
        Kubelet(c.local_url, config) as kubelet,
        aiohttp.ClientSession(base_url=c.url) as http,
    ):
        root = kubelet.task_executor_root
        assert root is not None and root.parent == tmp_path
        pod = await ready_pod(http, executor_pod("sandbox-0"))
        files = kubelet.task_executor(pod["metadata"]["uid"])
        assert files is not None and files.pid is not None and alive(files.pid)
        assert files.pid_file.read_text() == f"{files.pid}\n"
        assert files.data_dir.is_dir() and files.log.is_file()
        plain = await ready_pod(http, plain_pod("web"))
        assert kubelet.task_executor(plain["metadata"]["uid"]) is None
    assert not alive(files.pid) and not root.exists()


async def test_deleting_the_pod_stops_its_executor(
    cluster: DevCluster, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """Graceful deletion: the process is stopped and reaped before the Pod is gone, and its
    files go with it."""
    pod = await ready_pod(http, executor_pod("sandbox-0"))
    uid, ip = pod["metadata"]["uid"], pod["status"]["podIP"]
    pid = pid_of(tmp_path, uid)
    assert pid is not None and alive(pid)
    async with http.delete(f"{PODS}/sandbox-0") as response:
        assert response.status == 200
    await watch_until(http, PODS, "sandbox-0", lambda p: p is None, within=WITHIN)
    assert not alive(pid)
    assert not await listening(ip)
    await until(lambda: pod_dir(tmp_path, uid) is None, within=WITHIN, interval=0.02)


async def test_a_killed_executor_is_restarted_as_a_crashed_container(
    cluster: DevCluster, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """SIGKILL (a crash): the container goes CrashLoopBackOff with restartCount 1 and the kill
    as lastState (137), the Pod not Ready; after the back-off a new process runs on the same
    data dir, and the Pod is Ready again once it answers."""
    pod = await ready_pod(http, executor_pod("sandbox-0"))
    uid, ip = pod["metadata"]["uid"], pod["status"]["podIP"]
    before = container(pod, "sandbox")
    pid = pid_of(tmp_path, uid)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    def restarted(obj: Json | None) -> bool:
        return is_ready(obj) and container(obj, "sandbox")["restartCount"] == 1

    seen = await watch_until(http, PODS, "sandbox-0", restarted, within=WITHIN)
    assert any(
        p is not None and not is_ready(p) and "waiting" in container(p, "sandbox")["state"]
        for p in seen
    )
    after = container(seen[-1], "sandbox")
    terminated = after["lastState"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "Error")
    assert terminated["containerID"] == before["containerID"] != after["containerID"]
    assert container(seen[-1], "sidecar")["restartCount"] == 0

    new_pid = pid_of(tmp_path, uid)
    assert new_pid is not None and new_pid != pid and alive(new_pid)
    assert await health(ip) == 200
    directory = pod_dir(tmp_path, uid)
    assert directory is not None
    assert (directory / "data" / "starts").read_text().split() == [str(pid), str(new_pid)]


async def test_kill_1_through_exec_restarts_the_executor(
    cluster: DevCluster, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """``kill 1`` in the executor's container ends its process (the kubelet stops it) and the
    restarted container gets a new one; ``kill 1`` in another container leaves it alone."""
    pod = await ready_pod(http, executor_pod("sandbox-0"))
    uid, ip = pod["metadata"]["uid"], pod["status"]["podIP"]
    pid = pid_of(tmp_path, uid)
    assert pid is not None

    async def kill_1(name: str) -> None:
        query = [("container", name), ("command", "kill"), ("command", "1"), ("stdout", "true")]
        async with http.ws_connect(
            f"{PODS}/sandbox-0/exec", params=query, protocols=("v5.channel.k8s.io",)
        ) as ws:
            async for _ in ws:
                pass

    await kill_1("sidecar")
    await watch_until(
        http,
        PODS,
        "sandbox-0",
        lambda p: is_ready(p) and container(p, "sidecar")["restartCount"] == 1,
        within=WITHIN,
    )
    assert pid_of(tmp_path, uid) == pid and alive(pid)

    await kill_1("sandbox")

    def restarted(obj: Json | None) -> bool:
        return is_ready(obj) and container(obj, "sandbox")["restartCount"] == 1

    after = (await watch_until(http, PODS, "sandbox-0", restarted, within=WITHIN))[-1]
    assert container(after, "sandbox")["lastState"]["terminated"]["exitCode"] == 0
    assert not alive(pid)
    new_pid = pid_of(tmp_path, uid)
    assert new_pid is not None and new_pid != pid
    assert await health(ip) == 200


async def test_stopping_the_cluster_leaves_no_executor_behind(
    start: StartCluster, tmp_path: Path
) -> None:
    cluster = await start()
    async with aiohttp.ClientSession(base_url=cluster.url) as http:
        pods = [await ready_pod(http, executor_pod(f"sandbox-{i}")) for i in range(2)]
    pids = [pid_of(tmp_path, pod["metadata"]["uid"]) for pod in pods]
    assert all(pid is not None and alive(pid) for pid in pids)
    await cluster.stop()
    assert not any(alive(pid) for pid in pids if pid is not None)
    for pod in pods:
        assert not await listening(pod["status"]["podIP"])
    assert list(tmp_path.glob("devcluster-executors-*")) == []  # the kubelet's directory too


# A cluster in a process of its own, which the test then kills outright.
CLUSTER_PROCESS = """
import asyncio, dataclasses, sys
from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from tests.component.devcluster.kubelets import FAST_WITH_EXECUTOR

async def main():
    config = dataclasses.replace(FAST_WITH_EXECUTOR, task_executor_dir=sys.argv[1])
    settings = SimulationSettings(garbage_collector=False, options={"kubelet": config})
    cluster = DevCluster(port=0, crd_dirs=None, latency=LatencyModel.zero(), simulation=settings)
    await cluster.start()
    print(cluster.url, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_an_executor_dies_with_a_killed_cluster(tmp_path: Path) -> None:
    """SIGKILL to the cluster's process, which stops nothing: the executor dies with it
    (PR_SET_PDEATHSIG), not left listening on its address."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CLUSTER_PROCESS,
        str(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[3],
    )
    pid = None
    try:
        assert process.stdout is not None
        async with asyncio.timeout(WITHIN):
            url = (await process.stdout.readline()).decode().strip()
        async with aiohttp.ClientSession(base_url=url) as http:
            pod = await ready_pod(http, executor_pod("sandbox-0"))
        pid = pid_of(tmp_path, pod["metadata"]["uid"])
        assert pid is not None and alive(pid)
        process.kill()
        await process.wait()
        await until(lambda: not alive(pid), within=WITHIN, interval=0.02)
        assert not await listening(pod["status"]["podIP"])
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)


async def test_a_pod_that_does_not_run_the_executor_is_simulated_as_before(
    cluster: DevCluster, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    pod = await ready_pod(http, plain_pod("web"))
    assert pod["status"]["podIP"].startswith("10.244.")
    assert pod_dir(tmp_path, pod["metadata"]["uid"]) is None


async def test_with_the_feature_off_an_executor_pod_is_simulated_as_before(
    start: StartCluster, tmp_path: Path
) -> None:
    cluster = await start(task_executor_command=None)
    async with aiohttp.ClientSession(base_url=cluster.url) as http:
        pod = await ready_pod(http, executor_pod("sandbox-0"))
    assert pod["status"]["podIP"].startswith("10.244.")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(
    not runnable_module(DEFAULT_TASK_EXECUTOR_MODULE),
    reason=f"python -m {DEFAULT_TASK_EXECUTOR_MODULE} has nothing to run yet (the task executor "
    "is not written, or has no __main__)",
)
async def test_the_real_task_executor_runs_with_the_default_command(
    start: StartCluster, tmp_path: Path
) -> None:
    cluster = await start(task_executor_command=DEFAULT_TASK_EXECUTOR_COMMAND)
    async with aiohttp.ClientSession(base_url=cluster.url) as http:
        pod = await ready_pod(http, executor_pod("sandbox-0"))
        uid, ip = pod["metadata"]["uid"], pod["status"]["podIP"]
        assert await health(ip) == 200
        pid = pid_of(tmp_path, uid)
        assert pid is not None
        async with http.delete(f"{PODS}/sandbox-0") as response:
            assert response.status == 200
        await watch_until(http, PODS, "sandbox-0", lambda p: p is None, within=WITHIN)
    assert not alive(pid)
