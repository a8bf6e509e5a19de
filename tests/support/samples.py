"""Kubernetes objects for tests: timestamps as the API server writes them, reading conditions
back, and the sample objects that tests in several directories build.

The readers tolerate ``None`` (an object not there yet) where tests poll for an object, and
otherwise answer as :mod:`api.objects` does: the test reads a condition the way the code under
test reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from api import objects
from api.objects import Json

__all__ = [
    "NS",
    "Json",
    "condition",
    "condition_status",
    "conditions_by_type",
    "is_ready",
    "obj",
    "sandbox_body",
    "stamp",
]

NS = "default"


def stamp(moment: datetime) -> str:
    """``moment`` as a Kubernetes timestamp (RFC 3339, UTC, whole seconds)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- reading conditions -------------------------------------------------------------------------


def condition(obj: Mapping[str, Any] | None, kind: str = "Ready") -> tuple[str, str] | None:
    """The ``(status, reason)`` of condition ``kind`` of ``obj`` (None: no such condition, or
    no object)."""
    entry = objects.condition_of(obj or {}, kind)
    return None if entry is None else (entry.get("status"), entry.get("reason"))  # type: ignore[return-value]


def condition_status(obj: Mapping[str, Any] | None, kind: str) -> str | None:
    """The status (``"True"``, ``"False"``, ``"Unknown"``) of condition ``kind`` of ``obj``."""
    entry = objects.condition_of(obj or {}, kind)
    return None if entry is None else str(entry.get("status"))


def conditions_by_type(obj: Mapping[str, Any] | None) -> dict[str, Json]:
    """Every entry of ``obj``'s ``status.conditions``, by type."""
    found = ((obj or {}).get("status") or {}).get("conditions") or ()
    return {entry["type"]: entry for entry in found}


def is_ready(obj: Mapping[str, Any] | None) -> bool:
    """Is ``obj`` there with its ``Ready`` condition ``"True"``?"""
    return obj is not None and objects.is_ready(obj)


# -- sample objects ------------------------------------------------------------------------------


def obj(kind: str, name: str, rv: str = "1", **extra: Any) -> Json:
    """A bare object of ``kind`` in namespace ``ns``, as a fake API server stores it (uid
    ``<name>-uid``, resourceVersion ``rv``); ``extra`` are its other top-level fields."""
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid", "resourceVersion": rv},
        **extra,
    }


def sandbox_body(name: str, *, containers: list[Json] | None = None, **spec: Any) -> Json:
    """A Sandbox to create in namespace :data:`NS`: one container ``app`` serving port 8888,
    unless ``containers`` says otherwise; ``spec`` are its other spec fields."""
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "podTemplate": {
                "spec": {
                    "containers": containers
                    if containers is not None
                    else [
                        {"name": "app", "image": "python:3.12", "ports": [{"containerPort": 8888}]}
                    ]
                }
            },
            **spec,
        },
    }
