"""Deterministic event ids, and the digest that identifies a decision's inputs.

JetStream drops a second message with the same ``Nats-Msg-Id`` inside the stream's duplicate
window, so an id that is derived from *what happened* turns every retry, relist and
dual-leader overlap into a no-op. Random ids (what Argo Events and Knative use) would let each
of those through as a new event. The id of an observed change is::

    <metadata.uid>:<metadata.resourceVersion>:<change>      e.g. 5f0c…:4711:modified

A uid is never reused and the API server gives every write a new resourceVersion, so two
different changes never share an id, and one change always gets the same id. The window
outlives the ack, so an id must never be reused for a change that is really new; this scheme
cannot, because a new change always has a new resourceVersion.

A decision's id is derived from the worker, the object and the digest of the inputs that the
pure planner saw: the same planner run on the same inputs is the same decision, recorded once.
"""

from __future__ import annotations

import hashlib
from typing import Literal, NamedTuple, cast, get_args

import msgspec

__all__ = [
    "ChangeEventId",
    "ChangeKind",
    "EventIdError",
    "change_event_id",
    "decision_event_id",
    "inputs_digest",
    "parse_change_event_id",
]

ChangeKind = Literal["added", "modified", "deleted"]
_CHANGES: frozenset[str] = frozenset(get_args(ChangeKind))


class EventIdError(ValueError):
    """An id, or a part of one, that does not follow the scheme."""


class ChangeEventId(NamedTuple):
    uid: str
    resource_version: str
    change: ChangeKind


def _check_part(what: str, value: str) -> None:
    if not value:
        raise EventIdError(f"{what} is empty")
    if ":" in value:
        raise EventIdError(f"{what} {value!r} contains ':', the id separator")


def change_event_id(uid: str, resource_version: str, change: ChangeKind) -> str:
    """The id of an observed change: ``<uid>:<resourceVersion>:<change>``."""
    _check_part("uid", uid)
    _check_part("resourceVersion", resource_version)
    if change not in _CHANGES:
        raise EventIdError(f"change {change!r} is not one of {sorted(_CHANGES)}")
    return f"{uid}:{resource_version}:{change}"


def parse_change_event_id(event_id: str) -> ChangeEventId:
    parts = event_id.split(":")
    if len(parts) != 3 or not all(parts):
        raise EventIdError(f"{event_id!r} is not <uid>:<resourceVersion>:<change>")
    uid, resource_version, change = parts
    if change not in _CHANGES:
        raise EventIdError(f"{event_id!r} ends in {change!r}, not one of {sorted(_CHANGES)}")
    return ChangeEventId(uid, resource_version, cast(ChangeKind, change))


def inputs_digest(inputs: object) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``inputs`` (keys sorted, msgspec encoding).

    A worker digests a pass's inputs by reference (the resourceVersion of each object read, and
    the key's memory: :class:`events.types.DecisionInputs`) with its time. The canonical form
    makes the digest independent of dict insertion order, so a replay that rebuilds the same
    inputs gets the same digest.
    """
    canonical = msgspec.json.encode(inputs, order="sorted")
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def decision_event_id(worker: str, kind: str, namespace: str | None, name: str, digest: str) -> str:
    """``<worker>:<Kind>/<namespace>/<name>:<inputs digest>``; cluster-scoped: ``<Kind>/<name>``."""
    for what, value in (("worker", worker), ("kind", kind), ("name", name), ("digest", digest)):
        if not value:
            raise EventIdError(f"{what} is empty")
    key = f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
    return f"{worker}:{key}:{digest}"
