"""What one SandboxClaim's reconcile looks at, read from the worker's cache into one value.

Besides the claim: its pool and the pool's template (the v1beta1 route to the template), the
Sandboxes it may already have (named by its status, by its ``sandbox-name`` annotation, by its
own name, or controlled by it), and the warm-queue entries held for it (:class:`Offer`), each
with the Sandbox it offers as the cache shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from api.keys import ANNOTATION_SANDBOX_NAME, LEGACY_LABEL_SANDBOX_NAME
from api.objects import Json, controller_of, labels_of, metadata_of
from events.envelope import ObjectKey
from events.subjects import SubjectError, parse_warm_subject
from events.types import DecisionMessage as SourceMessage
from services.claim.core.batch.tasks import TaskReport
from services.claim.core.metadata import DEFAULT_ALLOWED_LABEL_DOMAINS
from services.claim.core.metrics import ClaimMemo
from services.domain.agentsandbox.warmpool import template_ref_name
from services.runtime.cache import ObjectCache

__all__ = ["ClaimObservation", "ClaimSettings", "Offer", "assigned_name", "observe_claim"]


class ClaimSettings(msgspec.Struct, frozen=True, kw_only=True):
    allowed_label_domains: tuple[str, ...] = DEFAULT_ALLOWED_LABEL_DOMAINS
    """Domains a claim's additionalPodMetadata labels may use (upstream's allow-list file)."""
    pod_ip_grace: float = 2.0
    """Seconds after its creation a claim waits for an offered Sandbox's pod IP before it
    starts cold instead (upstream's warm-candidate grace)."""
    pending_retry: float = 0.5
    missing_retry: float = 60.0
    """Seconds between looks for a missing pool or template (events normally come first)."""
    events: bool = True
    """Record Kubernetes Events (``--disable-claim-events`` turns them off upstream)."""
    observability_annotations: bool = True
    """Stamp ``controller-first-observed-at`` on the claim (upstream's
    ``--disable-claim-observability-annotations``)."""


class Offer(msgspec.Struct, frozen=True, kw_only=True):
    """A warm-queue entry held for the claim: the Sandbox incarnation the pool queued."""

    token: str
    subject: str
    name: str
    uid: str
    resource_version: str
    sandbox: Json | None
    known_gone: bool = False
    """A read of ours found the Sandbox gone (not merely unseen yet)."""


class ClaimObservation(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    claim: Json | None
    pool: Json | None = None
    template: Json | None = None
    bound: Json | None = None
    """The Sandbox ``status.sandbox.name`` names."""
    assigned: Json | None = None
    """The Sandbox the ``sandbox-name`` annotation (or legacy label) names."""
    assigned_gone: bool = False
    same_name: Json | None = None
    """The Sandbox named like the claim (a cold start's)."""
    controlled: tuple[Json, ...] = ()
    """Every Sandbox this incarnation of the claim controls."""
    offers: tuple[Offer, ...] = ()
    unreadable: tuple[SourceMessage, ...] = ()
    """Held messages that are no queue entry (acked away, never adopted)."""
    settings: ClaimSettings = ClaimSettings()
    last_error: str | None = None
    failure_persists: bool = False
    """The passes have failed in a row for a while (``Observed.failure_persists``)."""
    memo: ClaimMemo | None = None
    reports: Mapping[str, TaskReport] = msgspec.field(default_factory=dict)
    """What its sandbox's task executor said last (a template that takes env as a task)."""
    legacy_policy: Json | None = None
    """The legacy per-claim NetworkPolicy ``<claim>-network-policy``, when this claim controls
    it (upstream's controller made one per claim; it is deleted)."""


def assigned_name(claim: Json) -> tuple[str, bool]:
    """The Sandbox the claim's annotation names, and whether it came from the legacy label."""
    annotation = (metadata_of(claim).get("annotations") or {}).get(ANNOTATION_SANDBOX_NAME)
    if annotation:
        return str(annotation), False
    legacy = labels_of(claim).get(LEGACY_LABEL_SANDBOX_NAME)
    return (str(legacy), True) if legacy else ("", False)


def _offer(message: SourceMessage, namespace: str, cache: ObjectCache) -> Offer | None:
    data: Any = message.data
    entry = data.get("data") if isinstance(data, dict) else None
    try:
        name = parse_warm_subject(message.subject).sandbox
    except SubjectError:
        return None
    if not isinstance(entry, dict) or not entry.get("uid"):
        return None
    key = ObjectKey("Sandbox", namespace, name)
    return Offer(
        token=message.token,
        subject=message.subject,
        name=name,
        uid=str(entry["uid"]),
        resource_version=str(entry.get("resourceVersion") or ""),
        sandbox=cache.get(key),
        known_gone=cache.known_gone(key),
    )


def observe_claim(
    key: ObjectKey,
    cache: ObjectCache,
    *,
    settings: ClaimSettings,
    messages: tuple[SourceMessage, ...] = (),
    last_error: str | None = None,
    failure_persists: bool = False,
    memo: ClaimMemo | None = None,
    reports: Mapping[str, TaskReport] | None = None,
) -> ClaimObservation:
    ns = key.namespace
    claim = cache.get(key)
    offers: list[Offer] = []
    unreadable: list[SourceMessage] = []
    for message in messages:
        offer = _offer(message, ns, cache)
        if offer is None:
            unreadable.append(message)
        else:
            offers.append(offer)
    if claim is None:
        return ClaimObservation(
            namespace=ns,
            name=key.name,
            claim=None,
            offers=tuple(offers),
            unreadable=tuple(unreadable),
            settings=settings,
        )
    spec = claim.get("spec") or {}
    pool_name = str((spec.get("warmPoolRef") or {}).get("name") or "")
    pool = cache.get(ObjectKey("SandboxWarmPool", ns, pool_name)) if pool_name else None
    ref = template_ref_name(pool) if pool is not None else ""
    template = cache.get(ObjectKey("SandboxTemplate", ns, ref)) if ref else None
    bound_name = str(((claim.get("status") or {}).get("sandbox") or {}).get("name") or "")
    bound = cache.get(ObjectKey("Sandbox", ns, bound_name)) if bound_name else None
    assigned, _ = assigned_name(claim)
    assigned_key = ObjectKey("Sandbox", ns, assigned)
    uid = str(metadata_of(claim).get("uid") or "")
    return ClaimObservation(
        namespace=ns,
        name=key.name,
        claim=claim,
        pool=pool,
        template=template,
        bound=bound,
        assigned=cache.get(assigned_key) if assigned else None,
        assigned_gone=bool(assigned) and cache.known_gone(assigned_key),
        same_name=cache.get(ObjectKey("Sandbox", ns, key.name)),
        controlled=tuple(cache.owned_by("Sandbox", uid)) if uid else (),
        offers=tuple(offers),
        unreadable=tuple(unreadable),
        settings=settings,
        last_error=last_error,
        failure_persists=failure_persists,
        memo=memo,
        reports=dict(reports or {}),
        legacy_policy=_legacy_policy(cache, ns, key.name, uid),
    )


def _legacy_policy(cache: ObjectCache, namespace: str, claim: str, uid: str) -> Json | None:
    policy = cache.get(ObjectKey("NetworkPolicy", namespace, f"{claim}-network-policy"))
    owner = controller_of(policy) if policy is not None else None
    if owner is None or owner.get("kind") != "SandboxClaim" or owner.get("uid") != uid:
        return None  # none, or someone else's under the reserved name: left alone
    return policy
