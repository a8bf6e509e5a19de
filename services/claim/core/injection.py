"""What a claim may add to its template on the cold path: environment variables and volume
claim templates (docs/agent-sandbox.md §3.6; upstream ``createSandbox``/``injectEnvs``,
claim:1648-1676 and 1744-1810, ``mergeVolumeClaimTemplates``, claim:1841-1922).

A claim with ``spec.env`` or ``spec.volumeClaimTemplates`` never adopts a warm sandbox (§3.4
step 4): a warm member's pod is already running, so neither can be applied to it. On the cold
path the template decides what the claim may do, through two policies:

- ``envVarsInjectionPolicy``: ``Disallowed`` (the default) rejects any ``env``; ``Allowed``
  adds new variables but refuses to change one the template sets, and refuses a container with
  ``envFrom`` (whose variables it cannot see, so it cannot promise not to shadow them);
  ``Overrides`` may also replace a template variable's value in place. An entry without
  ``containerName`` goes to the first regular container; a ``containerName`` must name an
  init or a regular container.
- ``volumeClaimTemplatesPolicy``: ``Disallowed`` or unset rejects claim VCTs; ``Allowed``
  appends them and refuses a name the template uses; ``Overrides`` replaces same-name template
  VCTs in the template's order, then appends the new ones. VCT names must be non-empty and
  unique in both lists; the template's are checked even when the claim brings none.

Every refusal is a :class:`ClaimInputError` that carries the claim's Ready reason and the
message upstream reports, word for word. Upstream sorts them in two classes, and so do we:
a user error (``EnvVarsInjectionRejected``, ``VolumeClaimTemplatesError``) is reported and not
retried until the claim or template changes (those changes are events); the others are plain
errors, reported as ``ReconcilerError`` and retried with backoff (``backoff``). Oddly, an
``Allowed`` clash with a template variable and an unknown ``containerName`` are of the second
kind (§11 item 16).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn

from api.objects import Json

__all__ = [
    "REASON_ENV_VARS_INJECTION_REJECTED",
    "REASON_RECONCILER_ERROR",
    "REASON_VOLUME_CLAIM_TEMPLATES_ERROR",
    "ClaimInputError",
    "go_quote",
    "inject_env",
    "merge_volume_claim_templates",
]

REASON_ENV_VARS_INJECTION_REJECTED: Final = "EnvVarsInjectionRejected"
REASON_VOLUME_CLAIM_TEMPLATES_ERROR: Final = "VolumeClaimTemplatesError"
REASON_RECONCILER_ERROR: Final = "ReconcilerError"

_ENV_REJECTED: Final = "environment variable injection rejected"
_VCT_MERGE: Final = "failed to merge volume claim templates"
_VCT_INVALID: Final = "invalid volume claim templates"


class ClaimInputError(Exception):
    """The claim asks for something its template does not permit (or that cannot be built).

    ``reason`` is the claim's Ready reason. ``message`` is upstream's error text: the Ready
    message itself for the user-error reasons; for ``ReconcilerError`` the condition reads
    ``"Error seen: " + message``, as for any other error.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    @property
    def backoff(self) -> bool:
        """Retry with exponential backoff? Only the plain errors; user errors wait for a change
        of the claim or the template."""
        return self.reason == REASON_RECONCILER_ERROR


def go_quote(text: str) -> str:
    """``text`` quoted as Go's ``%q`` quotes it in upstream's messages (close enough for text
    that people read: printable characters are kept, the rest escaped)."""
    return json.dumps(text, ensure_ascii=False)


# --- Environment variables -----------------------------------------------------------------------


def inject_env(pod_spec: Mapping[str, Any], env: Sequence[Mapping[str, Any]], policy: str) -> Json:
    """``pod_spec`` with the claim's ``env`` entries injected under the template's
    ``envVarsInjectionPolicy``, as a new dict (neither input is changed). No entries: an
    unchanged copy, whatever the policy and whatever ``envFrom`` the containers have."""
    spec: Json = copy.deepcopy(dict(pod_spec))
    if not env:
        return spec
    if policy not in ("Allowed", "Overrides"):
        raise ClaimInputError(
            REASON_ENV_VARS_INJECTION_REJECTED,
            f"{_ENV_REJECTED}: environment variable injection is not allowed by the template "
            "policy",
        )

    by_container: dict[str, list[Mapping[str, Any]]] = {}
    default: list[Mapping[str, Any]] = []
    for entry in env:
        target = str(entry.get("containerName") or "")
        (by_container.setdefault(target, []) if target else default).append(entry)

    init_containers = _containers(spec, "initContainers")
    containers = _containers(spec, "containers")
    known = {container.get("name") for container in (*init_containers, *containers)}
    for target, entries in by_container.items():
        if target not in known:
            raise ClaimInputError(
                REASON_RECONCILER_ERROR,
                f"target container {go_quote(target)} not found in template for environment "
                f"variable {go_quote(str(entries[0].get('name') or ''))}",
            )

    for container in init_containers:
        entries = by_container.get(str(container.get("name") or ""), [])
        if entries:
            _inject(container, entries, policy)
    for index, container in enumerate(containers):
        entries = [*by_container.get(str(container.get("name") or ""), [])]
        if index == 0:
            entries += default
        if entries:
            _inject(container, entries, policy)
    return spec


