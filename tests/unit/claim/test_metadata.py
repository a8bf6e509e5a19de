"""A claim's additionalPodMetadata: its validation (docs/agent-sandbox.md §3.4) and the pod
metadata of the claim's Sandbox on the cold and warm paths (§3.4, §3.5)."""

from __future__ import annotations

from typing import Any

import pytest

from api.keys import (
    ANNOTATION_SAFE_TO_EVICT,
    LABEL_CLAIM_UID,
    LABEL_CREATED_BY,
    LABEL_SANDBOX_POD_TEMPLATE_HASH,
    LABEL_SANDBOX_TEMPLATE_HASH,
    LABEL_SANDBOX_TEMPLATE_REF_HASH,
    LABEL_WARM_POOL_SANDBOX,
    name_hash,
)
from services.claim.core.metadata import (
    DEFAULT_ALLOWED_LABEL_DOMAINS,
    MetadataConflict,
    claim_pod_metadata,
    parse_allowed_label_domains,
    validate_additional_metadata,
)

TEMPLATE = "test-template"
CLAIM_UID = "claim-uid"


def template(pod_metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    pod_template: dict[str, Any] = {"spec": {"containers": [{"name": "c", "image": "i"}]}}
    if pod_metadata is not None:
        pod_template["metadata"] = pod_metadata
    return {
        "metadata": {"name": TEMPLATE, "namespace": "default"},
        "spec": {"podTemplate": pod_template},
    }


def claim(
    additional: dict[str, Any] | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"warmPoolRef": {"name": "test-warmpool"}}
    if additional is not None:
        spec["additionalPodMetadata"] = additional
    metadata: dict[str, Any] = {"name": "test-claim", "namespace": "default", "uid": CLAIM_UID}
    if labels is not None:
        metadata["labels"] = labels
    return {"metadata": metadata, "spec": spec}


def warm_pod_metadata(**annotations: str) -> dict[str, Any]:
    """The podTemplate metadata of a warm pool member, as the pool wrote it."""
    return {
        "labels": {
            LABEL_WARM_POOL_SANDBOX: name_hash("test-warmpool"),
            LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(TEMPLATE),
            LABEL_SANDBOX_TEMPLATE_HASH: "0badc0de",
            LABEL_SANDBOX_POD_TEMPLATE_HASH: "deadbeef",
            LABEL_CREATED_BY: "controller",
        },
        "annotations": {ANNOTATION_SAFE_TO_EVICT: "true", **annotations},
    }


def invalid(labels: dict[str, str]) -> str:
    message = validate_additional_metadata({"labels": labels}, DEFAULT_ALLOWED_LABEL_DOMAINS)
    assert message is not None
    assert message.startswith("invalid additionalPodMetadata: ")
    return message


# --- Validation ----------------------------------------------------------------------------------


def test_label_without_domain_is_rejected() -> None:
    """Upstream TestSandboxClaimReconcile "claim with label without domain is rejected"."""
    assert "must have a domain prefix" in invalid({"label-without-domain": "value"})


def test_too_long_label_value_is_rejected() -> None:
    """Upstream TestSandboxClaimReconcile "claim with too long label value is rejected"."""
    value = "a-very-long-value-that-exceeds-sixty-three-characters-limit-which-is-sixty-four"
    message = invalid({"sandbox.users.io/user-label": value})
    assert '"sandbox.users.io/user-label"' in message
    assert "must be no more than 63 characters" in message


def test_invalid_label_pattern_is_rejected() -> None:
    """Upstream TestSandboxClaimReconcile "claim with invalid label pattern is rejected"."""
    message = invalid({"sandbox.users.io/user-label": "invalid@value"})
    assert 'invalid label value: "invalid@value"' in message


def test_invalid_label_key_is_rejected() -> None:
    """Upstream TestSandboxClaimReconcile "claim with invalid label key is rejected"."""
    message = invalid({"sandbox.users.io/invalid@key": "value"})
    assert 'invalid label key: "sandbox.users.io/invalid@key"' in message


def test_restricted_domain_label_is_rejected() -> None:
    """Upstream TestSandboxClaimReconcile "claim with restricted domain label is rejected"."""
    message = invalid({"kubernetes.io/restricted": "value"})
    assert 'label domain "kubernetes.io" is not in the allowlist' in message


def test_spoofed_router_app_label_is_rejected() -> None:
    """Upstream TestSandboxClaimReconcile "claim with spoofed router app label is rejected":
    the exact message, and the check ignores case."""
    assert invalid({"app": "sandbox-router"}) == (
        'invalid additionalPodMetadata: failed to validate label "app": restricted system '
        'label value: "app"="sandbox-router" is not allowed in AdditionalPodMetadata'
    )
    assert "restricted system label value" in invalid({"APP": "Sandbox-Router"})


def test_safe_to_evict_annotation_is_accepted() -> None:
    """Upstream TestSandboxClaimReconcile "claim with safe-to-evict annotation is accepted":
    the one exemption from the annotation block-list, propagated to the pod template."""
    additional = {"annotations": {ANNOTATION_SAFE_TO_EVICT: "false"}}
    assert validate_additional_metadata(additional, DEFAULT_ALLOWED_LABEL_DOMAINS) is None
    metadata = claim_pod_metadata(template(), claim(additional), TEMPLATE)
    assert metadata["annotations"][ANNOTATION_SAFE_TO_EVICT] == "false"


def test_custom_allowed_domain_is_accepted() -> None:
    """Upstream TestSandboxClaimReconcile "claim with custom allowed domain is accepted"; the
    domain's subdomains are allowed too, other domains are not."""
    domains = ["sandbox.users.io", "custom.company.com"]
    for key in ("custom.company.com/my-label", "team.custom.company.com/my-label"):
        assert validate_additional_metadata({"labels": {key: "my-value"}}, domains) is None
    message = validate_additional_metadata({"labels": {"notcustom.company.com/x": "v"}}, domains)
    assert message is not None and "not in the allowlist" in message
    assert "not in the allowlist" in invalid({"custom.company.com/my-label": "my-value"})


def test_restricted_annotation_domains_are_rejected() -> None:
    """§3.4 additionalPodMetadata validation: annotations under kubernetes.io, k8s.io and
    agents.x-k8s.io, or their subdomains, are refused; any other annotation is accepted."""
    for key in ("kubernetes.io/x", "node.k8s.io/x", "agents.x-k8s.io/claim-uid"):
        message = validate_additional_metadata({"annotations": {key: "v"}}, ())
        assert message is not None
        assert f'failed to validate annotation "{key}": restricted system domain' in message
    accepted = {"annotations": {"user-annotation": "v", "example.com/note": "v"}}
    assert validate_additional_metadata(accepted, ()) is None
    assert validate_additional_metadata(None, ()) is None


def test_allowed_label_domains_file() -> None:
    """§3.4 (main.go:509-528): the allowed-label-domains file is split on commas and line
    breaks, trimmed and lower-cased; an empty file means the default."""
    text = " Custom.Company.com,\r\nother.io\n\n, "
    assert parse_allowed_label_domains(text) == ("custom.company.com", "other.io")
    assert parse_allowed_label_domains(" \n") == DEFAULT_ALLOWED_LABEL_DOMAINS


# --- Pod metadata --------------------------------------------------------------------------------


def test_additional_metadata_applied() -> None:
    """Upstream TestSandboxClaimReconcile "sandbox is created with additional metadata from
    claim": the template's pod metadata plus the claim identity, the ref hash and the claim's
    labels and annotations."""
    tmpl = template({"labels": {"team": "a"}, "annotations": {"note": "t"}})
    additional = {
        "labels": {"sandbox.users.io/user-label": "user-value"},
        "annotations": {"user-annotation": "user-value"},
    }
    assert claim_pod_metadata(tmpl, claim(additional), TEMPLATE) == {
        "labels": {
            "team": "a",
            LABEL_CLAIM_UID: CLAIM_UID,
            LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(TEMPLATE),
            "sandbox.users.io/user-label": "user-value",
        },
        "annotations": {"note": "t", "user-annotation": "user-value"},
    }


def test_conflicting_override_is_refused_when_strict() -> None:
    """§3.4 cold create: a claim key the template sets to another value is a "metadata
    override conflict" (ReconcilerError, with backoff); the same value is no conflict;
    strict=False lets the claim win."""
    tmpl = template({"labels": {"sandbox.users.io/tier": "gold"}})
    additional = {"labels": {"sandbox.users.io/tier": "silver"}}
    with pytest.raises(MetadataConflict) as raised:
        claim_pod_metadata(tmpl, claim(additional), TEMPLATE, strict=True)
    assert raised.value.message == (
        'metadata override conflict: label "sandbox.users.io/tier" is defined in template with '
        'value "gold", but claim requests "silver"'
    )
    assert raised.value.reason == "ReconcilerError" and raised.value.backoff

    same = claim({"labels": {"sandbox.users.io/tier": "gold"}})
    assert claim_pod_metadata(tmpl, same, TEMPLATE)["labels"]["sandbox.users.io/tier"] == "gold"
    loose = claim_pod_metadata(tmpl, claim(additional), TEMPLATE, strict=False)
    assert loose["labels"]["sandbox.users.io/tier"] == "silver"


def test_adoption_replaces_warm_metadata_with_the_templates() -> None:
    """§3.5 adoption: the warm member's pod metadata is replaced, so the pool's hash labels and
    its safe-to-evict "true" go; the ref hash and the claim identity are set."""
    tmpl = template({"labels": {"team": "a"}})
    metadata = claim_pod_metadata(tmpl, claim(), TEMPLATE, current=warm_pod_metadata())
    assert metadata == {
        "labels": {
            "team": "a",
            LABEL_CLAIM_UID: CLAIM_UID,
            LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(TEMPLATE),
        }
    }


def test_adoption_keeps_template_safe_to_evict_false() -> None:
    """Upstream TestSandboxClaimSandboxAdoption "preserves template eviction annotation false
    when adopting sandbox"."""
    tmpl = template({"annotations": {ANNOTATION_SAFE_TO_EVICT: "false"}})
    current = warm_pod_metadata(**{ANNOTATION_SAFE_TO_EVICT: "false"})
    metadata = claim_pod_metadata(tmpl, claim(), TEMPLATE, current=current)
    assert metadata["annotations"] == {ANNOTATION_SAFE_TO_EVICT: "false"}


def test_adoption_fallback_keeps_safe_to_evict_false() -> None:
    """Upstream TestSandboxClaimSandboxAdoption "preserves template eviction annotation false
    when template lookup fails (fallback path)": without a template the current metadata is
    kept, less a safe-to-evict "true" only; the ref hash, identity and claim metadata added."""
    current = warm_pod_metadata(**{ANNOTATION_SAFE_TO_EVICT: "false"})
    additional = {"labels": {"sandbox.users.io/x": "y"}}
    metadata = claim_pod_metadata(None, claim(additional), TEMPLATE, current=current)
    assert metadata["annotations"] == {ANNOTATION_SAFE_TO_EVICT: "false"}
    assert metadata["labels"][LABEL_SANDBOX_TEMPLATE_REF_HASH] == name_hash(TEMPLATE)
    assert metadata["labels"][LABEL_CLAIM_UID] == CLAIM_UID
    assert metadata["labels"]["sandbox.users.io/x"] == "y"
    assert LABEL_CREATED_BY not in metadata["labels"]

    dropped = claim_pod_metadata(None, claim(), TEMPLATE, current=warm_pod_metadata())
    assert ANNOTATION_SAFE_TO_EVICT not in dropped.get("annotations", {})
    assert current == warm_pod_metadata(**{ANNOTATION_SAFE_TO_EVICT: "false"})


def test_adoption_keeps_claim_safe_to_evict_true() -> None:
    """Upstream TestSandboxClaimSandboxAdoption "preserves claim eviction annotation true when
    adopting sandbox"."""
    additional = {"annotations": {ANNOTATION_SAFE_TO_EVICT: "true"}}
    for tmpl in (template(), None):
        metadata = claim_pod_metadata(
            tmpl, claim(additional), TEMPLATE, current=warm_pod_metadata()
        )
        assert metadata["annotations"] == {ANNOTATION_SAFE_TO_EVICT: "true"}


def test_adoption_propagates_and_overwrites_created_by() -> None:
    """Upstream TestSandboxClaimSandboxAdoption "propagates and overwrites created-by label
    during adoption": the claim's raw value replaces the pool's "controller"."""
    with_created_by = claim(labels={LABEL_CREATED_BY: "go-client"})
    tmpl = template({"labels": {LABEL_CREATED_BY: "controller"}})
    for source in (tmpl, None):
        metadata = claim_pod_metadata(
            source, with_created_by, TEMPLATE, current=warm_pod_metadata()
        )
        assert metadata["labels"][LABEL_CREATED_BY] == "go-client"


def test_adoption_removes_created_by_when_claim_lacks_it() -> None:
    """Upstream TestSandboxClaimSandboxAdoption "removes created-by label during adoption when
    claim lacks it": removed even when the template or the warm member set it."""
    tmpl = template({"labels": {LABEL_CREATED_BY: "controller"}})
    for source in (tmpl, None):
        for without in (claim(), claim(labels={LABEL_CREATED_BY: ""})):
            metadata = claim_pod_metadata(source, without, TEMPLATE, current=warm_pod_metadata())
            assert LABEL_CREATED_BY not in metadata["labels"]
