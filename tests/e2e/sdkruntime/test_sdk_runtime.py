"""agent-sandbox's SDK, unchanged, through the router on `sandbus up`: commands and files in a
sandbox from a warm pool, as a user runs examples/sdk/.

The pool is examples/sdk/python-sandbox.yaml: agent-sandbox's own SDK quick-start template
(its python-runtime image, readiness probe on 8888, a ``workspace`` volume claim template), so
the development cluster runs a real runtime (devtools/sandboxruntime) for each member, on its
loopback Pod IP. The SDK reaches it through the router (``SandboxDirectConnectionConfig`` on
DIR/router-url) and straight at the Pod IP (``SandboxInClusterConnectionConfig``); the test
checks what it answers, and, from outside, which processes run on this machine:

- ``commands.run("echo hi")`` is ``hi``, exit 0; a command past its ``command_timeout`` is
  reported timed out (exit 124) and is gone; ``files.write`` then ``read`` returns the bytes,
  ``list`` and ``exists`` agree; two sandboxes do not share a directory;
- deleting the sandbox deletes the Sandbox, stops its runtime and what its commands left
  running, and the router then answers 404 for it;
- the router: 404 for a sandbox that does not exist, 503 for one that is not Ready; a Pod of
  any image annotated ``devcluster.sandbus.io/runtime: agent-sandbox`` gets a runtime too,
  whose commands see the container's ``env``.

Skipped without the SDK (``pip install -e '.[sdk]'``).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip(
    "k8s_agent_sandbox",
    reason="the agent-sandbox Python SDK is not installed: pip install -e '.[sdk]'",
)

import requests
from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.models import (
    SandboxConnectionConfig,
    SandboxDirectConnectionConfig,
    SandboxInClusterConnectionConfig,
)
from k8s_agent_sandbox.sandbox import Sandbox
from kubernetes import client as k8s  # a dependency of the SDK
from kubernetes import config as k8s_config

from tests.e2e.claim.sdk import AGENTS, NAMESPACE, POOLS, eventually, get
from tests.e2e.sdkruntime.processes import command_lines, matching, runtimes_on
from tests.e2e.up import kubectl
from tests.support.samples import is_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "sdk" / "python-sandbox.yaml"
POOL = "python-sandbox-pool"
MARKER = "987.654321"  # a background `sleep` of this many seconds, found by its command line
IMAGE = "us-central1-docker.pkg.dev/k8s-staging-images/agent-sandbox/python-runtime-sandbox:latest"
PAYLOAD = bytes(range(256)) * 64 + b"\r\n--boundary-like\r\n\x00"

NOT_READY = f"""
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata:
  name: never-ready
  namespace: {NAMESPACE}
spec:
  podTemplate:
    metadata:
      annotations:
        devcluster.sandbus.io/fail: never-ready
    spec:
      containers:
        - name: python-runtime
          image: {IMAGE}
"""


ANNOTATED = f"""
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata:
  name: annotated
  namespace: {NAMESPACE}
spec:
  podTemplate:
    metadata:
      annotations:
        devcluster.sandbus.io/runtime: agent-sandbox
    spec:
      containers:
        - name: tools
          image: registry.example.com/my-own-image:1
          env:
            - name: GREETING
              value: hello from the container
