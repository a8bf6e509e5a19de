"""``pods/exec`` against a real in-process DevCluster with its simulated kubelet: the
WebSocket protocol a client speaks (sandbus's own :meth:`KubeApi.exec`, raw aiohttp, and the
``kubectl`` binary), the refusals a real API server and kubelet give, and the simulated runtime:
``kill 1`` ends the container's PID 1 and the kubelet starts it again under a new containerID
(devtools/cluster/http/podexec.py, and the ``exited`` stage of kubelet/stages.py)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from devtools.cluster.controllers.kubelet.config import FAIL_ANNOTATION, KubeletConfig
from devtools.cluster.http.podexec import EXEC_EXIT_CODE_ANNOTATION
from events.envelope import ObjectKey
from services.runtime.cache import ObjectCache
from services.runtime.kube import KubeApi, KubeError
from services.runtime.reconcile.actions import Exec, Plan
from services.runtime.reconcile.executing import RUNTIME_EXECUTORS, ExecutionContext, execute
from tests.component.devcluster.rest import Json, create, watch_until
from tests.support.samples import is_ready

FAST = KubeletConfig(
    nodes=1,
    schedule_delay=0.01,
    start_delay=0.03,
    pod_ready_delay=0.05,
    termination_delay=0.03,
    image_pull_backoff_delay=0.03,
)
NS = "default"
PODS = f"/api/v1/namespaces/{NS}/pods"
KUBECTL = Path(sys.executable).parent / "kubectl"


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    settings = SimulationSettings(garbage_collector=False, options={"kubelet": FAST})
    async with DevCluster(
        port=0, crd_dirs=None, latency=LatencyModel.zero(), simulation=settings
    ) as running:
        yield running


@pytest.fixture
async def http(cluster: DevCluster) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=cluster.url) as session:
        yield session


@pytest.fixture
async def kube(cluster: DevCluster, tmp_path: Path) -> AsyncIterator[KubeApi]:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    async with k8s.ApiClient(configuration) as client:
        yield KubeApi(client)


def pod(name: str = "p", *, annotations: dict[str, str] | None = None, **spec: Any) -> Json:
    spec.setdefault(
        "containers",
        [{"name": "main", "image": "nginx:1.25"}, {"name": "sidecar", "image": "envoy:1.30"}],
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": spec,
    }


def container(obj: Json | None, name: str) -> Json:
    statuses = ((obj or {}).get("status") or {}).get("containerStatuses") or []
    found: Json = next(s for s in statuses if s["name"] == name)
    return found


async def running_pod(http: aiohttp.ClientSession, body: Json) -> Json:
    await create(http, PODS, body)
    name = body["metadata"]["name"]
    return (await watch_until(http, PODS, name, is_ready))[-1] or {}


async def current(http: aiohttp.ClientSession, name: str) -> Json:
    async with http.get(f"{PODS}/{name}") as response:
        found: Json = await response.json()
        return found


# --- the simulated runtime -----------------------------------------------------------------


async def test_kill_1_restarts_the_container(http: aiohttp.ClientSession, kube: KubeApi) -> None:
    """``kill 1`` in ``main``: exit 0, no output; the exit shows in the status (terminated, not
    Ready), then the kubelet starts ``main`` again under a new containerID with restartCount 1
    and the exit as lastState, and the Pod is Ready again. ``sidecar`` is untouched."""
    before = await running_pod(http, pod())
    old_main, old_sidecar = container(before, "main"), container(before, "sidecar")

    result = await kube.exec(NS, "p", "main", ["kill", "1"])
    assert (result.stdout, result.stderr, result.exit_code, result.message) == ("", "", 0, "")
    assert result.succeeded

    exited = await current(http, "p")  # written before the exec answered
    terminated = container(exited, "main")["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    assert terminated["containerID"] == old_main["containerID"]
    assert not is_ready(exited) and not container(exited, "main")["ready"]
    assert container(exited, "sidecar") == old_sidecar

    def restarted(obj: Json | None) -> bool:
        return is_ready(obj) and container(obj, "main")["restartCount"] == 1

    after = (await watch_until(http, PODS, "p", restarted))[-1]
    main = container(after, "main")
    assert main["containerID"] != old_main["containerID"]
    assert main["containerID"].startswith("containerd://")
    assert "running" in main["state"] and main["ready"] and main["started"]
    assert main["lastState"] == {"terminated": terminated}
    assert container(after, "sidecar")["containerID"] == old_sidecar["containerID"]
    assert container(after, "sidecar")["restartCount"] == 0


@pytest.mark.parametrize(
    ("command", "exit_code", "reason"),
    [
        (["kill", "-TERM", "1"], 0, "Completed"),
        (["kill", "-s", "SIGTERM", "1"], 0, "Completed"),
        (["/bin/sh", "-c", "kill 1"], 0, "Completed"),
        (["kill", "-9", "1"], 137, "Error"),
    ],
)
async def test_signals_to_pid_1(
    http: aiohttp.ClientSession,
    kube: KubeApi,
    command: list[str],
    exit_code: int,
    reason: str,
) -> None:
    """The spellings of the restart command: SIGTERM lets PID 1 exit 0, SIGKILL ends it with
    137; either way the container comes back under a new id."""
    old = container(await running_pod(http, pod()), "main")["containerID"]
    assert (await kube.exec(NS, "p", "main", command)).exit_code == 0

    def restarted(obj: Json | None) -> bool:
        return container(obj, "main")["restartCount"] == 1 and is_ready(obj)

    main = container((await watch_until(http, PODS, "p", restarted))[-1], "main")
    assert main["containerID"] != old
    assert main["lastState"]["terminated"]["exitCode"] == exit_code
    assert main["lastState"]["terminated"]["reason"] == reason


async def test_kill_1_under_restart_policy_never_finishes_the_pod(
    http: aiohttp.ClientSession, kube: KubeApi
) -> None:
    """restartPolicy Never: the kubelet does not start the container again; once no container
    runs, the Pod is finished (Succeeded: every one exited 0)."""
    await running_pod(
        http, pod(restartPolicy="Never", containers=[{"name": "main", "image": "nginx:1.25"}])
    )
    assert (await kube.exec(NS, "p", "main", ["kill", "1"])).succeeded

    def finished(obj: Json | None) -> bool:
        return ((obj or {}).get("status") or {}).get("phase") == "Succeeded"

    done = (await watch_until(http, PODS, "p", finished))[-1]
    assert container(done, "main")["restartCount"] == 0
    assert container(done, "main")["state"]["terminated"]["exitCode"] == 0


async def test_an_ordinary_command_exits_0_and_changes_nothing(
    http: aiohttp.ClientSession, kube: KubeApi
) -> None:
    """Any other command (``kill`` of another pid included): exit 0, no output, no write."""
    before = await running_pod(http, pod())
    for command in (["ls", "-l", "/"], ["kill", "42"], ["kill", "-HUP", "1"]):
        result = await kube.exec(NS, "p", "sidecar", command)
        assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
    after = await current(http, "p")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_exit_code_injected_by_annotation(http: aiohttp.ClientSession, kube: KubeApi) -> None:
    """``devcluster.sandbus.io/exec-exit-code: "3"``: every exec exits 3, says so on stderr and
    does nothing; the exit code comes back as client-go reads it (NonZeroExitCode)."""
    before = await running_pod(http, pod(annotations={EXEC_EXIT_CODE_ANNOTATION: "3"}))
    result = await kube.exec(NS, "p", "main", ["kill", "1"])
    assert result.exit_code == 3 and not result.succeeded
    assert result.message == (
        "command terminated with non-zero exit code: error executing command [kill 1], exit code 3"
    )
    assert result.stderr == f"devcluster: exit code 3 injected by {EXEC_EXIT_CODE_ANNOTATION}\n"
    after = await current(http, "p")
    assert container(after, "main") == container(before, "main")


# --- refusals ------------------------------------------------------------------------------


async def test_unknown_container_is_a_bad_request(
    http: aiohttp.ClientSession, kube: KubeApi
) -> None:
    """The API server's ``streamLocation``: 400 ``container X is not valid for pod P``."""
    await running_pod(http, pod())
    with pytest.raises(KubeError) as refused:
        await kube.exec(NS, "p", "nope", ["kill", "1"])
    assert (refused.value.status, refused.value.reason) == (400, "BadRequest")
    assert refused.value.message == "container nope is not valid for pod p"


