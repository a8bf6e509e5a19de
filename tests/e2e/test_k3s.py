"""End to end on a real Kubernetes: K3s in a container, where a Docker engine answers, and
skipped with the reason where none does (see tests/e2e/conftest.py).

The CRDs are applied with kubectl as deploy/README.md says. The watcher and the sandbox worker run
as their own processes (``sandbus run``) on this machine against K3s's API server, with an
embedded nats-server. A Sandbox then becomes Ready through them, and its Pod is a real one,
scheduled by K3s's scheduler and started by its kubelet and containerd. The development cluster
stands in for exactly this everywhere else; what it simulates (the Pod's start, its IP, its
readiness), K3s does.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from devtools.natsd import NatsServer
from tests.e2e.services import log_tails, service
from tests.unit.deploy.manifests import CRDS

pytestmark = pytest.mark.slow

KUBECTL = str(Path(sys.executable).parent / "kubectl")
SANDBOX = """
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata:
  name: on-k3s
  namespace: default
spec:
  podTemplate:
    spec:
      containers:
        - name: main
          image: busybox:1.36
          command: ["sleep", "3600"]
"""


async def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    """kubectl against K3s; its output, and it must succeed."""
    environment = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
    process = await asyncio.create_subprocess_exec(
        KUBECTL,
        f"--kubeconfig={kubeconfig}",
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment,
    )
    out, err = await process.communicate(stdin.encode() if stdin is not None else None)
    assert process.returncode == 0, f"kubectl {' '.join(args)}: {err.decode()}"
    return out.decode()


@pytest.mark.timeout(600)
async def test_a_sandbox_becomes_ready_on_k3s(k3s_kubeconfig: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    await kubectl(k3s_kubeconfig, "apply", "--server-side", "-f", str(CRDS))
    await kubectl(
        k3s_kubeconfig,
        "wait",
        "--for=condition=Established",
        "customresourcedefinitions",
        "--all",
        "--timeout=60s",
    )
    async with NatsServer(store_dir=tmp_path / "nats") as nats_server:
        url = nats_server.url
        async with (
            service("watcher", url, k3s_kubeconfig, logs),
            service("sandbox", url, k3s_kubeconfig, logs),
        ):
            await kubectl(k3s_kubeconfig, "apply", "-f", "-", stdin=SANDBOX)
            try:
                # The image is pulled the first time: minutes on a slow network.
                await kubectl(
                    k3s_kubeconfig,
                    "wait",
                    "--for=condition=Ready",
                    "sandbox/on-k3s",
                    "--timeout=300s",
                )
            except AssertionError as error:
                raise AssertionError(f"{error}\n{log_tails(logs)}") from None
            pod = await kubectl(
                k3s_kubeconfig, "get", "pod", "on-k3s", "-o", "jsonpath={.status.phase}"
            )
            assert pod == "Running"
