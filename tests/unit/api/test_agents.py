"""The agent-sandbox kinds against docs/agent-sandbox.md §1: what the API server does with
them (defaults, rejections, pruning), what the CRDs say, and how the types encode."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest

from api import agents
from api.crd import crd_for, openapi_schema
from api.meta import ObjectMeta, Resource
from devtools.cluster.apirules.structural import StructuralSchema
from tests.unit.api.manifests import EXAMPLES_DIR, OBSERVED_DIR, load_documents

AGENT_KINDS: tuple[type[Resource], ...] = (
    agents.Sandbox,
    agents.SandboxTemplate,
    agents.SandboxClaim,
    agents.SandboxWarmPool,
)


def schema(kind: type[Resource]) -> StructuralSchema:
    return StructuralSchema(openapi_schema(kind))


def minimal(kind: type[Resource]) -> dict[str, Any]:
    specs: dict[str, dict[str, Any]] = {
        "Sandbox": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
        "SandboxTemplate": {
            "podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        },
        "SandboxClaim": {"warmPoolRef": {"name": "pool"}},
        "SandboxWarmPool": {"sandboxTemplateRef": {"name": "python"}},
    }
    return {
        "apiVersion": kind.KIND.api_version,
        "kind": kind.KIND.kind,
        "metadata": {"name": "x", "namespace": "default"},
        "spec": copy.deepcopy(specs[kind.KIND.kind]),
    }


def admitted_spec(kind: type[Resource], spec_changes: dict[str, Any]) -> dict[str, Any]:
    manifest = minimal(kind)
    manifest["spec"].update(spec_changes)
    admission = schema(kind).admit(manifest)
    assert admission.causes == []
    spec: dict[str, Any] = admission.object["spec"]
    return spec


def causes(kind: type[Resource], spec: dict[str, Any]) -> list[tuple[str, str, str]]:
    manifest = minimal(kind)
    manifest["spec"] = spec
    return [
        (cause.field, cause.reason, cause.message) for cause in schema(kind).admit(manifest).causes
    ]


# --- Defaults ------------------------------------------------------------------------------------


def test_sandbox_defaults_to_retain_and_running() -> None:
    spec = admitted_spec(agents.Sandbox, {})

    assert spec["shutdownPolicy"] == "Retain"
    assert spec["operatingMode"] == "Running"
    assert "service" not in spec  # nil means "keep an existing Service, create none"


def test_sandbox_null_policy_is_defaulted_and_null_service_dropped() -> None:
    spec = admitted_spec(agents.Sandbox, {"shutdownPolicy": None, "service": None})

    assert spec["shutdownPolicy"] == "Retain"
    assert "service" not in spec


def test_warm_pool_defaults_to_one_replica() -> None:
    spec = admitted_spec(agents.SandboxWarmPool, {})

    assert spec["replicas"] == 1
    assert "updateStrategy" not in spec  # a default never creates its parent


def test_warm_pool_update_strategy_defaults_to_on_replenish_when_present() -> None:
    spec = admitted_spec(agents.SandboxWarmPool, {"updateStrategy": {}})

    assert spec["updateStrategy"] == {"type": "OnReplenish"}


def test_warm_pool_keeps_an_explicit_zero() -> None:
    assert admitted_spec(agents.SandboxWarmPool, {"replicas": 0})["replicas"] == 0


def test_template_policies_default_to_managed_and_disallowed() -> None:
    spec = admitted_spec(agents.SandboxTemplate, {})

    assert spec["networkPolicyManagement"] == "Managed"
    assert spec["envVarsInjectionPolicy"] == "Disallowed"
    assert spec["volumeClaimTemplatesPolicy"] == "Disallowed"
    assert "networkPolicy" not in spec


def test_claim_shutdown_policy_defaults_to_retain_only_inside_lifecycle() -> None:
    assert "lifecycle" not in admitted_spec(agents.SandboxClaim, {})
    assert admitted_spec(agents.SandboxClaim, {"lifecycle": {}})["lifecycle"] == {
        "shutdownPolicy": "Retain"
    }


def test_python_defaults_are_the_crd_defaults() -> None:
    assert agents.SandboxSpec(pod_template=agents.PodTemplate(spec={})).shutdown_policy == "Retain"
    assert (
        agents.SandboxWarmPoolSpec(
            sandbox_template_ref=agents.SandboxTemplateRef(name="t")
        ).replicas
        == 1
    )
    assert agents.WarmPoolUpdateStrategy().type == "OnReplenish"
    assert agents.ClaimLifecycle().shutdown_policy == "Retain"


# --- Rejections ----------------------------------------------------------------------------------


def test_missing_pod_template_is_required() -> None:
    assert causes(agents.Sandbox, {}) == [
        ("spec.podTemplate", "FieldValueRequired", "Required value")
    ]


def test_missing_pod_spec_is_required() -> None:
    assert causes(agents.SandboxTemplate, {"podTemplate": {"metadata": {}}}) == [
        ("spec.podTemplate.spec", "FieldValueRequired", "Required value")
    ]


def test_missing_spec_is_required() -> None:
    manifest = minimal(agents.SandboxClaim)
    del manifest["spec"]

    assert [c.error for c in schema(agents.SandboxClaim).validate(manifest)] == [
        "spec: Required value"
    ]


def test_claim_needs_a_warm_pool_name_and_env_values() -> None:
    found = causes(
        agents.SandboxClaim,
        {"warmPoolRef": {}, "env": [{"name": "A", "value": "1"}, {"name": "B"}]},
    )

    assert found == [
        ("spec.env[1].value", "FieldValueRequired", "Required value"),
        ("spec.warmPoolRef.name", "FieldValueRequired", "Required value"),
    ]


def test_bad_shutdown_policy_is_unsupported() -> None:
    manifest = minimal(agents.Sandbox)
    manifest["spec"]["shutdownPolicy"] = "Later"

    (cause,) = schema(agents.Sandbox).admit(manifest).causes

    assert cause.error == (
        'spec.shutdownPolicy: Unsupported value: "Later": supported values: "Delete", "Retain"'
    )
    assert cause.reason == "FieldValueNotSupported"


@pytest.mark.parametrize(
    ("kind", "spec_changes", "field"),
    [
        (agents.Sandbox, {"operatingMode": "Paused"}, "spec.operatingMode"),
        (
            agents.SandboxTemplate,
            {"networkPolicyManagement": "Auto"},
            "spec.networkPolicyManagement",
        ),
        (
            agents.SandboxTemplate,
            {"envVarsInjectionPolicy": "Always"},
            "spec.envVarsInjectionPolicy",
        ),
        (
            agents.SandboxTemplate,
            {"volumeClaimTemplatesPolicy": "Yes"},
            "spec.volumeClaimTemplatesPolicy",
        ),
        (
            agents.SandboxClaim,
            {"lifecycle": {"shutdownPolicy": "Orphan"}},
            "spec.lifecycle.shutdownPolicy",
        ),
        (
            agents.SandboxWarmPool,
            {"updateStrategy": {"type": "Rolling"}},
            "spec.updateStrategy.type",
        ),
    ],
)
def test_every_enum_rejects_an_unknown_value(
    kind: type[Resource], spec_changes: dict[str, Any], field: str
) -> None:
    manifest = minimal(kind)
    manifest["spec"].update(spec_changes)

    found = [(c.field, c.reason) for c in schema(kind).admit(manifest).causes]

    assert found == [(field, "FieldValueNotSupported")]


def test_supported_values_are_listed_in_upstream_order() -> None:
    manifest = minimal(agents.SandboxTemplate)
    manifest["spec"]["volumeClaimTemplatesPolicy"] = "Yes"
    manifest["spec"]["envVarsInjectionPolicy"] = "Yes"

    assert [c.message for c in schema(agents.SandboxTemplate).admit(manifest).causes] == [
        'Unsupported value: "Yes": supported values: "Allowed", "Overrides", "Disallowed"',
        'Unsupported value: "Yes": supported values: "Disallowed", "Allowed", "Overrides"',
    ]


def test_negative_replicas_are_invalid() -> None:
    manifest = minimal(agents.SandboxWarmPool)
    manifest["spec"]["replicas"] = -1

    (cause,) = schema(agents.SandboxWarmPool).admit(manifest).causes

    assert cause.error == (
        "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or "
        "equal to 0"
    )


def test_negative_ttl_is_invalid() -> None:
    found = causes(
        agents.SandboxClaim,
        {"warmPoolRef": {"name": "p"}, "lifecycle": {"ttlSecondsAfterFinished": -5}},
    )

    assert [field for field, _, _ in found] == ["spec.lifecycle.ttlSecondsAfterFinished"]


@pytest.mark.parametrize(
    ("kind", "spec_changes", "field", "expected_type", "actual_type"),
    [
        (agents.Sandbox, {"service": "yes"}, "spec.service", "boolean", "string"),
        (agents.SandboxWarmPool, {"replicas": "three"}, "spec.replicas", "integer", "string"),
        (agents.Sandbox, {"podTemplate": {"spec": []}}, "spec.podTemplate.spec", "object", "array"),
        (agents.SandboxClaim, {"env": {"A": "1"}}, "spec.env", "array", "object"),
    ],
)
def test_wrong_types_are_named(
    kind: type[Resource],
    spec_changes: dict[str, Any],
    field: str,
    expected_type: str,
    actual_type: str,
) -> None:
    manifest = minimal(kind)
    manifest["spec"].update(spec_changes)

    (cause,) = schema(kind).admit(manifest).causes

    assert cause.field == field
    assert cause.reason == "FieldValueTypeInvalid"
    assert cause.message == (
        f'Invalid value: "{actual_type}": {field} in body must be of type {expected_type}: '
        f'"{actual_type}"'
    )


def test_shutdown_time_must_be_a_date_time() -> None:
    manifest = minimal(agents.Sandbox)
    manifest["spec"]["shutdownTime"] = "tomorrow"

    (cause,) = schema(agents.Sandbox).admit(manifest).causes

    assert cause.error == (
        'spec.shutdownTime: Invalid value: "tomorrow": spec.shutdownTime in body must be of '
        'type date-time: "tomorrow"'
    )


def test_condition_reason_must_match_the_metav1_pattern() -> None:
    manifest = minimal(agents.Sandbox)
    manifest["status"] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "not a reason",
                "message": "",
                "lastTransitionTime": "2030-01-01T00:00:00Z",
            }
        ]
    }

    (cause,) = schema(agents.Sandbox).admit(manifest).causes

    assert cause.field == "status.conditions[0].reason"
    assert "should match '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$'" in cause.message


# --- Pruning -------------------------------------------------------------------------------------


def test_unknown_spec_field_is_pruned_but_pod_spec_is_kept_whole() -> None:
    manifest = minimal(agents.Sandbox)
    manifest["spec"]["replicas"] = 1  # v1alpha1 only: gone in v1beta1
    manifest["spec"]["podTemplate"]["spec"]["futureField"] = {"x": 1}
    manifest["spec"]["podTemplate"]["metadata"] = {"labels": {"a": "b"}, "name": "ignored"}

    admission = schema(agents.Sandbox).admit(manifest)

    assert admission.unknown_fields == ["spec.podTemplate.metadata.name", "spec.replicas"]
    assert "replicas" not in admission.object["spec"]
    assert admission.object["spec"]["podTemplate"]["spec"]["futureField"] == {"x": 1}
    assert admission.object["spec"]["podTemplate"]["metadata"] == {"labels": {"a": "b"}}
    assert admission.causes == []


def test_network_policy_rules_are_kept_whole() -> None:
    rule = {"from": [{"podSelector": {}}], "ports": [{"port": 80}], "newField": True}
    spec = admitted_spec(agents.SandboxTemplate, {"networkPolicy": {"ingress": [rule]}})

    assert spec["networkPolicy"]["ingress"] == [rule]


# --- The CRDs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "short_names", "subresources", "columns"),
    [
        (agents.Sandbox, ["sandbox"], {"status": {}}, ["Ready", "Reason", "Age"]),
        (agents.SandboxTemplate, ["sandboxtemplate"], None, None),
        (
            agents.SandboxClaim,
            ["sandboxclaim"],
            {"status": {}},
            ["Ready", "Sandbox", "Reason", "Age"],
        ),
        (
            agents.SandboxWarmPool,
            ["swp"],
            {
                "status": {},
                "scale": {
                    "specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": ".status.selector",
                },
            },
            ["Ready", "Desired", "Age"],
        ),
    ],
)
def test_crd_names_subresources_and_columns_match_upstream(
    kind: type[Resource],
    short_names: list[str],
    subresources: dict[str, Any] | None,
    columns: list[str] | None,
) -> None:
    crd = crd_for(kind)
    (version,) = crd["spec"]["versions"]

    assert crd["spec"]["names"]["shortNames"] == short_names
    assert version.get("subresources") == subresources
    assert [c["name"] for c in version.get("additionalPrinterColumns", [])] == (columns or [])


def test_ready_column_reads_the_ready_condition() -> None:
    (version,) = crd_for(agents.Sandbox)["spec"]["versions"]

    assert version["additionalPrinterColumns"][0] == {
        "name": "Ready",
        "type": "string",
        "jsonPath": ".status.conditions[?(@.type=='Ready')].status",
    }


def test_vct_lists_and_env_are_atomic() -> None:
    spec = openapi_schema(agents.SandboxClaim)["properties"]["spec"]["properties"]

    assert spec["env"]["x-kubernetes-list-type"] == "atomic"
    assert spec["volumeClaimTemplates"]["x-kubernetes-list-type"] == "atomic"


# --- Encoding ------------------------------------------------------------------------------------


def test_a_built_object_encodes_as_a_complete_request_body() -> None:
    sandbox = agents.Sandbox(
        metadata=ObjectMeta(name="s1"),
        spec=agents.SandboxSpec(pod_template=agents.PodTemplate(spec={"containers": []})),
        status=agents.SandboxStatus(service_fqdn="s1.default.svc", pod_ips=["10.0.0.1"]),
    )

    assert json.loads(msgspec.json.encode(sandbox)) == {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": "s1"},
        "spec": {"podTemplate": {"spec": {"containers": []}}},
        "status": {"serviceFQDN": "s1.default.svc", "podIPs": ["10.0.0.1"]},
    }


def test_pod_template_encodes_spec_before_metadata_like_go() -> None:
    template = agents.PodTemplate(spec={}, metadata=agents.PodMetadata(labels={"a": "b"}))

    assert msgspec.json.encode(template) == b'{"spec":{},"metadata":{"labels":{"a":"b"}}}'


# --- The examples exercise every field -----------------------------------------------------------


def _wire_paths(kind: type[msgspec.Struct]) -> set[str]:
    """Every field of the type as a dotted wire path; list items add nothing to the path."""
    paths: set[str] = set()

    def walk(info: mi.Type, prefix: str) -> None:
        while isinstance(info, mi.Metadata):
            info = info.type
        if isinstance(info, mi.UnionType):
            for member in info.types:
                walk(member, prefix)
        elif isinstance(info, (mi.ListType, mi.SetType, mi.FrozenSetType)):
            walk(info.item_type, prefix)
        elif isinstance(info, mi.StructType):
            for field in info.fields:
                path = f"{prefix}.{field.encode_name}" if prefix else field.encode_name
                paths.add(path)
                walk(field.type, path)

    walk(mi.type_info(kind), "")
    return {path for path in paths if not path.startswith("metadata")}


def _set_paths(value: Any, prefix: str = "") -> set[str]:
    paths: set[str] = set()
    if isinstance(value, dict):
        for key, child in value.items():
            path = f"{prefix}.{key}" if prefix else key
            paths.add(path)
            paths |= _set_paths(child, path)
    elif isinstance(value, list):
        for child in value:
            paths |= _set_paths(child, prefix)
    return paths


@pytest.mark.parametrize("kind", AGENT_KINDS, ids=lambda kind: kind.__name__)
def test_examples_together_set_every_field(kind: type[Resource]) -> None:
    manifests = [
        document
        for path in sorted(
            [*(EXAMPLES_DIR / "agents").glob("*.yaml"), *OBSERVED_DIR.glob("*.yaml")]
        )
        for document in load_documents(path)
        if document["kind"] == kind.KIND.kind
    ]
    covered = set().union(*(_set_paths(manifest) for manifest in manifests))

    assert _wire_paths(kind) - covered == set()
