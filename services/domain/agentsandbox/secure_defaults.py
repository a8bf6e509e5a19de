"""``apply_secure_defaults``: the defaults a pod spec built from a SandboxTemplate gets
(docs/agent-sandbox.md §3.1 and §11 item 20; upstream ``ApplySandboxSecureDefaults``,
extensions/controllers/utils.go:24-48).

1. ``automountServiceAccountToken`` becomes ``false`` when the template leaves it unset (absent
   or null); an explicit ``true`` or ``false`` is kept. A sandbox runs untrusted code, so it gets
   no API credentials unless the template asks for them.
2. DNS isolation, only in "secure by default" mode: the template's ``networkPolicyManagement``
   is ``Managed`` or unset (the CRD default is Managed), **and** it has no ``networkPolicy`` of
   its own (absent or null; an empty ``{}`` is a custom policy, as Go's nil pointer test reads
   it), **and** the pod spec's ``dnsPolicy`` is empty (absent, null or ``""``). Then
   ``dnsPolicy: None`` with ``dnsConfig: {nameservers: [8.8.8.8, 1.1.1.1]}``, replacing any
   ``dnsConfig`` the template had, as upstream does. Why: the default NetworkPolicy blocks the
   private ranges and with them the cluster DNS, so the pod resolves public names through
   public resolvers and cannot enumerate cluster Services. A template with its own rules, an
   ``Unmanaged`` one, or one that chose a ``dnsPolicy`` keeps its DNS untouched (air-gapped and
   proxy set-ups).

Used where upstream uses it: the Sandbox a warm pool creates (:mod:`.blueprint`), the expected
side of the staleness comparison (:mod:`.staleness`), and the claim worker's cold path. Never
applied to a hand-made Sandbox. The function depends on nothing else in the pool worker so that
the claim worker can share it as it is.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from api.objects import Json

__all__ = ["PUBLIC_NAMESERVERS", "apply_secure_defaults", "secure_by_default"]

PUBLIC_NAMESERVERS: Final = ("8.8.8.8", "1.1.1.1")
"""Google and Cloudflare public DNS, in upstream's order."""

_MANAGED: Final = frozenset({"", "Managed"})


def secure_by_default(template_spec: Mapping[str, Any]) -> bool:
    """Does the template use the controller's default NetworkPolicy (Managed, no custom rules)?"""
    management = template_spec.get("networkPolicyManagement") or ""
    return management in _MANAGED and template_spec.get("networkPolicy") is None


def apply_secure_defaults(pod_spec: Mapping[str, Any], template_spec: Mapping[str, Any]) -> Json:
    """``pod_spec`` with the secure defaults of ``template_spec`` (a SandboxTemplate's ``spec``)
    applied, as a new dict; neither argument is changed."""
    spec: Json = copy.deepcopy(dict(pod_spec))
    if spec.get("automountServiceAccountToken") is None:
        spec["automountServiceAccountToken"] = False
    if secure_by_default(template_spec) and not spec.get("dnsPolicy"):
        spec["dnsPolicy"] = "None"
        spec["dnsConfig"] = {"nameservers": list(PUBLIC_NAMESERVERS)}
    return spec
