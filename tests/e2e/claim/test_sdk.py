"""The published agent-sandbox Python SDK, unchanged, against `sandbus up`.

PyPI ``k8s-agent-sandbox`` (the ``sdk`` extra, docs/agent-sandbox.md §8) is what agents use to
get a sandbox: ``SandboxClient.create_sandbox(warmpool)`` creates a SandboxClaim and watches it
(``fieldSelector=metadata.name=<claim>``, from the create response's resourceVersion) until one
event shows ``status.sandbox.name`` and ``Ready=True`` together; the handle then GETs the Sandbox
for its status and Pod IP; ``delete_sandbox`` DELETEs the claim and leaves the rest to the
garbage collector. Here it runs against a real ``sandbus up`` (embedded NATS, development
cluster, every service): a pool of two warm sandboxes, one claimed through the SDK, read, and
deleted. The SDK never connects to the sandbox itself (no router, no kubectl port-forward): its
connection is lazy and only commands and files would open one.

The test is skipped when the SDK is not installed (``pip install -e '.[sdk]'``; ``dev.py`` and
``.ci/run`` install it with the ``dev`` extra).
"""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path
from typing import cast

import pytest

pytest.importorskip(
    "k8s_agent_sandbox",
    reason="the agent-sandbox Python SDK is not installed: pip install -e '.[sdk]'",
)

from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.sandbox import Sandbox
from kubernetes import client as k8s  # a dependency of the SDK
from kubernetes import config as k8s_config

from api.keys import (
    CREATED_BY_PYTHON_CLIENT,
    LABEL_CLAIM_UID,
    LABEL_CREATED_BY,
    LABEL_LAUNCH_TYPE,
    LABEL_WARM_POOL_SANDBOX,
    LAUNCH_TYPE_WARM,
)
from api.objects import Json
from tests.e2e.claim.sdk import (
    AGENTS,
    CLAIMS,
    NAMESPACE,
    POOLS,
    eventually,
    get,
    log_tail,
)
from tests.e2e.up import kubectl
from tests.support.samples import is_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


POOL = "sdk-pool"
REPLICAS = 2

MANIFESTS = f"""
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: sdk-python
  namespace: {NAMESPACE}
spec:
  podTemplate:
    spec:
      containers:
        - name: runtime
          image: registry.example.com/sandboxes/python-runtime:3.12
          ports:
            - containerPort: 8888
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata:
  name: {POOL}
  namespace: {NAMESPACE}
spec:
  replicas: {REPLICAS}
  sandboxTemplateRef:
    name: sdk-python
"""


def _pool_members(objects: k8s.CustomObjectsApi) -> tuple[Json, list[Json]]:
    """The pool and the Sandboxes its status selector selects."""
    pool = get(objects, POOLS, POOL)
    assert pool is not None, f"SandboxWarmPool {POOL} is gone"
    selector = (pool.get("status") or {}).get("selector")
    if not selector:
        return pool, []
    listed = cast(
        Json,
        objects.list_namespaced_custom_object(
            *AGENTS[:2], NAMESPACE, AGENTS[2], label_selector=selector
        ),
    )
    return pool, list(listed["items"])


def _pool_state(objects: k8s.CustomObjectsApi) -> str:
    pool, members = _pool_members(objects)
    ready = {m["metadata"]["name"]: is_ready(m) for m in members}
    return f"status {pool.get('status')}, members (name: Ready) {ready}"


def _ready_pool(objects: k8s.CustomObjectsApi) -> set[str] | None:
    """The names of the pool's members once the pool is Ready as the SDK's own e2e framework
    sees it (``status.readyReplicas == spec.replicas``) and every member is Ready."""
    pool, members = _pool_members(objects)
    status = pool.get("status") or {}
    if status.get("replicas") != REPLICAS or status.get("readyReplicas") != REPLICAS:
        return None
    if len(members) != REPLICAS or not all(is_ready(m) for m in members):
        return None
    return {m["metadata"]["name"] for m in members}


def _pod(core: k8s.CoreV1Api, name: str) -> k8s.V1Pod | None:
    try:
        return core.read_namespaced_pod(name, NAMESPACE)
    except k8s.ApiException as error:
        if error.status == 404:
            return None
        raise


