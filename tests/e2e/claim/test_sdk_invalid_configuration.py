"""The published SDK gives up at once on a claim whose Sandbox cannot be configured.

``k8s-agent-sandbox`` 1.0.8 watches the claim it creates and raises
``SandboxClaimFailedError`` as soon as the claim's Ready reason is a terminal one, upstream's
``InvalidConfiguration`` among them (v1.0.4). Against a real ``sandbus up``, two ways there:

- the template describes a Pod with no container: the claim's cold Sandbox is created, the
  sandbox worker marks it Ready=False/InvalidConfiguration, and the claim forwards that;
- the template asks for a Service and the claim's name (which a cold Sandbox takes) is longer
  than 63 characters: the CRD would refuse that Sandbox, so the claim reports the reason itself
  and creates nothing.

Both must fail well within the SDK's timeout, not by it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip(
    "k8s_agent_sandbox",
    reason="the agent-sandbox Python SDK is not installed: pip install -e '.[sdk]'",
)

from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.exceptions import SandboxClaimFailedError
from k8s_agent_sandbox.sandbox import Sandbox
from kubernetes import client as k8s  # a dependency of the SDK
from kubernetes import config as k8s_config

from tests.e2e.claim.sdk import (
    AGENTS,
    CLAIMS,
    NAMESPACE,
    get,
)
from tests.e2e.up import kubectl

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TIMEOUT = 60
"""The SDK's readiness timeout: failing fast means well under it."""


def _template_and_pool(name: str, pod_spec: str, service: bool = False) -> str:
    return f"""
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: {name}
  namespace: {NAMESPACE}
spec:
  service: {"true" if service else "false"}
  podTemplate:
    spec:
{pod_spec}
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata:
  name: {name}
  namespace: {NAMESPACE}
spec:
  replicas: 0
  sandboxTemplateRef:
    name: {name}
"""


NO_CONTAINERS = _template_and_pool("empty", "      containers: []")
WITH_SERVICE = _template_and_pool(
    "served",
    "      containers:\n        - name: runtime\n          image: registry.example.com/python:3.12",
    service=True,
)


def _fails_fast(sdk: SandboxClient[Sandbox], pool: str, claim_name: str | None = None) -> str:
    started = time.monotonic()
    with pytest.raises(SandboxClaimFailedError) as failure:
        sdk.create_sandbox(
            pool, namespace=NAMESPACE, sandbox_ready_timeout=TIMEOUT, claim_name=claim_name
        )
    elapsed = time.monotonic() - started
    assert elapsed < TIMEOUT / 2, f"failed after {elapsed:.1f}s: by the timeout, not fast"
    message = str(failure.value)
    assert "InvalidConfiguration" in message, message
    return message


def test_the_sdk_fails_fast_on_a_sandbox_that_cannot_be_configured(
    sandbus_up: Path, sdk: SandboxClient[Sandbox], tmp_path: Path
) -> None:
    applied = kubectl(sandbus_up, tmp_path, "apply", "-f", "-", input=NO_CONTAINERS)
    assert applied.returncode == 0, applied.stderr.decode()
    message = _fails_fast(sdk, "empty")
    assert "containers is empty" in message, message


def test_the_sdk_fails_fast_on_a_claim_name_too_long_for_its_service(
    sandbus_up: Path, sdk: SandboxClient[Sandbox], tmp_path: Path
) -> None:
    applied = kubectl(sandbus_up, tmp_path, "apply", "-f", "-", input=WITH_SERVICE)
    assert applied.returncode == 0, applied.stderr.decode()
    name = "claim-" + "x" * 58  # 64 characters: a fine claim name, too long for a Service
    message = _fails_fast(sdk, "served", claim_name=name)
    assert "at most 63 characters" in message, message
    with k8s_config.new_client_from_config(
        config_file=str(sandbus_up / "kubeconfig"), persist_config=False
    ) as api:
        objects = k8s.CustomObjectsApi(api)
        assert get(objects, AGENTS, name) is None, "no Sandbox was attempted"
        assert get(objects, CLAIMS, name) is not None, "an explicit name is the caller's"
