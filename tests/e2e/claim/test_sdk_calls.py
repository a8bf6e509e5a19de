"""The calls that ``k8s-agent-sandbox`` 1.0.8 added, from the published SDK, against `sandbus up`.

- ``create_sandbox(..., claim_name=, env=)``: the claim takes the caller's name, and its
  ``spec.env`` starts it cold (upstream never adopts a warm member for a claim with ``env``), so
  the variables are in the Pod the claim's own Sandbox makes. The template allows that
  (``envVarsInjectionPolicy: Allowed``).
- ``create_sandbox(..., claim_name=, adopt_existing=True)``: the create answers 409, so the SDK
  GETs the claim, checks its warm pool, that it is not terminating and that it has a uid and a
  resourceVersion, and waits on that uid: the same claim, not a second one. Without
  ``adopt_existing`` the 409 reaches the caller as the ``ApiException`` it is, and an explicit
  name is the caller's, so the SDK leaves the claim alone.
- ``K8sHelper.wait_for_claim_ready(expected_uid=, initial_claim=)``: returns the Sandbox's name
  for the claim of that uid; a claim of the same name but another uid (deleted and created
  again) fails at once with ``SandboxNotFoundError`` ("was replaced").
- ``K8sHelper.delete_sandbox_claim(expected_uid=)``: DeleteOptions with ``preconditions.uid``.
  The development cluster checks it as kube-apiserver does: another uid is a 409 Conflict that
  the SDK raises, and the claim stays; the right uid deletes it.
- ``Sandbox.get_service_fqdn()``: the template asks for a Service, and the handle reads the
  Sandbox's ``status.serviceFQDN``, ``<sandbox>.<namespace>.svc.cluster.local`` (the Service is
  named after the Sandbox, upstream's default cluster domain), for a cold Sandbox and for an
  adopted warm one alike.

The test is skipped when the SDK is not installed (``pip install -e '.[sdk]'``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import cast

import pytest

pytest.importorskip(
    "k8s_agent_sandbox",
    reason="the agent-sandbox Python SDK is not installed: pip install -e '.[sdk]'",
)

from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.exceptions import SandboxNotFoundError
from k8s_agent_sandbox.sandbox import Sandbox
from kubernetes import client as k8s  # a dependency of the SDK
from kubernetes import config as k8s_config

from api.keys import LABEL_LAUNCH_TYPE, LAUNCH_TYPE_WARM
from api.objects import Json
from tests.e2e.claim.sdk import (
    AGENTS,
    CLAIMS,
    NAMESPACE,
    POOLS,
    eventually,
    get,
)
from tests.e2e.up import kubectl
from tests.support.samples import is_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


POOL = "sdk-calls"
NAME = "mine"
TIMEOUT = 30
"""The SDK's readiness timeout for each call."""
ENV = {"GREETING": "hello from the claim", "EMPTY": ""}
OTHER_UID = "00000000-0000-0000-0000-000000000000"

MANIFESTS = f"""
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: {POOL}
  namespace: {NAMESPACE}
spec:
  service: true
  envVarsInjectionPolicy: Allowed
  podTemplate:
    spec:
      containers:
        - name: runtime
          image: registry.example.com/sandboxes/python-runtime:3.12
          env:
            - name: FROM_TEMPLATE
              value: "yes"
          ports:
            - containerPort: 8888
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata:
  name: {POOL}
  namespace: {NAMESPACE}
spec:
  replicas: 1
  sandboxTemplateRef:
    name: {POOL}
"""


def _uid(claim: Json | None) -> str:
    assert claim is not None, "no claim"
    return cast(str, claim["metadata"]["uid"])


def _pool_ready(objects: k8s.CustomObjectsApi) -> bool | None:
    pool = get(objects, POOLS, POOL)
    status = (pool or {}).get("status") or {}
    return True if status.get("readyReplicas") == 1 else None


