"""The Sandbox a warm pool creates (docs/agent-sandbox.md §4.3) and the secure defaults of a
template-made pod spec (§3.1)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from api.keys import (
    ANNOTATION_SAFE_TO_EVICT,
    ANNOTATION_SANDBOX_TEMPLATE_REF,
    LABEL_CREATED_BY,
    LABEL_LAUNCH_TYPE,
    LABEL_SANDBOX_POD_TEMPLATE_HASH,
    LABEL_SANDBOX_TEMPLATE_HASH,
    LABEL_SANDBOX_TEMPLATE_REF_HASH,
    LABEL_WARM_POOL_SANDBOX,
    name_hash,
)
from services.domain.agentsandbox.blueprint import BLUEPRINT_FIELDS, pool_sandbox
from services.domain.agentsandbox.hashes import blueprint_hash, pod_template_hash
from services.domain.agentsandbox.secure_defaults import apply_secure_defaults
from services.domain.agentsandbox.warmpool import pool_selector

POOL = "test-pool"
TEMPLATE = "test-template"
NAMESPACE = "default"
POOL_UID = "warmpool-uid-123"
ISOLATED_DNS = {"nameservers": ["8.8.8.8", "1.1.1.1"]}


def pool(template_ref: str = TEMPLATE) -> dict[str, Any]:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": POOL, "namespace": NAMESPACE, "uid": POOL_UID},
        "spec": {"replicas": 3, "sandboxTemplateRef": {"name": template_ref}},
    }


def template(**spec: Any) -> dict[str, Any]:
    spec.setdefault(
        "podTemplate", {"spec": {"containers": [{"name": "app", "image": "test-image"}]}}
    )
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
        "spec": spec,
    }


def vct(name: str, storage: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
    }


def test_pool_label_value_in_integration() -> None:
    """Upstream TestPoolLabelValueInIntegration: a created sandbox carries the pool hash, the
    ref hash, launch-type warm, the template's pod labels and annotations and safe-to-evict
    "true"; also the two hash labels, created-by and the pool as controlling owner (§4.3)."""
    tmpl = template(
        podTemplate={
            "metadata": {
                "labels": {"pod-label": "from-podtemplate", "version": "2.0"},
                "annotations": {"pod-annotation": "from-podtemplate"},
            },
            "spec": {"containers": [{"name": "test-container", "image": "test-image:latest"}]},
        }
    )
    body = pool_sandbox(pool(), tmpl)

    metadata = body["metadata"]
    hashes = {
        LABEL_WARM_POOL_SANDBOX: name_hash(POOL),
        LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(TEMPLATE),
        LABEL_SANDBOX_POD_TEMPLATE_HASH: pod_template_hash(tmpl["spec"]),
        LABEL_SANDBOX_TEMPLATE_HASH: blueprint_hash(tmpl["spec"]),
    }
    assert body["apiVersion"] == "agents.x-k8s.io/v1beta1"
    assert body["kind"] == "Sandbox"
    assert metadata["generateName"] == "test-pool-"
    assert "name" not in metadata
    assert metadata["namespace"] == NAMESPACE
    assert metadata["labels"] == {
        **hashes,
        LABEL_LAUNCH_TYPE: "warm",
        LABEL_CREATED_BY: "controller",
    }
    assert metadata["labels"][LABEL_WARM_POOL_SANDBOX] == "59733166"  # §4.6 test vector
    assert metadata["labels"][LABEL_SANDBOX_TEMPLATE_REF_HASH] == "69155462"
    assert metadata["ownerReferences"] == [
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxWarmPool",
            "name": POOL,
            "uid": POOL_UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]

    pod_metadata = body["spec"]["podTemplate"]["metadata"]
    assert pod_metadata["labels"] == {
        "pod-label": "from-podtemplate",
        "version": "2.0",
        **hashes,
    }
    assert pod_metadata["annotations"] == {
        "pod-annotation": "from-podtemplate",
        ANNOTATION_SAFE_TO_EVICT: "true",
    }
    assert body["spec"]["podTemplate"]["spec"]["containers"] == [
        {"name": "test-container", "image": "test-image:latest"}
    ]


def test_pool_selector_matches_the_member_label() -> None:
    """§1.5 ``status.selector``: ``agents.x-k8s.io/warm-pool-sandbox=<NameHash(pool)>``."""
    assert pool_selector(POOL) == "agents.x-k8s.io/warm-pool-sandbox=59733166"
    key, value = pool_selector(POOL).split("=")
    assert pool_sandbox(pool(), template())["metadata"]["labels"][key] == value


def test_create_pool_sandbox_propagates_volume_claim_templates() -> None:
    """Upstream TestCreatePoolSandboxPropagatesVolumeClaimTemplates: the VCTs are copied in
    order and the ``sandbox-template-ref`` annotation names the template. Only the
    SandboxBlueprint is copied: the template's policies stay on the template."""
    vcts = [vct("data", "1Gi"), vct("cache", "500Mi")]
    tmpl = template(
        volumeClaimTemplates=vcts,
        service=True,
        networkPolicyManagement="Unmanaged",
        envVarsInjectionPolicy="Allowed",
    )
    body = pool_sandbox(pool(), tmpl)

    assert body["spec"]["volumeClaimTemplates"] == vcts
    assert [v["metadata"]["name"] for v in body["spec"]["volumeClaimTemplates"]] == [
        "data",
        "cache",
    ]
    assert body["metadata"]["annotations"] == {ANNOTATION_SANDBOX_TEMPLATE_REF: TEMPLATE}
    assert (
        set(body["spec"])
        == set(BLUEPRINT_FIELDS)
        == {
            "podTemplate",
            "volumeClaimTemplates",
            "service",
        }
    )
    assert body["spec"]["service"] is True


