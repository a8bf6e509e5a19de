"""What a claim may add to its template on the cold path: env and volume claim templates
(docs/agent-sandbox.md §3.6)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.claim.core.injection import (
    ClaimInputError,
    inject_env,
    merge_volume_claim_templates,
)

REJECTED = "EnvVarsInjectionRejected"
VCT_ERROR = "VolumeClaimTemplatesError"
RECONCILER_ERROR = "ReconcilerError"
NOT_ALLOWED = (
    "environment variable injection rejected: environment variable injection is not allowed by "
    "the template policy"
)


def container(name: str, *env: tuple[str, str], **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": f"{name}-image", **fields}
    if env:
        body["env"] = [{"name": n, "value": v} for n, v in env]
    return body


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return spec


def var(name: str, value: str = "claim-value", target: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "value": value}
    if target is not None:
        entry["containerName"] = target
    return entry


def env_of(spec: dict[str, Any], index: int = 0, field: str = "containers") -> list[Any]:
    return list(spec[field][index].get("env") or [])


def refused(pod_spec: dict[str, Any], env: list[dict[str, Any]], policy: str) -> ClaimInputError:
    with pytest.raises(ClaimInputError) as raised:
        inject_env(pod_spec, env, policy)
    return raised.value


TEMPLATE_ENV = pod(container("test-container", ("EXISTING_VAR", "template-value")))
ENV_FROM = [{"configMapRef": {"name": "some-configmap"}}]


# --- Environment variables -----------------------------------------------------------------------


def test_env_injected_under_overrides() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox is created with injected environment
    variables from claim": a new variable is appended after the template's; the input is not
    changed."""
    before = copy.deepcopy(TEMPLATE_ENV)
    spec = inject_env(TEMPLATE_ENV, [var("NEW_VAR")], "Overrides")
    assert env_of(spec) == [
        {"name": "EXISTING_VAR", "value": "template-value"},
        {"name": "NEW_VAR", "value": "claim-value"},
    ]
    assert before == TEMPLATE_ENV


def test_env_new_variable_under_allowed() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox is created with injected new environment
    variable when policy is Allowed"."""
    spec = inject_env(TEMPLATE_ENV, [var("NEW_VAR_ALLOWED")], "Allowed")
    assert env_of(spec) == [
        {"name": "EXISTING_VAR", "value": "template-value"},
        {"name": "NEW_VAR_ALLOWED", "value": "claim-value"},
    ]


def test_env_override_under_allowed_is_a_reconciler_error() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox creation fails when claim overrides
    environment variable and policy is Allowed (not Overrides)": ReconcilerError with backoff,
    not EnvVarsInjectionRejected (§11 item 16)."""
    error = refused(TEMPLATE_ENV, [var("EXISTING_VAR", "claim-override-value")], "Allowed")
    assert error.reason == RECONCILER_ERROR and error.backoff
    assert error.message == (
        "environment variable override is not allowed by the template policy for variable "
        '"EXISTING_VAR"'
    )


def test_env_conflict_without_policy_is_rejected() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox creation fails when claim environment
    variable conflicts with template and override is not allowed" (the template's policy is
    the default, Disallowed)."""
    error = refused(TEMPLATE_ENV, [var("EXISTING_VAR", "claim-override-value")], "Disallowed")
    assert (error.reason, error.message, error.backoff) == (REJECTED, NOT_ALLOWED, False)


def test_env_rejected_when_disallowed() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox creation fails when claim injects new
    environment variable and policy is disallowed"; an unset policy is the same."""
    for policy in ("Disallowed", ""):
        error = refused(pod(container("test-container")), [var("NEW_VAR")], policy)
        assert (error.reason, error.message, error.backoff) == (REJECTED, NOT_ALLOWED, False)


def test_env_rejected_for_env_from_under_allowed() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox creation fails when claim injects env var but
    template has EnvFrom and policy is Allowed"."""
    spec = pod(container("test-container", ("EXISTING_VAR", "v"), envFrom=ENV_FROM))
    error = refused(spec, [var("NEW_VAR_ALLOWED")], "Allowed")
    assert error.reason == REJECTED and not error.backoff
    assert error.message == (
        'environment variable injection rejected: container "test-container" uses EnvFrom '
        "sources; Allowed policy cannot safely prevent overriding EnvFrom-provided variables"
    )


