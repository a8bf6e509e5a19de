"""agent-sandbox's claim metrics (docs/agent-sandbox.md §6), under upstream's names, labels and
buckets so that its dashboards and alerts work unchanged, and the rules of when they count.

- ``agent_sandbox_claim_creation_total``: one per cold create and per warm adoption, once the
  Sandbox write is committed.
- The latency histograms, on the claim's first Ready only: its status must go from not Ready
  to Ready in this pass (and be accepted), and the claim must not have been Ready before.
  Upstream remembers that in a ``claim-first-ready-at`` annotation, one more write of the claim
  per claim (a third of a burst's API load here, measured); sandbus remembers it in the claim's
  memo on the bus (:class:`ClaimMemo`), set by the first pass that sees the claim Ready, so a
  readiness flap never counts twice. A claim that carries upstream's annotation (one taken
  over) counts as recorded too. The startup latencies run from a moment on the claim
  (the webhook's, the controller's first look, the client's request) to when the Ready status
  was written: the ``Record`` measures at that moment (``since``), as upstream takes
  ``time.Since`` after its status write. A moment in the future is not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

import msgspec

from api.keys import (
    ANNOTATION_CLAIM_FIRST_READY_AT,
    ANNOTATION_CLIENT_FIRST_REQUESTED_AT,
    ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT,
    ANNOTATION_SANDBOX_TEMPLATE_REF,
    ANNOTATION_WEBHOOK_FIRST_OBSERVED_AT,
    CREATED_BY_UNKNOWN,
    CREATED_BY_VALUES,
    LABEL_CREATED_BY,
    LABEL_LAUNCH_TYPE,
    LAUNCH_TYPE_COLD,
    LAUNCH_TYPE_WARM,
)
from api.objects import condition_of, is_ready, labels_of, metadata_of
from events.envelope import ObjectKey
from services.runtime.metrics import MetricSpec
from services.runtime.reconcile.actions import Record
from services.runtime.times import parse_time

__all__ = [
    "CLAIM_METRICS",
    "CLAIM_STARTUP",
    "CLIENT_STARTUP",
    "CONTROLLER_STARTUP",
    "CREATIONS",
    "SANDBOX_CREATION",
    "ClaimMemo",
    "controller_first_observed",
    "created_by",
    "creation_record",
    "first_ready_records",
    "launch_type",
    "ready_before",
    "template_name",
]

CLAIM_STARTUP: Final = "agent_sandbox_claim_startup_latency_ms"
CONTROLLER_STARTUP: Final = "agent_sandbox_claim_controller_startup_latency_ms"
CLIENT_STARTUP: Final = "agent_sandbox_client_claim_startup_latency_ms"
SANDBOX_CREATION: Final = "agent_sandbox_creation_latency_ms"
CREATIONS: Final = "agent_sandbox_claim_creation_total"

_STARTUP_BUCKETS: Final = (
    100.0, 250.0, 500.0, 750.0, 1000.0, 1250.0, 1500.0, 2000.0, 2500.0, 5000.0,
    10000.0, 30000.0, 60000.0, 120000.0, 240000.0,
)  # fmt: skip
_CREATION_BUCKETS: Final = (
    50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0, 60000.0,
    120000.0, 240000.0, 300000.0, 600000.0,
)  # fmt: skip
_STARTUP_LABELS: Final = ("launch_type", "sandbox_template")
_MS: Final = 1000.0

CLAIM_METRICS: Final = (
    MetricSpec(
        CLAIM_STARTUP,
        "histogram",
        "Milliseconds from the webhook's first sight of a claim to its first Ready.",
        _STARTUP_LABELS,
        _STARTUP_BUCKETS,
        per_second=_MS,
    ),
    MetricSpec(
        CONTROLLER_STARTUP,
        "histogram",
        "Milliseconds from the controller's first sight of a claim to its first Ready.",
        _STARTUP_LABELS,
        _STARTUP_BUCKETS,
        per_second=_MS,
    ),
    MetricSpec(
        CLIENT_STARTUP,
        "histogram",
        "Milliseconds from the client's request of a claim to its first Ready.",
        _STARTUP_LABELS,
        _STARTUP_BUCKETS,
        per_second=_MS,
    ),
    MetricSpec(
        SANDBOX_CREATION,
        "histogram",
        "Milliseconds from a claimed Sandbox's creation to its Ready (for a warm one: the "
        "pool's fill time).",
        ("namespace", *_STARTUP_LABELS),
        _CREATION_BUCKETS,
        per_second=_MS,
    ),
    MetricSpec(
        CREATIONS,
        "counter",
        "SandboxClaims given a Sandbox, by namespace, template, launch type, warm pool, the "
        "Sandbox's readiness then, and who created the claim.",
        (
            "namespace",
            "sandbox_template",
            "launch_type",
            "warmpool_name",
            "pod_condition",
            "created_by",
        ),
    ),
)
"""What the claim worker declares (its ``/metrics``)."""


def launch_type(sandbox: Mapping[str, Any] | None) -> str:
    if sandbox is None:
        return "unknown"
    return LAUNCH_TYPE_WARM if labels_of(sandbox).get(LABEL_LAUNCH_TYPE) == "warm" else "cold"


def template_name(sandbox: Mapping[str, Any] | None) -> str:
    annotations = metadata_of(sandbox or {}).get("annotations") or {}
    return str(annotations.get(ANNOTATION_SANDBOX_TEMPLATE_REF) or "__unknown__")


def created_by(claim: Mapping[str, Any]) -> str:
    """The claim's ``created-by`` label, if it is one upstream knows; else ``unknown``."""
    value = labels_of(claim).get(LABEL_CREATED_BY)
    return str(value) if value in CREATED_BY_VALUES else CREATED_BY_UNKNOWN


