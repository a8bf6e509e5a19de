"""Kubernetes timestamps: reading the RFC 3339 text of ``metav1.Time`` and writing Go's
RFC3339Nano, which annotations such as ``claim-first-ready-at`` carry."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = ["parse_time", "rfc3339_nano"]


def parse_time(text: Any) -> datetime | None:
    """The moment ``text`` names; None when it is missing or not a timestamp."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def rfc3339_nano(moment: datetime) -> str:
    """Go's RFC3339Nano: UTC, fractional seconds without trailing zeros."""
    text = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"