def _containers(spec: Json, field: str) -> list[Json]:
    value = spec.get(field)
    return [c for c in value if isinstance(c, dict)] if isinstance(value, list) else []


def _inject(container: Json, entries: Sequence[Mapping[str, Any]], policy: str) -> None:
    name = str(container.get("name") or "")
    if policy == "Allowed" and container.get("envFrom"):
        raise ClaimInputError(
            REASON_ENV_VARS_INJECTION_REJECTED,
            f"{_ENV_REJECTED}: container {go_quote(name)} uses EnvFrom sources; Allowed policy "
            "cannot safely prevent overriding EnvFrom-provided variables",
        )
    variables = container.get("env")
    if not isinstance(variables, list):
        variables = container["env"] = []
    for entry in entries:
        variable = {"name": str(entry.get("name") or ""), "value": str(entry.get("value") or "")}
        index = next(
            (
                i
                for i, existing in enumerate(variables)
                if isinstance(existing, Mapping) and existing.get("name") == variable["name"]
            ),
            None,
        )
        if index is None:
            variables.append(variable)
        elif policy == "Overrides":
            variables[index] = variable
        else:
            raise ClaimInputError(
                REASON_RECONCILER_ERROR,
                "environment variable override is not allowed by the template policy for "
                f"variable {go_quote(variable['name'])}",
            )


# --- Volume claim templates ----------------------------------------------------------------------


def merge_volume_claim_templates(
    template_vcts: Sequence[Mapping[str, Any]] | None,
    claim_vcts: Sequence[Mapping[str, Any]] | None,
    policy: str | None,
) -> list[Json]:
    """The volume claim templates of a claim's cold Sandbox: the template's, merged with the
    claim's under the template's ``volumeClaimTemplatesPolicy`` (copies; inputs unchanged)."""
    template = [copy.deepcopy(dict(vct)) for vct in template_vcts or ()]
    claim = [copy.deepcopy(dict(vct)) for vct in claim_vcts or ()]
    if not claim:
        problem = _invalid(template)
        if problem:
            _vct_error(f"{_VCT_INVALID} in template: {_VCT_INVALID}: {problem}")
        return template
    for side, vcts in (("template", template), ("claim", claim)):
        problem = _invalid(vcts)
        if problem:
            _vct_error(f"{_VCT_MERGE}: {side}: {_VCT_INVALID}: {problem}")

    if policy in ("Disallowed", "", None):
        _vct_error(f"{_VCT_MERGE}: volume claim templates are disallowed by the template")
    if policy == "Allowed":
        template_names = {_vct_name(vct) for vct in template}
        for vct in claim:
            if _vct_name(vct) in template_names:
                _vct_error(
                    f"{_VCT_MERGE}: overriding volume claim templates is forbidden by the "
                    f"template: cannot override template volume {go_quote(_vct_name(vct))}"
                )
        return template + claim
    if policy == "Overrides":
        overrides = {_vct_name(vct): vct for vct in claim}
        merged = [overrides.pop(_vct_name(vct), vct) for vct in template]
        return merged + [vct for vct in claim if _vct_name(vct) in overrides]
    raise ClaimInputError(
        REASON_RECONCILER_ERROR,
        f"{_VCT_MERGE}: unknown volume claim templates policy {go_quote(str(policy))}",
    )


def _vct_name(vct: Mapping[str, Any]) -> str:
    metadata = vct.get("metadata")
    return str(metadata.get("name") or "") if isinstance(metadata, Mapping) else ""


def _invalid(vcts: Sequence[Mapping[str, Any]]) -> str | None:
    """Upstream ``validateVolumeClaimTemplates``: the first empty or repeated name."""
    seen: set[str] = set()
    for index, vct in enumerate(vcts):
        name = _vct_name(vct)
        if not name:
            return f"name at index {index} is empty"
        if name in seen:
            return f"duplicate name {go_quote(name)}"
        seen.add(name)
    return None


def _vct_error(message: str) -> NoReturn:
    raise ClaimInputError(REASON_VOLUME_CLAIM_TEMPLATES_ERROR, message)