def test_the_sdk_claims_a_warm_sandbox_reads_it_and_deletes_it(
    sandbus_up: Path, kube: k8s.ApiClient, tmp_path: Path
) -> None:
    objects = k8s.CustomObjectsApi(kube)
    core = k8s.CoreV1Api(kube)

    applied = kubectl(sandbus_up, tmp_path, "apply", "-f", "-", input=MANIFESTS)
    assert applied.returncode == 0, applied.stderr.decode()

    def pool_state() -> str:
        return _pool_state(objects)

    members = eventually(f"{POOL} Ready", lambda: _ready_pool(objects), tmp_path, 90, pool_state)

    # The SDK as a user points it at a kubeconfig file: its own ApiClient (K8sHelper would
    # otherwise try the in-cluster config, then $KUBECONFIG as read when `kubernetes` was
    # imported). The default connection config (a kubectl tunnel to the router) stays unused.
    sdk_api = k8s_config.new_client_from_config(
        config_file=str(sandbus_up / "kubeconfig"), persist_config=False
    )
    sdk: SandboxClient[Sandbox] = SandboxClient(api_client=sdk_api)
    with sdk_api, sdk:
        started = time.monotonic()
        try:
            sandbox = sdk.create_sandbox(POOL, namespace=NAMESPACE, sandbox_ready_timeout=60)
        except Exception as error:
            raise AssertionError(
                f"create_sandbox({POOL!r}) failed: {type(error).__name__}: {error}\n"
                + log_tail(tmp_path)
            ) from error
        claim_name = sandbox.claim_name
        assert claim_name is not None
        print(f"create_sandbox: {time.monotonic() - started:.2f}s ({sandbox.sandbox_id})")

        # Adopted warm: one of the pool's Ready members, under a name of the pool's, not the
        # claim's.
        assert sandbox.sandbox_id in members, (sandbox.sandbox_id, members)
        claim = get(objects, CLAIMS, claim_name)
        assert claim is not None
        assert claim["status"]["sandbox"]["name"] == sandbox.sandbox_id
        assert is_ready(claim), claim["status"]
        adopted = get(objects, AGENTS, sandbox.sandbox_id)
        assert adopted is not None
        labels = adopted["metadata"].get("labels") or {}
        assert labels.get(LABEL_LAUNCH_TYPE) == LAUNCH_TYPE_WARM, labels
        assert labels.get(LABEL_CLAIM_UID) == claim["metadata"]["uid"], labels
        assert labels.get(LABEL_CREATED_BY) == CREATED_BY_PYTHON_CLIENT, labels
        assert LABEL_WARM_POOL_SANDBOX not in labels, labels
        controllers = [
            o for o in adopted["metadata"].get("ownerReferences") or [] if o.get("controller")
        ]
        assert [(o["kind"], o["name"], o["uid"]) for o in controllers] == [
            ("SandboxClaim", claim_name, claim["metadata"]["uid"])
        ], adopted["metadata"].get("ownerReferences")

        # What the handle reads from the Sandbox.
        state, message = sandbox.status()
        assert state == "SandboxReady", (state, message)
        pod_ip = sandbox.get_pod_ip()
        assert pod_ip is not None
        ipaddress.ip_address(pod_ip)
        pod_name = sandbox.get_pod_name()
        pod = _pod(core, pod_name)
        assert pod is not None, f"no Pod {pod_name}"
        assert pod.status is not None
        assert pod_ip in [entry.ip for entry in pod.status.pod_ips or []], pod.status

        # Re-attaching by claim name resolves the same Sandbox; the claim is listed.
        assert sdk.get_sandbox(claim_name, namespace=NAMESPACE).sandbox_id == sandbox.sandbox_id
        created_by = f"{LABEL_CREATED_BY}={CREATED_BY_PYTHON_CLIENT}"
        assert sdk.list_all_sandboxes(NAMESPACE, label_selector=created_by) == [claim_name]

        # delete_sandbox logs and swallows errors, so its effect is checked on the cluster.
        sdk.delete_sandbox(claim_name, namespace=NAMESPACE)
        assert sdk.list_active_sandboxes() == []

    def left() -> list[str]:
        return [
            what
            for what, present in (
                (f"SandboxClaim/{claim_name}", get(objects, CLAIMS, claim_name)),
                (f"Sandbox/{sandbox.sandbox_id}", get(objects, AGENTS, sandbox.sandbox_id)),
                (f"Pod/{pod_name}", _pod(core, pod_name)),
            )
            if present is not None
        ]

    eventually(
        "the claim, its Sandbox and its Pod deleted",
        lambda: None if left() else True,
        tmp_path,
        60,
        left,
    )

    # The adopted Sandbox left the pool, which fills itself up again with new members.
    refilled = eventually(
        "the pool refilled", lambda: _ready_pool(objects), tmp_path, 90, pool_state
    )
    assert sandbox.sandbox_id not in refilled, refilled