async def test_missing_pod_is_not_found(kube: KubeApi) -> None:
    with pytest.raises(KubeError) as refused:
        await kube.exec(NS, "ghost", "main", ["kill", "1"])
    assert refused.value.not_found
    assert refused.value.message == 'pods "ghost" not found'


async def test_a_pod_not_running_is_refused(http: aiohttp.ClientSession, kube: KubeApi) -> None:
    """Not bound to a node: the API server's 400 ``pod P does not have a host assigned``.
    Bound but its container not running (here its image never pulls): the kubelet's 500
    ``container not found ("main")``, passed through as text."""
    await create(http, PODS, pod("unbound", annotations={FAIL_ANNOTATION: "unschedulable"}))
    with pytest.raises(KubeError) as unbound:
        await kube.exec(NS, "unbound", "main", ["kill", "1"])
    assert (unbound.value.status, unbound.value.reason) == (400, "BadRequest")
    assert unbound.value.message == "pod unbound does not have a host assigned"

    await create(http, PODS, pod("pulling", annotations={FAIL_ANNOTATION: "image-pull"}))

    def backing_off(obj: Json | None) -> bool:
        statuses = ((obj or {}).get("status") or {}).get("containerStatuses") or [{}]
        waiting = (statuses[0].get("state") or {}).get("waiting") or {}
        return bool(waiting.get("reason") == "ImagePullBackOff")

    await watch_until(http, PODS, "pulling", backing_off)
    with pytest.raises(KubeError) as waiting:
        await kube.exec(NS, "pulling", "main", ["kill", "1"])
    assert waiting.value.status == 500
    assert waiting.value.message == 'container not found ("main")'


