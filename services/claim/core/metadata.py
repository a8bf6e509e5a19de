"""A claim's ``spec.additionalPodMetadata``: what a user may put on the pod, and the pod
metadata a claim's Sandbox ends up with (docs/agent-sandbox.md §3.4, §3.5; upstream
``validateAdditionalPodMetadata`` and ``mergePodMetadata``, claim:1531-1646).

Validation comes first in every claim reconcile (§3.4): a claim that fails it is Ready=False
``InvalidMetadata`` with the message :func:`validate_additional_metadata` returns, and nothing is
created or adopted. Labels select pods, so they are an allow-list: a label key needs a domain
prefix in ``allowed_label_domains`` (the domain itself or a subdomain of it; by default only
``sandbox.users.io``; the operator lists others in ``/etc/sandbox-config/allowed-label-domains``,
:func:`parse_allowed_label_domains`), and ``app=sandbox-router`` is refused in any case because
the default NetworkPolicy lets that label in. Annotations select nothing, so they are a
block-list: nothing under ``kubernetes.io``, ``k8s.io`` or ``agents.x-k8s.io`` except
``cluster-autoscaler.kubernetes.io/safe-to-evict``. Keys must be qualified names and label
values valid label values (the apimachinery rules, with their messages). Go walks maps in random
order, so with several bad keys upstream names any one of them; we name the first in sorted
order, labels before annotations.

:func:`claim_pod_metadata` is the desired ``spec.podTemplate.metadata`` of a claim's Sandbox, on
the cold path, on adoption (which replaces the warm member's metadata wholesale, dropping the
pool's hash labels and its ``safe-to-evict: "true"``) and on every later pass (which patches
drift). It is the template's pod metadata plus ``claim-uid``, ``sandbox-template-ref-hash`` and
the claim's raw ``created-by`` (removed when the claim has none, even if the template set it),
plus the claim's labels and annotations. A claim key the template already sets with another
value is upstream's ``metadata override conflict`` (:class:`MetadataConflict`, reported as
``ReconcilerError`` with backoff): the template's author decides, the claim only adds.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from api.keys import (
    ANNOTATION_SAFE_TO_EVICT,
    LABEL_CLAIM_UID,
    LABEL_CREATED_BY,
    LABEL_SANDBOX_TEMPLATE_REF_HASH,
    name_hash,
)
from api.objects import Json, labels_of, metadata_of
from services.claim.core.injection import REASON_RECONCILER_ERROR, ClaimInputError, go_quote

__all__ = [
    "DEFAULT_ALLOWED_LABEL_DOMAINS",
    "EXEMPT_ANNOTATION_KEYS",
    "RESTRICTED_ANNOTATION_DOMAINS",
    "MetadataConflict",
    "claim_pod_metadata",
    "parse_allowed_label_domains",
    "validate_additional_metadata",
]

DEFAULT_ALLOWED_LABEL_DOMAINS: Final = ("sandbox.users.io",)
"""The label domains a claim may use when the operator configured none."""

RESTRICTED_ANNOTATION_DOMAINS: Final = ("kubernetes.io", "k8s.io", "agents.x-k8s.io")
EXEMPT_ANNOTATION_KEYS: Final = frozenset({ANNOTATION_SAFE_TO_EVICT})

_INVALID: Final = "invalid additionalPodMetadata"


class MetadataConflict(ClaimInputError):
    """The claim sets a pod label or annotation that the template sets to another value."""

    def __init__(self, message: str) -> None:
        super().__init__(REASON_RECONCILER_ERROR, message)


# --- Validation ----------------------------------------------------------------------------------


def parse_allowed_label_domains(text: str) -> tuple[str, ...]:
    """The domains of an ``allowed-label-domains`` file: separated by commas or line breaks,
    trimmed and lower-cased, empty entries dropped (main.go:509-528). A file with none means
    the default."""
    domains = tuple(part.strip().lower() for part in re.split(r"[,\r\n]", text) if part.strip())
    return domains or DEFAULT_ALLOWED_LABEL_DOMAINS


def validate_additional_metadata(
    additional: Mapping[str, Any] | None, allowed_label_domains: Sequence[str]
) -> str | None:
    """None when the claim's ``spec.additionalPodMetadata`` is acceptable, else the
    ``InvalidMetadata`` message naming the first offending key. An empty allow-list means the
    default one."""
    domains = tuple(allowed_label_domains) or DEFAULT_ALLOWED_LABEL_DOMAINS
    for kind, field in (("label", "labels"), ("annotation", "annotations")):
        entries = _strings(additional, field)
        for key in sorted(entries):
            problem = _problem(key, entries[key], kind == "label", domains)
            if problem:
                return f"{_INVALID}: failed to validate {kind} {go_quote(key)}: {problem}"
    return None


def _problem(key: str, value: str, is_label: bool, domains: Sequence[str]) -> str | None:
    errors = _qualified_name_errors(key)
    if errors:
        kind = "label" if is_label else "annotation"
        return f"invalid {kind} key: {go_quote(key)}: {'; '.join(errors)}"
    if is_label and key.lower() == "app" and value.lower() == "sandbox-router":
        return (
            f"restricted system label value: {go_quote(key)}={go_quote(value)} is not allowed "
            "in AdditionalPodMetadata"
        )
    prefix, slash, _ = key.partition("/")
    domain = prefix.lower() if slash else ""
    if is_label:
        if not slash:
            return (
                f"label {go_quote(key)} must have a domain prefix (e.g. "
                "'sandbox.users.io/my-label') to prevent opting into unintended policy domains"
            )
        if not _in_domain(domain, domains):
            return f"label domain {go_quote(domain)} is not in the allowlist"
        errors = _label_value_errors(value)
        if errors:
            return (
                f"invalid label value: {go_quote(value)} does not match allowed pattern: "
                + "; ".join(errors)
            )
    elif _in_domain(domain, RESTRICTED_ANNOTATION_DOMAINS) and key not in EXEMPT_ANNOTATION_KEYS:
        return f"restricted system domain: {go_quote(key)} is not allowed in AdditionalPodMetadata"
    return None


def _in_domain(domain: str, domains: Sequence[str]) -> bool:
    return any(domain == d or domain.endswith("." + d) for d in domains)


# apimachinery's IsQualifiedName, IsDNS1123Subdomain and IsValidLabelValue, with their messages.
_NAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT: Final = f"({_NAME_FMT})?"
_SUBDOMAIN_FMT: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NAME_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    shown = ",  or ".join(f"'{example}'" for example in examples)
    return f"{message} (e.g. {shown}, regex used for validation is '{fmt}')"


def _qualified_name_errors(value: str) -> list[str]:
    parts = value.split("/")
    if len(parts) > 2:
        return [
            "a qualified name "
            + _regex_error(_NAME_MSG, _NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    errors: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                errors.append("prefix part must be no more than 253 characters")
            if not re.fullmatch(_SUBDOMAIN_FMT, prefix):
                errors.append(
                    "prefix part "
                    + _regex_error(
                        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                        "characters, '-' or '.', and must start and end with an alphanumeric "
                        "character",
                        _SUBDOMAIN_FMT,
                        "example.com",
                    )
                )
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    if not re.fullmatch(_NAME_FMT, name):
        errors.append(
            "name part " + _regex_error(_NAME_MSG, _NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errors


def _label_value_errors(value: str) -> list[str]:
    errors: list[str] = []
    if len(value) > 63:
        errors.append("must be no more than 63 characters")
    if not re.fullmatch(_LABEL_VALUE_FMT, value):
        errors.append(
            _regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character",
                _LABEL_VALUE_FMT,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errors


# --- The pod metadata of a claim's Sandbox --------------------------------------------------------


def claim_pod_metadata(
    template: Mapping[str, Any] | None,
    claim: Mapping[str, Any],
    template_ref: str,
    *,
    strict: bool = True,
    current: Mapping[str, Any] | None = None,
) -> Json:
    """The desired ``spec.podTemplate.metadata`` (``labels``, and ``annotations`` when there
    are any) of the Sandbox of ``claim``, made from ``template`` (a SandboxTemplate as served);
    ``template_ref`` names it (the pool's ``sandboxTemplateRef.name``, which is the template's
    name whenever the template was found). Assumes the claim's metadata passed
    :func:`validate_additional_metadata`. No input is changed.

    ``template`` None is adoption's fallback when the template cannot be read (§3.5): start
    from ``current``, the Sandbox's present ``spec.podTemplate.metadata``, less the pool's
    ``safe-to-evict`` only when it is ``"true"`` (a ``"false"`` was the template's choice),
    then add the same labels and the claim's metadata.

    ``strict`` (upstream's behaviour, on every path) raises :class:`MetadataConflict` when the
    claim sets a key the starting metadata has with another value; ``strict=False`` lets the
    claim's value win instead.
    """
    if template is not None:
        spec = _mapping(template.get("spec"))
        start = _mapping(_mapping(spec.get("podTemplate")).get("metadata"))
    else:
        start = current or {}
    labels = dict(_strings(start, "labels"))
    annotations = dict(_strings(start, "annotations"))
    if template is None and annotations.get(ANNOTATION_SAFE_TO_EVICT) == "true":
        del annotations[ANNOTATION_SAFE_TO_EVICT]

    labels[LABEL_CLAIM_UID] = str(metadata_of(claim).get("uid") or "")
    created_by = labels_of(claim).get(LABEL_CREATED_BY)
    if created_by:
        labels[LABEL_CREATED_BY] = str(created_by)
    else:
        labels.pop(LABEL_CREATED_BY, None)
    labels[LABEL_SANDBOX_TEMPLATE_REF_HASH] = name_hash(template_ref)

    additional = _mapping(_mapping(claim.get("spec")).get("additionalPodMetadata"))
    extra_labels = _strings(additional, "labels")
    extra_annotations = _strings(additional, "annotations")
    if strict:
        for conflict in _conflicts("label", labels, extra_labels):
            raise MetadataConflict(conflict)
        for conflict in _conflicts("annotation", annotations, extra_annotations):
            raise MetadataConflict(conflict)
    labels.update(extra_labels)
    annotations.update(extra_annotations)

    metadata: Json = {"labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def _conflicts(kind: str, base: Mapping[str, str], extra: Mapping[str, str]) -> Iterator[str]:
    for key in sorted(extra):
        if key in base and base[key] != extra[key]:
            yield (
                f"metadata override conflict: {kind} {go_quote(key)} is defined in template "
                f"with value {go_quote(base[key])}, but claim requests {go_quote(extra[key])}"
            )


def _strings(container: Mapping[str, Any] | None, field: str) -> Mapping[str, str]:
    value = (container or {}).get(field)
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
