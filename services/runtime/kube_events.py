"""Kubernetes Events (``events.k8s.io/v1``) as a controller's recorder writes them, built purely.

A planner that reports something to a person (a Warning "MultiplePods", a pool that stopped
progressing) returns the Event as a :class:`~services.runtime.reconcile.actions.Create`; this
builds its body the way client-go's recorder names and fills it: ``<object>.<unix nanoseconds
in hex>``, from the planner's clock, so the same pass makes the same Event.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from api.objects import Json, metadata_of

__all__ = ["event_about", "warning_when_raised"]


def event_about(
    obj: Mapping[str, Any],
    *,
    reason: str,
    note: str,
    type: Literal["Normal", "Warning"],
    now: datetime,
    controller: str,
    action: str = "Reconciling",
) -> Json:
    """The Event ``controller`` records about ``obj`` at ``now``."""
    meta = metadata_of(obj)
    nanos = int(now.astimezone(UTC).timestamp() * 1_000_000_000)
    name = str(meta.get("name") or "")
    suffix = f".{nanos:x}"
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": name[: 253 - len(suffix)] + suffix,
            "namespace": meta.get("namespace"),
        },
        "eventTime": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": controller,
        "reportingInstance": controller,
        "action": action,
        "reason": reason,
        "note": note,
        "type": type,
        "regarding": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": name,
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
    }


def warning_when_raised(
    obj: Mapping[str, Any],
    before: Mapping[str, Any] | None,
    *,
    condition: str,
    reason: str,
    message: str,
    now: datetime,
    controller: str,
    action: str = "Reconciling",
) -> Json | None:
    """The Warning Event that says a problem condition was raised on ``obj``: ``condition``
    True for ``reason``, which ``before`` (the condition as the object holds it, None: absent)
    did not say yet; None when it did. Once per transition, and again when the reason changes,
    so that a cause that flips is told too."""
    if before is not None and before.get("status") == "True" and before.get("reason") == reason:
        return None
    return event_about(
        obj,
        reason=reason,
        note=f"{condition}: {message}",
        type="Warning",
        now=now,
        controller=controller,
        action=action,
    )