def test_env_rejected_for_init_container_env_from_under_allowed() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox creation fails when claim injects env var but
    template has EnvFrom in init container and policy is Allowed"."""
    spec = pod(container("app-container"), init=(container("init-setup", envFrom=ENV_FROM),))
    error = refused(spec, [var("NEW_VAR_ALLOWED", target="init-setup")], "Allowed")
    assert error.reason == REJECTED
    assert 'container "init-setup" uses EnvFrom sources' in error.message


def test_env_into_container_without_env_from() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox is created when claim injects env var to a
    container without EnvFrom even if another container has EnvFrom"."""
    spec = pod(container("app-container"), init=(container("init-setup", envFrom=ENV_FROM),))
    injected = inject_env(spec, [var("NEW_VAR_ALLOWED", target="app-container")], "Allowed")
    assert env_of(injected) == [{"name": "NEW_VAR_ALLOWED", "value": "claim-value"}]
    assert env_of(injected, field="initContainers") == []


def test_env_from_without_injection() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox is created when template has EnvFrom but
    claim does not inject any env vars": no entries, no check, whatever the policy."""
    spec = pod(container("test-container", envFrom=ENV_FROM))
    for policy in ("Allowed", "Disallowed"):
        assert inject_env(spec, [], policy) == spec


def test_env_override_under_overrides() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox is created with overridden environment
    variable when template allows override": replaced in place, not appended."""
    spec = inject_env(TEMPLATE_ENV, [var("EXISTING_VAR", "claim-override-value")], "Overrides")
    assert env_of(spec) == [{"name": "EXISTING_VAR", "value": "claim-override-value"}]


def test_env_into_named_container() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox is created with env var injected into
    specific container"."""
    spec = pod(container("app-container"), container("sidecar-container"))
    injected = inject_env(spec, [var("APP_ENV", "injected", "app-container")], "Overrides")
    assert env_of(injected, 0) == [{"name": "APP_ENV", "value": "injected"}]
    assert env_of(injected, 1) == []


def test_env_unnamed_entries_go_to_the_first_container() -> None:
    """§3.6: entries without a containerName go to containers[0], after that container's own
    targeted entries."""
    spec = pod(container("app-container"), container("sidecar-container"))
    env = [
        var("DEFAULT"),
        var("SIDE", target="sidecar-container"),
        var("APP", target="app-container"),
    ]
    injected = inject_env(spec, env, "Overrides")
    assert [e["name"] for e in env_of(injected, 0)] == ["APP", "DEFAULT"]
    assert [e["name"] for e in env_of(injected, 1)] == ["SIDE"]


def test_env_into_unknown_container_is_a_reconciler_error() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox creation fails when claim targets
    non-existent container"."""
    spec = pod(container("app-container"), container("sidecar-container"))
    error = refused(spec, [var("INVALID_ENV", "injected", "does-not-exist")], "Overrides")
    assert error.reason == RECONCILER_ERROR and error.backoff
    assert error.message == (
        'target container "does-not-exist" not found in template for environment variable '
        '"INVALID_ENV"'
    )


def test_env_into_init_container() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox is created with env var injected into init
    container"."""
    spec = pod(container("app-container"), init=(container("init-setup"),))
    injected = inject_env(spec, [var("INIT_ENV", "injected-init", "init-setup")], "Overrides")
    assert env_of(injected, field="initContainers") == [
        {"name": "INIT_ENV", "value": "injected-init"}
    ]
    assert env_of(injected) == []


# --- Volume claim templates ----------------------------------------------------------------------


def vct(name: str, storage: str = "1Gi") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
    }


def storage(merged: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(v["metadata"]["name"], v["spec"]["resources"]["requests"]["storage"]) for v in merged]


def vct_refused(
    template: list[dict[str, Any]] | None, claim: list[dict[str, Any]] | None, policy: str
) -> ClaimInputError:
    with pytest.raises(ClaimInputError) as raised:
        merge_volume_claim_templates(template, claim, policy)
    assert raised.value.reason == VCT_ERROR and not raised.value.backoff
    return raised.value