def _container_env(core: k8s.CoreV1Api, pod_name: str) -> dict[str, str | None]:
    pod = core.read_namespaced_pod(pod_name, NAMESPACE)
    assert pod.spec is not None
    (container,) = [c for c in pod.spec.containers if c.name == "runtime"]
    return {var.name: var.value for var in container.env or []}


def _fqdn_of(sandbox: Sandbox, objects: k8s.CustomObjectsApi, core: k8s.CoreV1Api) -> str:
    """The handle's FQDN, checked against the Sandbox's status and the Service it names."""
    fqdn = sandbox.get_service_fqdn()
    assert fqdn == f"{sandbox.sandbox_id}.{NAMESPACE}.svc.cluster.local", fqdn
    found = get(objects, AGENTS, sandbox.sandbox_id)
    assert found is not None
    assert found["status"]["serviceFQDN"] == fqdn, found["status"]
    assert found["status"]["service"] == sandbox.sandbox_id, found["status"]
    service = core.read_namespaced_service(sandbox.sandbox_id, NAMESPACE)
    assert service.metadata is not None and service.metadata.name == sandbox.sandbox_id
    return fqdn


def test_the_sdk_names_adopts_waits_on_and_deletes_a_claim_by_uid(
    sandbus_up: Path, kube: k8s.ApiClient, sdk: SandboxClient[Sandbox], tmp_path: Path
) -> None:
    objects = k8s.CustomObjectsApi(kube)
    core = k8s.CoreV1Api(kube)
    helper = sdk.k8s_helper

    applied = kubectl(sandbus_up, tmp_path, "apply", "-f", "-", input=MANIFESTS)
    assert applied.returncode == 0, applied.stderr.decode()
    eventually(f"{POOL} Ready", lambda: _pool_ready(objects), tmp_path, 60)

    # 1. A named claim with env: cold, its own Sandbox (named after the claim), the variables
    # in its Pod next to the template's.
    started = time.monotonic()
    sandbox = sdk.create_sandbox(
        POOL, namespace=NAMESPACE, sandbox_ready_timeout=TIMEOUT, claim_name=NAME, env=ENV
    )
    print(f"create_sandbox(claim_name, env): {time.monotonic() - started:.2f}s")
    assert sandbox.claim_name == NAME
    claim = get(objects, CLAIMS, NAME)
    uid = _uid(claim)
    assert claim is not None and is_ready(claim), claim
    assert claim["spec"]["env"] == [{"name": k, "value": v} for k, v in ENV.items()], claim
    assert claim["status"]["sandbox"]["name"] == sandbox.sandbox_id == NAME, claim["status"]
    cold = get(objects, AGENTS, sandbox.sandbox_id)
    assert cold is not None
    labels = cold["metadata"].get("labels") or {}
    assert labels.get(LABEL_LAUNCH_TYPE) != LAUNCH_TYPE_WARM, labels
    env = _container_env(core, sandbox.get_pod_name())
    assert env == {"FROM_TEMPLATE": "yes", **ENV}, env

    # 4. (cold) The Service's FQDN, as the Sandbox's status reports it.
    _fqdn_of(sandbox, objects, core)

    # 1. The same name again with adopt_existing: the same claim (uid), from another client as
    # from another process; the SDK does not reapply creation options on adoption.
    other_api = k8s_config.new_client_from_config(
        config_file=str(sandbus_up / "kubeconfig"), persist_config=False
    )
    other: SandboxClient[Sandbox] = SandboxClient(api_client=other_api)
    with other_api, other:
        adopted = other.create_sandbox(
            POOL,
            namespace=NAMESPACE,
            sandbox_ready_timeout=TIMEOUT,
            claim_name=NAME,
            adopt_existing=True,
        )
        assert (adopted.claim_name, adopted.sandbox_id) == (NAME, sandbox.sandbox_id)
        assert _uid(get(objects, CLAIMS, NAME)) == uid

        # Without adopt_existing, the conflict is the caller's, and the claim is left alone.
        with pytest.raises(k8s.ApiException) as conflict:
            other.create_sandbox(
                POOL, namespace=NAMESPACE, sandbox_ready_timeout=TIMEOUT, claim_name=NAME
            )
        assert conflict.value.status == 409, conflict.value
        assert _uid(get(objects, CLAIMS, NAME)) == uid

        # Adoption checks the claim's warm pool.
        with pytest.raises(ValueError, match="references warm pool"):
            other.create_sandbox(
                "another-pool",
                namespace=NAMESPACE,
                sandbox_ready_timeout=TIMEOUT,
                claim_name=NAME,
                adopt_existing=True,
            )
    # Explicitly named claims outlive the client that created or adopted them.
    assert _uid(get(objects, CLAIMS, NAME)) == uid

    # 2. Waiting on the claim by uid: from the GET (Ready already) and from the watch alone.
    current = get(objects, CLAIMS, NAME)
    assert helper.wait_for_claim_ready(
        NAME, NAMESPACE, TIMEOUT, expected_uid=uid, initial_claim=current
    ) == (sandbox.sandbox_id)
    assert helper.wait_for_claim_ready(NAME, NAMESPACE, TIMEOUT, expected_uid=uid) == (
        sandbox.sandbox_id
    )

    # 3. A delete with another uid is refused (409 from the precondition); the claim stays.
    with pytest.raises(k8s.ApiException) as refused:
        helper.delete_sandbox_claim(NAME, NAMESPACE, expected_uid=OTHER_UID)
    assert refused.value.status == 409, refused.value
    assert "precondition" in str(refused.value.body), refused.value.body
    still = get(objects, CLAIMS, NAME)
    assert _uid(still) == uid and still is not None
    assert not still["metadata"].get("deletionTimestamp"), still["metadata"]

    # With its uid it is deleted, and its Sandbox with it.
    helper.delete_sandbox_claim(NAME, NAMESPACE, expected_uid=uid)
    eventually(
        "the claim and its Sandbox deleted",
        lambda: (
            True
            if get(objects, CLAIMS, NAME) is None and get(objects, AGENTS, NAME) is None
            else None
        ),
        tmp_path,
        30,
    )

    # 2. The name again, without env: a new claim (a new uid) that adopts the warm member.
    again = sdk.create_sandbox(
        POOL, namespace=NAMESPACE, sandbox_ready_timeout=TIMEOUT, claim_name=NAME
    )
    new_uid = _uid(get(objects, CLAIMS, NAME))
    assert new_uid != uid
    assert again.sandbox_id != NAME, "adopted warm, under the member's name"
    warm = get(objects, AGENTS, again.sandbox_id)
    assert warm is not None
    assert (warm["metadata"].get("labels") or {}).get(LABEL_LAUNCH_TYPE) == LAUNCH_TYPE_WARM
    # 4. (warm) The adopted member's Service.
    _fqdn_of(again, objects, core)

    # Waiting on the old uid fails at once: the claim of that name was replaced.
    started = time.monotonic()
    with pytest.raises(SandboxNotFoundError, match="was replaced"):
        helper.wait_for_claim_ready(NAME, NAMESPACE, TIMEOUT, expected_uid=uid)
    assert time.monotonic() - started < TIMEOUT / 2, "by the timeout, not at once"
    assert helper.wait_for_claim_ready(NAME, NAMESPACE, TIMEOUT, expected_uid=new_uid) == (
        again.sandbox_id
    )

    # The old uid no longer deletes anything; the new one does.
    with pytest.raises(k8s.ApiException) as stale:
        helper.delete_sandbox_claim(NAME, NAMESPACE, expected_uid=uid)
    assert stale.value.status == 409, stale.value
    assert _uid(get(objects, CLAIMS, NAME)) == new_uid
    helper.delete_sandbox_claim(NAME, NAMESPACE, expected_uid=new_uid)
    eventually(
        "the second claim deleted",
        lambda: True if get(objects, CLAIMS, NAME) is None else None,
        tmp_path,
        30,
    )