"""


def _client(
    state: Path, config: SandboxConnectionConfig
) -> tuple[k8s.ApiClient, SandboxClient[Sandbox]]:
    api = k8s_config.new_client_from_config(
        config_file=str(state / "kubeconfig"), persist_config=False
    )
    return api, SandboxClient(connection_config=config, api_client=api)


def _until(what: str, check: Callable[[], bool], tmp_path: Path, timeout: float = 30) -> None:
    eventually(what, lambda: True if check() else None, tmp_path, timeout)


def _route(router: str, sandbox: str, command: str = "true") -> requests.Response:
    headers = {"X-Sandbox-ID": sandbox, "X-Sandbox-Namespace": NAMESPACE, "X-Sandbox-Port": "8888"}
    body = {"command": command}
    return requests.post(f"{router}/execute", json=body, headers=headers, timeout=30)


def _pool_ready(objects: k8s.CustomObjectsApi) -> bool:
    status = (get(objects, POOLS, POOL) or {}).get("status") or {}
    return status.get("readyReplicas") == 2


def _check_commands(sandbox: Sandbox) -> None:
    hi = sandbox.commands.run("echo hi")
    assert (hi.stdout, hi.exit_code, hi.timed_out) == ("hi\n", 0, False), hi
    failed = sandbox.commands.run("echo oops >&2; exit 3")
    assert (failed.stderr, failed.exit_code) == ("oops\n", 3), failed
    started = time.monotonic()
    slow = sandbox.commands.run(
        "echo $$ > victim.pid; echo before; exec sleep 60", command_timeout=1
    )
    assert slow.timed_out and slow.exit_code == 124, slow
    assert slow.stdout == "before\n" and "timed out" in slow.stderr, slow
    assert time.monotonic() - started < 15
    # The killed command is gone (asked inside the sandbox: its pid is the sandbox's own).
    gone = sandbox.commands.run(
        'kill -0 "$(cat victim.pid)" 2>/dev/null && echo alive || echo gone'
    )
    assert gone.stdout == "gone\n", gone


def _check_files(sandbox: Sandbox) -> None:
    sandbox.files.write("data/payload.bin", PAYLOAD)
    assert sandbox.files.read("data/payload.bin") == PAYLOAD
    assert sandbox.files.exists("data/payload.bin")
    assert not sandbox.files.exists("data/missing.bin")
    (entry,) = sandbox.files.list("data")
    assert (entry.name, entry.type, entry.size) == ("payload.bin", "file", len(PAYLOAD))
    top = {e.name: e.type for e in sandbox.files.list(".")}
    assert top.get("data") == "directory", top
    # A file object goes up streamed (a chunked multipart body), once, without retries.
    sandbox.files.write("data/streamed.bin", io.BytesIO(PAYLOAD))
    assert sandbox.files.read("data/streamed.bin") == PAYLOAD
    sandbox.commands.run("rm data/streamed.bin")
    # What a command sees is what the files API wrote: one working directory.
    assert sandbox.commands.run("wc -c < data/payload.bin").stdout.strip() == str(len(PAYLOAD))


def test_the_sdk_runs_commands_and_files_through_the_router(
    sandbus_up: Path, tmp_path: Path
) -> None:
    applied = kubectl(sandbus_up, tmp_path, "apply", "-f", str(EXAMPLE))
    assert applied.returncode == 0, applied.stderr.decode()
    router = (sandbus_up / "router-url").read_text().strip()
    banner = (tmp_path / "up.log").read_text()
    assert f"router       {router}" in banner, banner
    assert "sandbox commands run on this machine" in banner

    api, client = _client(sandbus_up, SandboxDirectConnectionConfig(api_url=router))
    objects = k8s.CustomObjectsApi(api)
    with api, client:
        _until(f"{POOL} has 2 ready members", lambda: _pool_ready(objects), tmp_path, 60)
        sandbox = client.create_sandbox(POOL, namespace=NAMESPACE, sandbox_ready_timeout=60)
        ip = sandbox.get_pod_ip()
        assert ip is not None and ip.startswith("127."), ip
        # Its processes, by pid: after the deletion the pool's new member may get the same IP.
        runtime = runtimes_on(ip)
        assert runtime, f"no runtime process on {ip}"

        _check_commands(sandbox)
        _check_files(sandbox)
        started = sandbox.commands.run(f"nohup sleep {MARKER} >/dev/null 2>&1 & echo started")
        assert started.stdout == "started\n", started
        _until("the background command runs", lambda: bool(matching("sleep", MARKER)), tmp_path)

        _check_pod_ip_connection(sandbus_up, tmp_path)

        assert sandbox.claim_name is not None
        name = sandbox.sandbox_id
        client.delete_sandbox(sandbox.claim_name, namespace=NAMESPACE)
        _until("the Sandbox is deleted", lambda: get(objects, AGENTS, name) is None, tmp_path)
        _until("its runtime stopped", lambda: not runtime.keys() & command_lines(), tmp_path)
        _until("its commands stopped", lambda: not matching("sleep", MARKER), tmp_path)
        assert _route(router, name).status_code == 404


def _check_pod_ip_connection(state: Path, tmp_path: Path) -> None:
    """The pool's other member, straight at its Pod IP: its own, empty, directory."""
    api, client = _client(state, SandboxInClusterConnectionConfig())
    with api, client:
        other = client.create_sandbox(POOL, namespace=NAMESPACE, sandbox_ready_timeout=60)
        try:
            assert other.commands.run("echo hi").stdout == "hi\n"
            assert not other.files.exists("data/payload.bin")
        finally:
            assert other.claim_name is not None
            client.delete_sandbox(other.claim_name, namespace=NAMESPACE)


def test_the_router_answers_404_and_503_and_an_annotated_pod_gets_a_runtime(
    sandbus_up: Path, tmp_path: Path
) -> None:
    router = (sandbus_up / "router-url").read_text().strip()
    missing = _route(router, "no-such-sandbox")
    assert missing.status_code == 404
    assert missing.json()["message"] == f"sandbox {NAMESPACE}/no-such-sandbox not found"

    for manifest in (NOT_READY, ANNOTATED):
        applied = kubectl(sandbus_up, tmp_path, "apply", "-f", "-", input=manifest)
        assert applied.returncode == 0, applied.stderr.decode()
    api = k8s_config.new_client_from_config(
        config_file=str(sandbus_up / "kubeconfig"), persist_config=False
    )
    with api:
        objects = k8s.CustomObjectsApi(api)
        _until("never-ready exists", lambda: bool(get(objects, AGENTS, "never-ready")), tmp_path)
        answer = _route(router, "never-ready")
        assert answer.status_code == 503, answer.text
        assert "is not Ready" in answer.json()["message"]
        # Without the header the router cannot know the sandbox: a 400 that says so.
        assert requests.get(f"{router}/", timeout=10).status_code == 400

        # Any image, asked for by annotation; its commands see the container's env.
        _until("annotated is Ready", lambda: is_ready(get(objects, AGENTS, "annotated")), tmp_path)
    greeting = _route(router, "annotated", 'echo "$GREETING in $PWD"')
    assert greeting.status_code == 200, greeting.text
    said = greeting.json()["stdout"]
    assert said.startswith("hello from the container in /") and said.endswith("/workspace\n")