def test_a_template_without_vcts_or_service_leaves_them_unset() -> None:
    """Go's ``omitempty``: an unset blueprint field stays unset on the Sandbox."""
    body = pool_sandbox(pool(), template())
    assert set(body["spec"]) == {"podTemplate"}


def test_labels_follow_the_pools_template_ref() -> None:
    """The ref hash and the ref annotation come from ``spec.sandboxTemplateRef.name``."""
    body = pool_sandbox(pool(template_ref="other"), template())
    assert body["metadata"]["labels"][LABEL_SANDBOX_TEMPLATE_REF_HASH] == name_hash("other")
    assert body["metadata"]["annotations"][ANNOTATION_SANDBOX_TEMPLATE_REF] == "other"


def test_inputs_are_not_changed() -> None:
    """The body is a new document: the cached pool and template stay as they were."""
    tmpl = template(
        podTemplate={"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}},
        volumeClaimTemplates=[vct("data", "1Gi")],
    )
    the_pool = pool()
    before = copy.deepcopy((the_pool, tmpl))
    body = pool_sandbox(the_pool, tmpl)
    body["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] = "changed"
    assert (the_pool, tmpl) == before


@pytest.mark.parametrize(
    ("pod_spec", "template_fields", "automount", "dns_policy", "dns_config"),
    [
        pytest.param({}, {}, False, "None", ISOLATED_DNS, id="managed-no-policy-isolates"),
        pytest.param(
            {"automountServiceAccountToken": True},
            {},
            True,
            "None",
            ISOLATED_DNS,
            id="explicit-automount-kept",
        ),
        pytest.param(
            {},
            {"networkPolicyManagement": "Unmanaged"},
            False,
            None,
            None,
            id="unmanaged-no-dns-change",
        ),
    ],
)
def test_create_pool_sandbox_applies_secure_defaults(
    pod_spec: dict[str, Any],
    template_fields: dict[str, Any],
    automount: bool,
    dns_policy: str | None,
    dns_config: dict[str, Any] | None,
) -> None:
    """Upstream TestCreatePoolSandboxAppliesSecureDefaults: automount off and DNS isolation for
    a managed template without a policy; an explicit automount kept; Unmanaged → no DNS
    change."""
    spec = {"containers": [{"name": "app", "image": "test-image"}], **pod_spec}
    body = pool_sandbox(pool(), template(podTemplate={"spec": spec}, **template_fields))

    made = body["spec"]["podTemplate"]["spec"]
    assert made["automountServiceAccountToken"] is automount
    assert made.get("dnsPolicy") == dns_policy
    assert made.get("dnsConfig") == dns_config


@pytest.mark.parametrize(
    ("pod_spec", "template_spec", "expected"),
    [
        pytest.param(
            {},
            {"networkPolicyManagement": "Managed"},
            {"automountServiceAccountToken": False, "dnsPolicy": "None", "dnsConfig": ISOLATED_DNS},
            id="explicit-managed",
        ),
        pytest.param(
            {"automountServiceAccountToken": None, "dnsPolicy": ""},
            {},
            {"automountServiceAccountToken": False, "dnsPolicy": "None", "dnsConfig": ISOLATED_DNS},
            id="null-and-empty-read-as-unset",
        ),
        pytest.param(
            {"automountServiceAccountToken": False, "dnsConfig": {"searches": ["x"]}},
            {},
            {"automountServiceAccountToken": False, "dnsPolicy": "None", "dnsConfig": ISOLATED_DNS},
            id="dns-config-replaced-whole",
        ),
        pytest.param(
            {"dnsPolicy": "ClusterFirst"},
            {},
            {"automountServiceAccountToken": False, "dnsPolicy": "ClusterFirst"},
            id="chosen-dns-policy-kept",
        ),
        pytest.param(
            {},
            {"networkPolicy": {"egress": []}},
            {"automountServiceAccountToken": False},
            id="custom-policy-no-dns-change",
        ),
        pytest.param(
            {},
            {"networkPolicy": {}},
            {"automountServiceAccountToken": False},
            id="empty-custom-policy-is-custom",
        ),
    ],
)
def test_secure_default_conditions(
    pod_spec: dict[str, Any], template_spec: dict[str, Any], expected: dict[str, Any]
) -> None:
    """§3.1 ``ApplySandboxSecureDefaults``: DNS isolation only when Managed (or unset), no
    ``networkPolicy`` and no ``dnsPolicy``; automount off only when unset. Inputs unchanged."""
    before = copy.deepcopy((pod_spec, template_spec))
    assert apply_secure_defaults(pod_spec, template_spec) == expected
    assert (pod_spec, template_spec) == before


@pytest.mark.parametrize(
    ("eviction", "template_annotations", "expected"),
    [
        pytest.param(True, None, "true", id="flag-on-sets-true"),
        pytest.param(False, None, None, id="flag-off-sets-nothing"),
        pytest.param(True, {ANNOTATION_SAFE_TO_EVICT: "false"}, "false", id="on-keeps-false"),
        pytest.param(False, {ANNOTATION_SAFE_TO_EVICT: "false"}, "false", id="off-keeps-false"),
        pytest.param(True, {ANNOTATION_SAFE_TO_EVICT: "true"}, "true", id="on-keeps-true"),
        pytest.param(False, {ANNOTATION_SAFE_TO_EVICT: "true"}, "true", id="off-keeps-true"),
    ],
)
def test_reconcile_pool_eviction_override(
    eviction: bool, template_annotations: dict[str, str] | None, expected: str | None
) -> None:
    """Upstream TestReconcilePool_EvictionOverride: the flag on sets safe-to-evict "true", off
    sets nothing; a value the template declares (true or false) is always respected."""
    pod_template: dict[str, Any] = {"spec": {"containers": [{"name": "a", "image": "b"}]}}
    if template_annotations is not None:
        pod_template["metadata"] = {"annotations": template_annotations}
    body = pool_sandbox(pool(), template(podTemplate=pod_template), eviction=eviction)

    annotations = body["spec"]["podTemplate"]["metadata"].get("annotations") or {}
    if expected is None:
        assert ANNOTATION_SAFE_TO_EVICT not in annotations
    else:
        assert annotations[ANNOTATION_SAFE_TO_EVICT] == expected