async def test_container_must_be_named_when_there_are_several(
    http: aiohttp.ClientSession,
) -> None:
    """No ``container``: the only one is taken; of several the API server names the choices."""
    await running_pod(http, pod())
    url = f"{PODS}/p/exec?command=true&stdout=true"
    async with http.get(url) as response:
        assert response.status == 400
        body = await response.json()
    assert body["reason"] == "BadRequest"
    assert body["message"] == (
        "a container name must be specified for pod p, choose one of: [main sidecar]"
    )


# --- the wire ------------------------------------------------------------------------------


async def test_the_v4_stream_as_the_kubelet_frames_it(http: aiohttp.ClientSession) -> None:
    """v4.channel.k8s.io: an empty stdout frame first, then the Status on channel 3 as Go
    marshals it, then a normal close; the command's argv comes as repeated ``command``."""
    await running_pod(http, pod())
    query = [("container", "main"), ("command", "ls"), ("command", "/"), ("stdout", "true")]
    frames = []
    async with http.ws_connect(
        f"{PODS}/p/exec", params=query, protocols=("v4.channel.k8s.io",)
    ) as ws:
        assert ws.protocol == "v4.channel.k8s.io"
        async for message in ws:
            assert message.type is aiohttp.WSMsgType.BINARY
            frames.append(message.data)
        assert ws.close_code == 1000
    assert frames == [b"\x01", b'\x03{"metadata":{},"status":"Success"}']


async def test_what_is_not_a_websocket_exec_is_refused(http: aiohttp.ClientSession) -> None:
    """SPDY (kubectl's fallback) and plain requests get a 400; a WebSocket with no subprotocol
    in common gets the kubelet's 403."""
    await running_pod(http, pod())
    url = f"{PODS}/p/exec?container=main&command=ls&stdout=true"
    spdy = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}
    async with http.post(url, headers=spdy) as response:
        assert response.status == 400
        assert "serves exec over WebSocket only" in await response.text()
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(url, protocols=("channel.k8s.io",))
    assert refused.value.status == 403
    async with http.put(url) as response:
        assert response.status == 405


async def test_discovery_lists_pods_exec(http: aiohttp.ClientSession) -> None:
    async with http.get("/api/v1") as response:
        resources = {r["name"]: r for r in (await response.json())["resources"]}
    assert resources["pods/exec"]["kind"] == "PodExecOptions"
    assert resources["pods/exec"]["verbs"] == ["create", "get"]


# --- kubectl -------------------------------------------------------------------------------