def test_vct_overrides_replaces_template_volume() -> None:
    """Upstream TestCreateSandboxClaimVolumeClaimTemplatesSuccess "policy=Overrides overrides
    template volume"."""
    merged = merge_volume_claim_templates([vct("data")], [vct("data", "5Gi")], "Overrides")
    assert storage(merged) == [("data", "5Gi")]


def test_vct_overrides_keeps_template_order_then_appends() -> None:
    """§3.6: under Overrides same-name entries are replaced in the template's order, then the
    claim's new ones follow in the claim's order."""
    template = [vct("a"), vct("b"), vct("c")]
    claim = [vct("new", "9Gi"), vct("b", "5Gi"), vct("other", "8Gi")]
    merged = merge_volume_claim_templates(template, claim, "Overrides")
    assert storage(merged) == [
        ("a", "1Gi"),
        ("b", "5Gi"),
        ("c", "1Gi"),
        ("new", "9Gi"),
        ("other", "8Gi"),
    ]


def test_vct_allowed_appends_custom_volume() -> None:
    """Upstream TestCreateSandboxClaimVolumeClaimTemplatesSuccess "policy=Allowed allows adding
    new custom volumes"; the inputs are not changed."""
    template, claim = [vct("data")], [vct("custom", "2Gi")]
    before = copy.deepcopy((template, claim))
    merged = merge_volume_claim_templates(template, claim, "Allowed")
    assert storage(merged) == [("data", "1Gi"), ("custom", "2Gi")]
    merged[0]["metadata"]["name"] = "changed"
    assert (template, claim) == before


def test_vct_no_claim_volumes_bypasses_policy() -> None:
    """Upstream TestCreateSandboxClaimVolumeClaimTemplatesSuccess "bypasses VCT policy check if
    claim requests no custom volumes"."""
    no_volumes: tuple[list[dict[str, Any]] | None, ...] = (None, [])
    for claim in no_volumes:
        merged = merge_volume_claim_templates([vct("data")], claim, "Disallowed")
        assert storage(merged) == [("data", "1Gi")]
    assert merge_volume_claim_templates(None, None, None) == []


def test_vct_disallowed() -> None:
    """Upstream TestCreateSandboxClaimVolumeClaimTemplatesErrors "disallowed policy"."""
    error = vct_refused(None, [vct("custom")], "Disallowed")
    assert "volume claim templates are disallowed by the template" in error.message


def test_vct_override_forbidden_under_allowed() -> None:
    """Upstream TestCreateSandboxClaimVolumeClaimTemplatesErrors "forbidden override
    policy"."""
    error = vct_refused([vct("data")], [vct("data")], "Allowed")
    assert 'cannot override template volume "data"' in error.message


def test_vct_empty_policy_is_disallowed() -> None:
    """Upstream TestCreateSandboxClaimVolumeClaimTemplatesErrors "default empty policy is
    treated as Disallowed"."""
    error = vct_refused(None, [vct("custom")], "")
    assert "volume claim templates are disallowed by the template" in error.message


def test_vct_empty_name_in_claim() -> None:
    """Upstream TestCreateSandboxClaimVolumeClaimTemplatesErrors "empty volume name in claim
    VCTs"."""
    error = vct_refused(None, [vct("")], "Allowed")
    assert "name at index 0 is empty" in error.message


def test_vct_duplicate_name_in_claim() -> None:
    """Upstream TestCreateSandboxClaimVolumeClaimTemplatesErrors "duplicate volume name in
    claim VCTs"."""
    error = vct_refused(None, [vct("data"), vct("data")], "Allowed")
    assert 'duplicate name "data"' in error.message


def test_vct_empty_name_in_template() -> None:
    """Upstream TestCreateSandboxClaimVolumeClaimTemplatesErrors "empty volume name in template
    VCTs": checked although the claim brings none."""
    error = vct_refused([vct("")], None, "Allowed")
    assert "name at index 0 is empty" in error.message


def test_vct_duplicate_name_in_template() -> None:
    """Upstream TestCreateSandboxClaimVolumeClaimTemplatesErrors "duplicate volume name in
    template VCTs"."""
    error = vct_refused([vct("data"), vct("data")], None, "Allowed")
    assert 'duplicate name "data"' in error.message
