"""Every object as it was at an instant: the event log folded up to that instant (pure).

The fold walks the log in stream order and keeps, per object (kind, namespace, name), the
last state whose observation time (``event.time``, see :mod:`services.cli.history.records`) is not
after the instant: an added or modified event sets the object, a deleted event removes it.

Two details make the fold agree with Kubernetes rather than with a naive reading of the log:

- An object is one *incarnation*, identified by its uid. A deletion removes the object only
  if it is the deletion of the incarnation currently held. After a watcher restart, the
  relist may publish "``app`` was created (new uid)" before "``app`` vanished while I was away
  (old uid, synthetic)"; the late synthetic deletion of the old incarnation must not delete
  the new one.
- The log is read in stream order, and the observation time only decides *whether* an event
  counts. Per object, stream order is the order the watcher saw the changes in, which is the
  API server's order; the observation times of two watcher replicas may disagree by clock
  skew, stream order cannot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events.envelope import ObjectKey
from events.types import ObjectAdded, ObjectDeleted, ObjectModified
from services.cli.history.records import LogRecord

__all__ = ["ObjectVersion", "object_key", "state_at"]


def object_key(kind: str, namespace: str | None, name: str) -> ObjectKey:
    return ObjectKey(kind, namespace or "", name)


@dataclass(frozen=True, kw_only=True)
class ObjectVersion:
    """One object as the log last showed it: its body, and when it was seen."""

    key: ObjectKey
    object: dict[str, Any]
    observed: datetime
    """When this version was observed."""
    first_observed: datetime
    """When this incarnation was first observed (its age when creationTimestamp is missing)."""
    seq: int

    @property
    def uid(self) -> str | None:
        return _uid(self.object)

    @property
    def resource_version(self) -> str:
        metadata = self.object.get("metadata") or {}
        return str(metadata.get("resourceVersion", ""))


def _uid(obj: dict[str, Any]) -> str | None:
    metadata = obj.get("metadata")
    uid = metadata.get("uid") if isinstance(metadata, dict) else None
    return uid if isinstance(uid, str) else None


def state_at(records: Iterable[LogRecord], at: datetime) -> dict[ObjectKey, ObjectVersion]:
    """The objects that existed at ``at``, by key, from ``records`` in stream order."""
    objects: dict[ObjectKey, ObjectVersion] = {}
    for record in records:
        event = record.event
        if not isinstance(event, ObjectAdded | ObjectModified | ObjectDeleted):
            continue
        if event.time > at:
            continue
        key = object_key(event.kind, event.namespace or None, event.name)
        body = event.data.object
        held = objects.get(key)
        same_incarnation = held is not None and held.uid == _uid(body)
        if isinstance(event, ObjectDeleted):
            if same_incarnation:
                del objects[key]
            continue
        objects[key] = ObjectVersion(
            key=key,
            object=body,
            observed=event.time,
            first_observed=held.first_observed
            if held is not None and same_incarnation
            else event.time,
            seq=record.seq,
        )
    return objects