async def kubectl(cluster: DevCluster, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG" and "proxy" not in k.lower()}
    env["HOME"] = str(home)
    process = await asyncio.create_subprocess_exec(
        str(KUBECTL),
        f"--kubeconfig={kubeconfig}",
        f"--cache-dir={tmp_path / 'kube-cache'}",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.skipif(not KUBECTL.exists(), reason=f"no kubectl at {KUBECTL}")
async def test_kubectl_exec_kill_1(
    cluster: DevCluster, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """``kubectl exec p -c main -- kill 1``: kubectl (1.30 and later) execs over WebSocket
    (v5.channel.k8s.io) and falls back to SPDY only when the upgrade fails; the command
    succeeds and the container restarts. A non-zero exit is kubectl's own exit code."""
    old = container(await running_pod(http, pod()), "main")["containerID"]
    assert await kubectl(cluster, tmp_path, "exec", "p", "-c", "main", "--", "kill", "1") == (
        0,
        "",
        "",
    )

    def restarted(obj: Json | None) -> bool:
        return container(obj, "main")["restartCount"] == 1 and is_ready(obj)

    after = (await watch_until(http, PODS, "p", restarted))[-1]
    assert container(after, "main")["containerID"] != old

    patch = {"metadata": {"annotations": {EXEC_EXIT_CODE_ANNOTATION: "7"}}}
    async with http.patch(
        f"{PODS}/p",
        data=json.dumps(patch),
        headers={"Content-Type": "application/merge-patch+json"},
    ) as response:
        assert response.status == 200
    code, out, err = await kubectl(cluster, tmp_path, "exec", "p", "-c", "main", "--", "true")
    assert out == ""
    assert code == 7
    assert f"injected by {EXEC_EXIT_CODE_ANNOTATION}" in err
    assert "command terminated with exit code 7" in err


@pytest.mark.skipif(not KUBECTL.exists(), reason=f"no kubectl at {KUBECTL}")
async def test_a_shell_exit_code_is_the_exec_exit_code(
    cluster: DevCluster, http: aiohttp.ClientSession, kube: KubeApi, tmp_path: Path
) -> None:
    """``sh -c 'exit 3'``: the status channel carries NonZeroExitCode with the ExitCode cause
    "3", as the kubelet writes it, so kubectl exits 3 and KubeApi.exec sees 3; ``false`` exits
    1; ``exit 0`` and ``exit`` succeed. Nothing changes in the Pod."""
    before = await running_pod(http, pod())
    code, out, err = await kubectl(
        cluster, tmp_path, "exec", "p", "-c", "main", "--", "sh", "-c", "exit 3"
    )
    assert (code, out) == (3, "")
    assert "command terminated with exit code 3" in err
    result = await kube.exec(NS, "p", "main", ["sh", "-c", "exit 3"])
    assert (result.exit_code, result.succeeded) == (3, False)
    assert result.message == (
        "command terminated with non-zero exit code: error executing command "
        "[sh -c exit 3], exit code 3"
    )
    assert (
        await kube.exec(NS, "p", "main", ["/bin/bash", "-c", "echo hi\nexit 300"])
    ).exit_code == 44
    assert (await kube.exec(NS, "p", "main", ["false"])).exit_code == 1
    for command in (["sh", "-c", "exit 0"], ["sh", "-c", "exit"], ["true"]):
        assert (await kube.exec(NS, "p", "main", command)).exit_code == 0
    assert await kubectl(
        cluster, tmp_path, "exec", "p", "-c", "main", "--", "sh", "-c", "exit 0"
    ) == (
        0,
        "",
        "",
    )
    after = await current(http, "p")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_the_exec_action_reports_its_outcome_as_a_note(
    http: aiohttp.ClientSession, kube: KubeApi
) -> None:
    """The runtime's ``Exec`` action (what the restart recycler plans): a command that ran is
    noted with its exit, a refused exec is noted too, and neither fails the plan."""
    await running_pod(http, pod(annotations={EXEC_EXIT_CODE_ANNOTATION: "3"}))
    target = ObjectKey("Pod", NS, "p")
    done = await execute(
        Plan(
            actions=(
                Exec(target, "main", ("true",)),
                Exec(target, "nowhere", ("kill", "1")),
            )
        ),
        RUNTIME_EXECUTORS,
        ExecutionContext(api=kube, cache=ObjectCache()),
    )
    assert done.error is None
    assert done.outcomes[0].note == "exec in main: exit 3"
    assert done.outcomes[1].note.startswith("exec in nowhere refused:")
    assert "not valid for pod" in done.outcomes[1].note