def creation_record(
    key: ObjectKey,
    claim: Mapping[str, Any],
    sandbox: Mapping[str, Any],
    *,
    warm_pool: str,
    template: str,
) -> Record:
    """The count of one claim given ``sandbox``: adopted (its launch type warm) or created."""
    warm = labels_of(sandbox).get(LABEL_LAUNCH_TYPE) == LAUNCH_TYPE_WARM
    return Record(
        CREATIONS,
        {
            "namespace": key.namespace,
            "sandbox_template": template,
            "launch_type": LAUNCH_TYPE_WARM if warm else LAUNCH_TYPE_COLD,
            "warmpool_name": warm_pool,
            "pod_condition": "ready" if warm and is_ready(sandbox) else "not_ready",
            "created_by": created_by(claim),
        },
        key,
        why="count the claim's Sandbox, as upstream does",
    )


class ClaimMemo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """What the claim worker remembers of a claim between passes (on the bus)."""

    was_ready: bool = False
    """The claim has been Ready: its first-Ready latencies are recorded (or it was taken over
    Ready), and are never recorded again."""
    env_delivered: bool = False
    """Its ``env`` reached its sandbox's task executor (services/claim/core/envtask.py)."""


def ready_before(claim: Mapping[str, Any], memo: ClaimMemo | None) -> bool:
    """Whether the claim has been Ready before this pass (see the module doc)."""
    annotations = metadata_of(claim).get("annotations") or {}
    return (
        (memo is not None and memo.was_ready)
        or is_ready(claim)
        or bool(annotations.get(ANNOTATION_CLAIM_FIRST_READY_AT))
    )


def first_ready_records(
    key: ObjectKey,
    claim: Mapping[str, Any],
    desired_status: Mapping[str, Any],
    sandbox: Mapping[str, Any] | None,
    *,
    first_observed: datetime | None,
    memo: ClaimMemo | None,
) -> list[Record]:
    """The latencies to record in this pass (after its status write). ``first_observed`` is
    the controller's first sight of the claim (on it already, or stamped in this pass)."""
    annotations = metadata_of(claim).get("annotations") or {}
    if ready_before(claim, memo) or not is_ready({"status": desired_status}):
        return []
    labels = {"launch_type": launch_type(sandbox), "sandbox_template": template_name(sandbox)}
    why = "the claim's first Ready"
    records: list[Record] = []
    starts = (
        (CLAIM_STARTUP, parse_time(annotations.get(ANNOTATION_WEBHOOK_FIRST_OBSERVED_AT))),
        (CONTROLLER_STARTUP, first_observed),
        (CLIENT_STARTUP, parse_time(annotations.get(ANNOTATION_CLIENT_FIRST_REQUESTED_AT))),
    )
    for metric, since in starts:
        if since is not None:
            records.append(Record(metric, labels, key, since=since, why=why))
    created = _sandbox_creation_ms(sandbox)
    if created is not None:
        namespace = str(metadata_of(sandbox or {}).get("namespace") or key.namespace)
        records.append(
            Record(SANDBOX_CREATION, {"namespace": namespace, **labels}, key, created, why=why)
        )
    return records


def controller_first_observed(claim: Mapping[str, Any]) -> datetime | None:
    annotations = metadata_of(claim).get("annotations") or {}
    return parse_time(annotations.get(ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT))


def _sandbox_creation_ms(sandbox: Mapping[str, Any] | None) -> float | None:
    if sandbox is None:
        return None
    created = parse_time(metadata_of(sandbox).get("creationTimestamp"))
    ready_condition = condition_of(sandbox, "Ready")
    if ready_condition is None or ready_condition.get("status") != "True":
        return None
    ready = parse_time(ready_condition.get("lastTransitionTime"))
    if created is None or ready is None or ready < created:
        return None
    return (ready - created).total_seconds() * _MS
