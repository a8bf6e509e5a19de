"""The Sandbox a claim creates on the cold path (docs/agent-sandbox.md §3.4 "Cold create")."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from api.keys import (
    ANNOTATION_SANDBOX_TEMPLATE_REF,
    ANNOTATION_TRACE_CONTEXT,
    LABEL_CLAIM_UID,
    LABEL_CREATED_BY,
    LABEL_LAUNCH_TYPE,
    LABEL_SANDBOX_TEMPLATE_REF_HASH,
    name_hash,
)
from services.claim.core.cold import cold_sandbox
from services.claim.core.injection import ClaimInputError
from services.claim.core.metadata import MetadataConflict

TEMPLATE = "test-template"
CLAIM = "test-claim"
CLAIM_UID = "claim-uid"
NAMESPACE = "default"
ISOLATED_DNS = {"nameservers": ["8.8.8.8", "1.1.1.1"]}
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def pool() -> dict[str, Any]:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": "test-warmpool", "namespace": NAMESPACE, "uid": "pool-uid"},
        "spec": {"replicas": 0, "sandboxTemplateRef": {"name": TEMPLATE}},
    }


def template(**spec: Any) -> dict[str, Any]:
    spec.setdefault(
        "podTemplate", {"spec": {"containers": [{"name": "test-container", "image": "test-image"}]}}
    )
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
        "spec": spec,
    }


def claim(
    *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": CLAIM, "namespace": NAMESPACE, "uid": CLAIM_UID}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": metadata,
        "spec": {"warmPoolRef": {"name": "test-warmpool"}, **spec},
    }


def vct(name: str, storage: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
    }


def pod_spec(body: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = body["spec"]["podTemplate"]["spec"]
    return spec


def test_sandbox_created_for_claim() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox is created when a claim is made": named and
    owned as the claim, the cold-create labels and annotations, and a pod spec that is the
    template's with only the secure defaults added; no lifecycle fields; inputs unchanged."""
    tmpl, c, p = template(service=True), claim(), pool()
    before = copy.deepcopy((tmpl, c, p))
    body = cold_sandbox(c, p, tmpl)

    assert body["apiVersion"] == "agents.x-k8s.io/v1beta1" and body["kind"] == "Sandbox"
    assert body["metadata"] == {
        "name": CLAIM,
        "namespace": NAMESPACE,
        "labels": {
            LABEL_CLAIM_UID: CLAIM_UID,
            LABEL_LAUNCH_TYPE: "cold",
            LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(TEMPLATE),
        },
        "annotations": {ANNOTATION_SANDBOX_TEMPLATE_REF: TEMPLATE},
        "ownerReferences": [
            {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxClaim",
                "name": CLAIM,
                "uid": CLAIM_UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    assert set(body["spec"]) == {"podTemplate", "service"}
    assert body["spec"]["service"] is True
    assert pod_spec(body) == {
        **tmpl["spec"]["podTemplate"]["spec"],
        "automountServiceAccountToken": False,
        "dnsPolicy": "None",
        "dnsConfig": ISOLATED_DNS,
    }
    assert body["spec"]["podTemplate"]["metadata"]["labels"] == {
        LABEL_CLAIM_UID: CLAIM_UID,
        LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(TEMPLATE),
    }
    assert (tmpl, c, p) == before


def test_automount_token_kept_when_template_sets_true() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox is created with automount token enabled"."""
    tmpl = template(
        podTemplate={
            "spec": {
                "automountServiceAccountToken": True,
                "containers": [{"name": "test-container", "image": "test-image"}],
            }
        }
    )
    assert pod_spec(cold_sandbox(claim(), pool(), tmpl))["automountServiceAccountToken"] is True


def test_custom_network_policy_leaves_dns_untouched() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox is created with network policy enabled": a
    template with its own rules keeps the cluster DNS."""
    tmpl = template(networkPolicy={"ingress": [{"from": [{"podSelector": {}}]}], "egress": []})
    spec = pod_spec(cold_sandbox(claim(), pool(), tmpl))
    assert "dnsPolicy" not in spec and "dnsConfig" not in spec
    assert "networkPolicy" not in cold_sandbox(claim(), pool(), tmpl)["spec"]


def test_default_secure_dns_and_ref_hash() -> None:
    """Upstream TestSandboxClaimReconcile "Scenario A: Creates Default Secure Policy (Strict
    Isolation) when template has none": DNS None with the public resolvers, and the template
    ref hash on the Sandbox."""
    body = cold_sandbox(claim(), pool(), template())
    assert body["metadata"]["labels"][LABEL_SANDBOX_TEMPLATE_REF_HASH] == name_hash(TEMPLATE)
    assert pod_spec(body)["dnsPolicy"] == "None"
    assert pod_spec(body)["dnsConfig"] == ISOLATED_DNS


def test_trace_context_copied_from_claim() -> None:
    """Upstream TestSandboxClaimReconcile "trace context is propagated from claim to
    sandbox"."""
    body = cold_sandbox(claim(annotations={ANNOTATION_TRACE_CONTEXT: TRACE}), pool(), template())
    assert body["metadata"]["annotations"][ANNOTATION_TRACE_CONTEXT] == TRACE


def test_additional_metadata_on_cold_sandbox() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox is created with additional metadata from
    claim": the claim's labels and annotations reach the pod template, not the Sandbox."""
    additional = {
        "labels": {"sandbox.users.io/user-label": "user-value"},
        "annotations": {"user-annotation": "user-value"},
    }
    body = cold_sandbox(claim(additionalPodMetadata=additional), pool(), template())
    pod_metadata = body["spec"]["podTemplate"]["metadata"]
    assert pod_metadata["labels"]["sandbox.users.io/user-label"] == "user-value"
    assert pod_metadata["annotations"] == {"user-annotation": "user-value"}
    assert "sandbox.users.io/user-label" not in body["metadata"]["labels"]


def test_created_by_propagated() -> None:
    """Upstream TestSandboxClaimCreationMetric "Cold Start" (with the claim labelled): the
    claim's raw created-by reaches the Sandbox and its pod template."""
    body = cold_sandbox(claim(labels={LABEL_CREATED_BY: "python-client"}), pool(), template())
    assert body["metadata"]["labels"][LABEL_CREATED_BY] == "python-client"
    assert body["spec"]["podTemplate"]["metadata"]["labels"][LABEL_CREATED_BY] == "python-client"


def test_created_by_absent_when_claim_lacks_it() -> None:
    """Upstream TestSandboxClaimCreationMetric "Cold Start": no created-by on the Sandbox or its
    pod template when the claim has none, even if the template's pod labels carry one."""
    tmpl = template(
        podTemplate={
            "metadata": {"labels": {LABEL_CREATED_BY: "controller"}},
            "spec": {"containers": [{"name": "test-container", "image": "test-image"}]},
        }
    )
    body = cold_sandbox(claim(), pool(), tmpl)
    assert LABEL_CREATED_BY not in body["metadata"]["labels"]
    assert LABEL_CREATED_BY not in body["spec"]["podTemplate"]["metadata"]["labels"]


def test_template_volume_claim_templates_propagated() -> None:
    """Upstream TestCreateSandboxPropagatesVolumeClaimTemplates."""
    body = cold_sandbox(claim(), pool(), template(volumeClaimTemplates=[vct("data", "1Gi")]))
    assert body["spec"]["volumeClaimTemplates"] == [vct("data", "1Gi")]


def test_claim_volume_claim_templates_merged() -> None:
    """Upstream TestCreateSandboxClaimVolumeClaimTemplatesSuccess "policy=Overrides overrides
    template volume", on the Sandbox itself."""
    tmpl = template(
        volumeClaimTemplates=[vct("data", "1Gi")], volumeClaimTemplatesPolicy="Overrides"
    )
    body = cold_sandbox(claim(volumeClaimTemplates=[vct("data", "5Gi")]), pool(), tmpl)
    assert body["spec"]["volumeClaimTemplates"] == [vct("data", "5Gi")]
    assert body["metadata"]["labels"][LABEL_LAUNCH_TYPE] == "cold"


def test_env_injected_before_secure_defaults() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox is created with injected environment
    variables from claim", on the Sandbox: the env reaches the first container and the secure
    defaults still apply."""
    tmpl = template(envVarsInjectionPolicy="Overrides")
    body = cold_sandbox(claim(env=[{"name": "NEW_VAR", "value": "claim-value"}]), pool(), tmpl)
    spec = pod_spec(body)
    assert spec["containers"][0]["env"] == [{"name": "NEW_VAR", "value": "claim-value"}]
    assert spec["automountServiceAccountToken"] is False


def test_bad_input_raises_with_its_reason() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox creation fails when claim injects new
    environment variable and policy is disallowed", TestCreateSandboxClaimVolumeClaimTemplates
    Errors "disallowed policy", and §3.4's metadata override conflict (ReconcilerError)."""
    env = [{"name": "NEW_VAR", "value": "claim-value"}]
    with pytest.raises(ClaimInputError) as env_refused:
        cold_sandbox(claim(env=env), pool(), template())
    assert env_refused.value.reason == "EnvVarsInjectionRejected"

    with pytest.raises(ClaimInputError) as vct_refused:
        cold_sandbox(claim(volumeClaimTemplates=[vct("x", "1Gi")]), pool(), template())
    assert vct_refused.value.reason == "VolumeClaimTemplatesError"

    tmpl = template(
        podTemplate={
            "metadata": {"annotations": {"note": "template"}},
            "spec": {"containers": [{"name": "test-container", "image": "test-image"}]},
        }
    )
    additional = {"annotations": {"note": "claim"}}
    with pytest.raises(MetadataConflict) as conflict:
        cold_sandbox(claim(additionalPodMetadata=additional), pool(), tmpl)
    assert conflict.value.reason == "ReconcilerError" and conflict.value.backoff
