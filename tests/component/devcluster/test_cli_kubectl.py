"""``sandbus devcluster`` as a process, and kubectl against the development cluster.

kubectl is the second client the stand-in must satisfy (discovery, OpenAPI v3 for field
validation, strategic merge from its compiled-in types, watch). These are smoke tests of the
paths a person takes; a fuller kubectl suite lives elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from devtools.cluster import DevCluster
from tests.component.devcluster.samples import widget

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


async def kubectl(kubeconfig: Path, *args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    assert KUBECTL is not None
    process = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        out, err = await process.communicate(stdin)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.fixture
def kubeconfig(cluster: DevCluster, tmp_path: Path) -> Path:
    return cluster.write_kubeconfig(tmp_path / "kubeconfig")


async def test_kubectl_apply_get_patch_scale_delete(kubeconfig: Path) -> None:
    """kubectl apply (client-side, then --server-side), get -o json, patch, scale, delete."""
    manifest = yaml.safe_dump(widget("w1", size=3, replicas=2)).encode()
    code, out, err = await kubectl(kubeconfig, "apply", "-f", "-", stdin=manifest)
    assert code == 0, err
    assert out.strip() == "widget.example.com/w1 created"
    code, out, err = await kubectl(kubeconfig, "get", "wd", "w1", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["spec"] == {"size": 3, "replicas": 2}
    code, out, err = await kubectl(
        kubeconfig, "patch", "widget", "w1", "--type", "merge", "-p", '{"spec":{"size":4}}'
    )
    assert code == 0, err
    code, out, err = await kubectl(kubeconfig, "scale", "widget", "w1", "--replicas", "5")
    assert code == 0, err
    code, out, err = await kubectl(
        kubeconfig, "get", "widget", "w1", "-o", "jsonpath={.spec.replicas} {.metadata.generation}"
    )
    assert out == "5 3"
    code, out, err = await kubectl(kubeconfig, "apply", "--server-side", "-f", "-", stdin=manifest)
    assert code != 0
    assert "conflict" in err.lower()
    code, out, err = await kubectl(kubeconfig, "delete", "widget", "w1")
    assert code == 0, err
    code, out, err = await kubectl(kubeconfig, "get", "widgets")
    assert "No resources found" in err


async def test_kubectl_pods_and_api_resources(kubeconfig: Path) -> None:
    """kubectl api-resources, run-style pod create with strategic merge patch, label, delete."""
    code, out, err = await kubectl(kubeconfig, "api-resources")
    assert code == 0, err
    assert "widgets" in out and "pods" in out and "jobs" in out
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p1"},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]},
    }
    code, out, err = await kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(pod).encode())
    assert code == 0, err
    code, out, err = await kubectl(kubeconfig, "label", "pod", "p1", "tier=web")
    assert code == 0, err
    code, out, err = await kubectl(kubeconfig, "get", "pods", "-l", "tier=web", "-o", "name")
    assert out.strip() == "pod/p1"
    code, out, err = await kubectl(kubeconfig, "delete", "pod", "p1", "--wait=false")
    assert code == 0, err


async def test_kubectl_get_watch(cluster: DevCluster, kubeconfig: Path) -> None:
    """kubectl get -w sees changes until its request timeout."""
    watcher = asyncio.create_task(
        kubectl(kubeconfig, "get", "widgets", "-w", "--request-timeout=2s", "-o", "name")
    )
    async with asyncio.timeout(5):
        await cluster.watches.wait_for(resource="widgets")
    manifest = yaml.safe_dump(widget("w1")).encode()
    await kubectl(kubeconfig, "apply", "-f", "-", stdin=manifest)
    _code, out, _err = await watcher
    assert "widget.example.com/w1" in out


async def test_cli_serves_until_sigterm_and_exits_zero(tmp_path: Path, crd_dir: Path) -> None:
    """`sandbus devcluster --port 0 --kubeconfig K` writes K, serves, and exits 0 on SIGTERM;
    the kubeconfig names the advertised host; sandbus's CRDs are served beside --crds."""
    kubeconfig = tmp_path / "kubeconfig"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli",
        "devcluster",
        "--port",
        "0",
        "--kubeconfig",
        str(kubeconfig),
        "--crds",
        str(crd_dir),
        "--advertise-host",
        "localhost",
        "--write-latency-ms",
        "1",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    try:
        assert process.stdout is not None
        async with asyncio.timeout(20):
            banner = await process.stdout.readline()
        assert banner.startswith(b"devcluster serving at http://localhost:")
        assert b"(listening on 127.0.0.1:" in banner
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        assert server.startswith("http://localhost:")
        async with aiohttp.ClientSession(server) as http:
            for group_version in ("example.com/v1", "agents.x-k8s.io/v1beta1"):
                async with http.get(f"/apis/{group_version}") as response:
                    assert response.status == 200, group_version
    finally:
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            await process.wait()
    assert process.returncode == 0
