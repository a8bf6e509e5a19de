"""``agent_sandboxes``: how many Sandboxes there are, by what agent-sandbox's dashboards group
them by (docs/agent-sandbox.md §6; upstream's sandbox_collector lists every Sandbox at each
scrape). Here the sandbox worker counts the Sandboxes of its cache, which the bus keeps
current, so a scrape costs no API request."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final

from api.keys import (
    ANNOTATION_SANDBOX_TEMPLATE_REF,
    LABEL_CREATED_BY,
    LABEL_LAUNCH_TYPE,
    normalize_created_by,
)
from api.objects import condition_of, controller_of, labels_of, metadata_of

__all__ = ["SANDBOX_LABELS", "count_sandboxes"]

SANDBOX_LABELS: Final = (
    "namespace",
    "ready_condition",
    "expired",
    "launch_type",
    "sandbox_template",
    "owned_by",
    "created_by",
)


def _labels(sandbox: Mapping[str, Any]) -> tuple[str, ...]:
    meta = metadata_of(sandbox)
    ready = condition_of(sandbox, "Ready")
    owner = controller_of(sandbox)
    owned_by = str(owner.get("kind")) if owner is not None else "None"
    created_by = labels_of(sandbox).get(LABEL_CREATED_BY)
    return (
        str(meta.get("namespace") or ""),
        "true" if ready is not None and ready.get("status") == "True" else "false",
        "true" if ready is not None and ready.get("reason") == "SandboxExpired" else "false",
        str(labels_of(sandbox).get(LABEL_LAUNCH_TYPE) or "unknown"),
        str((meta.get("annotations") or {}).get(ANNOTATION_SANDBOX_TEMPLATE_REF) or "unknown"),
        owned_by if owned_by in ("SandboxClaim", "SandboxWarmPool") else "None",
        normalize_created_by(str(created_by)) if created_by else "",
    )


def count_sandboxes(sandboxes: Iterable[Mapping[str, Any]]) -> dict[tuple[str, ...], float]:
    """Sandboxes per combination of :data:`SANDBOX_LABELS` values (deleting ones included, as
    upstream lists them)."""
    return {labels: float(n) for labels, n in Counter(map(_labels, sandboxes)).items()}
