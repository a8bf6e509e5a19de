"""The watcher's decisions: which events an observation calls for, given what was published.

The watcher remembers, per object key, the identity of the last state it published: the
``uid`` and the ``resourceVersion`` (:class:`Seen`). Everything it publishes is decided here by
comparing an observation with that memory, in two situations:

**A relist** (start-up, a 410 Gone, a new leader) compares the published view with a fresh list
(:func:`diff`, or page by page :func:`listed_changes` then :func:`vanished_changes`):

- a key that is new gets ``added``;
- the same ``uid`` with another ``resourceVersion`` gets ``modified``, carrying the listed state:
  changes that happened while nobody was watching collapse into this one event, for the latest
  state, which is all a relist can know;
- another ``uid`` under the same key means the old object was deleted and a new one created
  under its name while nobody was watching: a synthetic ``deleted`` for the old one, then
  ``added`` for the new one;
- a published key that is not listed any more gets a synthetic ``deleted``;
- an unchanged object gets nothing. This is what Argo Events gets wrong (it re-sends every
  object on a relist) and Knative gets wrong the other way (it sends nothing and loses the gap).

**A watch event** (:func:`watch_changes`) is normally published as it is, but it is checked
against the same memory, so that the watcher never publishes a state twice (a resourceVersion it
already published, as after a reconnect that replays) and never publishes a change of an object
it has no record of as anything but its first appearance.

Here resourceVersions are only compared for equality. When a resource is watched through
several selections whose streams are not in order with each other, :mod:`.merging` decides
*whether* an observation is news (a newer state, a deletion no selection contradicts) and calls
these functions for *what* it is; a resource watched once gets exactly the decisions above.

A synthetic deletion carries the last state the watcher *published* (its id therefore ends in
that resourceVersion), which the view does not hold: :class:`Change` leaves ``object`` empty
and the shell reads that state back from the state table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from events.envelope import ObjectKey
from events.ids import ChangeKind, change_event_id

__all__ = [
    "Change",
    "DiffError",
    "Seen",
    "WatchEventType",
    "apply",
    "diff",
    "key_of",
    "listed_changes",
    "record",
    "seen_of",
    "vanished_changes",
    "watch_changes",
]

WatchEventType = Literal["ADDED", "MODIFIED", "DELETED"]


class DiffError(ValueError):
    """An object without the identity the watcher needs (name, uid, resourceVersion)."""


class Seen(NamedTuple):
    """The identity of the last state published for a key."""

    uid: str
    resource_version: str


@dataclass(frozen=True, slots=True)
class Change:
    """One event to publish.

    ``object`` is the observed object, or None for a synthetic deletion, whose object is the
    last published state (the shell reads it back). ``uid`` and ``resource_version`` are those
    of the state the event carries, so ``event_id`` is known before the object is.
    """

    change: ChangeKind
    key: ObjectKey
    uid: str
    resource_version: str
    object: Mapping[str, Any] | None = None
    synthetic: bool = False

    @property
    def event_id(self) -> str:
        return change_event_id(self.uid, self.resource_version, self.change)


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        raise DiffError("the object has no metadata")
    return metadata


def _text(metadata: Mapping[str, Any], field: str) -> str:
    value = metadata.get(field)
    if not isinstance(value, str) or not value:
        raise DiffError(f"the object has no metadata.{field}")
    return value


def key_of(kind: str, obj: Mapping[str, Any]) -> ObjectKey:
    metadata = _metadata(obj)
    namespace = metadata.get("namespace") or ""
    if not isinstance(namespace, str):
        raise DiffError("the object's metadata.namespace is not a string")
    return ObjectKey(kind, namespace, _text(metadata, "name"))


def seen_of(obj: Mapping[str, Any]) -> Seen:
    metadata = _metadata(obj)
    return Seen(_text(metadata, "uid"), _text(metadata, "resourceVersion"))


def _observed(
    change: ChangeKind, key: ObjectKey, obj: Mapping[str, Any], seen: Seen | None = None
) -> Change:
    seen = seen or seen_of(obj)
    return Change(change, key, seen.uid, seen.resource_version, obj)


def _synthetic_deletion(key: ObjectKey, seen: Seen) -> Change:
    return Change("deleted", key, seen.uid, seen.resource_version, None, synthetic=True)


def listed_changes(
    key: ObjectKey, published: Seen | None, obj: Mapping[str, Any], seen: Seen | None = None
) -> list[Change]:
    """The events for one listed object whose last published state is ``published``
    (``seen``: the object's identity, when the caller has read it already)."""
    seen = seen or seen_of(obj)
    if published is None:
        return [_observed("added", key, obj, seen)]
    if published.uid != seen.uid:
        return [_synthetic_deletion(key, published), _observed("added", key, obj, seen)]
    if published.resource_version != seen.resource_version:
        return [_observed("modified", key, obj, seen)]
    return []


def vanished_changes(
    view: Mapping[ObjectKey, Seen], listed: Iterable[ObjectKey] | set[ObjectKey]
) -> list[Change]:
    """Synthetic deletions for the published keys that a complete list did not contain."""
    present = listed if isinstance(listed, set | frozenset) else set(listed)
    return [_synthetic_deletion(key, view[key]) for key in sorted(view) if key not in present]


def diff(
    view: Mapping[ObjectKey, Seen], fresh: Mapping[ObjectKey, Mapping[str, Any]]
) -> list[Change]:
    """Every event that brings the published ``view`` to the ``fresh`` list, keys in order."""
    changes: list[Change] = []
    for key in sorted(fresh):
        changes.extend(listed_changes(key, view.get(key), fresh[key]))
    changes.extend(vanished_changes(view, set(fresh)))
    return changes


def watch_changes(
    key: ObjectKey,
    published: Seen | None,
    event_type: WatchEventType,
    obj: Mapping[str, Any],
    *,
    selected: bool = True,
) -> list[Change]:
    """The events for one watch event, checked against the last published state.

    ``selected`` is False when the object (in the state the event carries) is not one of ours
    any more, or not yet: leaving the selection is published as a deletion, like a label-selector
    watch of the API server reports it.
    """
    seen = seen_of(obj)
    stale = (
        [_synthetic_deletion(key, published)]
        if published is not None and published.uid != seen.uid
        else []
    )
    current = published if not stale else None
    if event_type == "DELETED" or not selected:
        if current is not None or (event_type == "DELETED" and selected):
            return [*stale, _observed("deleted", key, obj)]
        return stale
    if current is None:
        return [*stale, _observed("added", key, obj)]
    if current.resource_version == seen.resource_version:
        return []
    return [_observed("modified", key, obj)]


def record(view: MutableMapping[ObjectKey, Seen], change: Change) -> None:
    """Update ``view`` in place to say that ``change`` is published."""
    if change.change == "deleted":
        view.pop(change.key, None)
    else:
        view[change.key] = Seen(change.uid, change.resource_version)


def apply(view: Mapping[ObjectKey, Seen], changes: Iterable[Change]) -> dict[ObjectKey, Seen]:
    """The published view after ``changes`` are published."""
    result = dict(view)
    for change in changes:
        record(result, change)
    return result
