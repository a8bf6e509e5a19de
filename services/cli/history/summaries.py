"""One short phrase about an object's status, for the one-line formats of tail, replay and state
(pure).

Every kind we serve reports readiness the Kubernetes way, with a ``Ready`` condition; Pods and
Jobs report a ``phase`` (or, for Jobs, ``Complete``/``Failed`` conditions); pools report how
many replicas are ready. The summary picks the first of those the object has, so the same
function serves every kind without a table per kind, and says ``deleting`` when a deletion is
pending on finalizers, which is the state people most often need to spot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.objects import condition_of

__all__ = ["object_summary"]


def _condition_phrase(item: Mapping[str, Any]) -> str:
    phrase = f"{item.get('type')}={item.get('status')}"
    reason = item.get("reason")
    if reason and item.get("status") != "True":
        phrase += f" ({reason})"
    return phrase


def object_summary(obj: Mapping[str, Any]) -> str:
    """``Ready=True``, ``Ready=False (PodPending)``, ``phase=Running``, ``ready 3/5``, or ``""``."""
    parts: list[str] = []
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("deletionTimestamp"):
        parts.append("deleting")
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    ready = condition_of(obj, "Ready")
    if ready is not None:
        parts.append(_condition_phrase(ready))
    elif isinstance(status.get("phase"), str):
        parts.append(f"phase={status['phase']}")
    else:
        for condition_type in ("Complete", "Failed"):
            item = condition_of(obj, condition_type)
            if item is not None and item.get("status") == "True":
                parts.append(condition_type)
                break
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    if ready is None and isinstance(spec.get("replicas"), int):
        ready_replicas = status.get("readyReplicas", 0)
        parts.append(f"ready {ready_replicas}/{spec['replicas']}")
    return " ".join(parts)
