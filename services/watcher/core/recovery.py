"""What a watcher that starts (or takes over) has published before: the recovery, without I/O.

Every change is written once, to the event log; the server copies each observed change into
the state table (the latest event per object, :mod:`services.runtime.bus`), and a relist is
diffed against what the two say together. The copy lags the log by what the server has not
copied yet, so the state table alone may miss an object's last change, or worse a deletion
(nothing in it would then say a synthetic deletion is owed). Each copy names the log sequence
it came from, and the server copies in the log's order, so everything up to the highest
sequence found in the table is in it; the recovery reads the table, then the log's observed
changes after that sequence, and the newest event per object wins (:func:`recover`). A state
table that was lost is derived again from the log by the server, and until then the
recovery reads more of the log: slow once, but correct.

Two leaders for a moment. During a handover the old leader may still write what it decided
before it noticed the loss. Both write through the subject-sequence fence, and when it finds
another writer's message, the publisher does not append a state of the object older than the
one logged (:func:`keeps_stored_state`): the log's last event of an object is its latest
state, and so is the derived table's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import msgspec

from api.objects import compare_resource_versions
from events.envelope import ObjectKey
from events.ids import ChangeEventId, ChangeKind, EventIdError, parse_change_event_id
from events.types import ObjectAdded, ObjectDeleted, ObjectEvent
from services.watcher.core.diffing import Seen

__all__ = [
    "Recovered",
    "StoredEvent",
    "StoredEventError",
    "keeps_stored_state",
    "recover",
    "state_identity",
    "stored_event",
]


class StoredEventError(ValueError):
    """A message in the event log or the state table that is not an observed change."""


class _Identity(msgspec.Struct):
    """The few attributes of a stored CloudEvent the recovery needs; the rest is skipped."""

    id: str
    kind: str
    name: str
    namespace: str | None = None


_identity_decoder = msgspec.json.Decoder(_Identity)


class StoredEvent(NamedTuple):
    """An observed-change event as found in the event log or the state table."""

    key: ObjectKey
    id: ChangeEventId
    seq: int | None
    """Its event-log sequence; None for a state-table entry that does not name it (written
    by a watcher before the table was derived from the log)."""

    @property
    def event_id(self) -> str:
        return ":".join(self.id)


def stored_event(payload: bytes, seq: int | None) -> StoredEvent:
    """Read the identity of a stored event; raises :class:`StoredEventError` if it has none."""
    try:
        identity = _identity_decoder.decode(payload)
        event_id = parse_change_event_id(identity.id)
    except (msgspec.DecodeError, EventIdError) as error:
        raise StoredEventError(f"message {seq} is not an observed change: {error}") from None
    return StoredEvent(
        key=ObjectKey(identity.kind, identity.namespace or "", identity.name), id=event_id, seq=seq
    )


@dataclass
class Recovered:
    """The published view of one recovery."""

    view: dict[ObjectKey, Seen] = field(default_factory=dict)
    """The identity of the last published state of every object not deleted."""
    seqs: dict[ObjectKey, int | None] = field(default_factory=dict)
    """The event-log sequence of every object's last event: it fences the object's next write
    (``Nats-Expected-Last-Subject-Sequence``); None is not known, which fences as "no message
    yet" and is corrected on the first mismatch."""


def recover(
    state: Mapping[ObjectKey, StoredEvent], log_tail: Mapping[ObjectKey, StoredEvent]
) -> Recovered:
    """Combine the state table with the newest event per key of the event log after the
    highest sequence the table holds: where the tail has a key, its event is the newer."""
    recovered = Recovered()
    for key in sorted(set(state) | set(log_tail)):
        latest = log_tail.get(key) or state[key]
        recovered.seqs[key] = latest.seq
        if latest.id.change != "deleted":
            recovered.view[key] = Seen(latest.id.uid, latest.id.resource_version)
    return recovered


def state_identity(event: ObjectEvent) -> ChangeEventId:
    """Which state of which incarnation ``event`` carries, read from its object."""
    metadata = event.data.object.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    change: ChangeKind = (
        "deleted"
        if isinstance(event, ObjectDeleted)
        else "added"
        if isinstance(event, ObjectAdded)
        else "modified"
    )
    return ChangeEventId(
        str(metadata.get("uid") or ""), str(metadata.get("resourceVersion") or ""), change
    )


def keeps_stored_state(stored: ChangeEventId, ours: ChangeEventId) -> bool:
    """Whether the event log's last event of an object, ``stored`` (another writer's), stays
    its last instead of being followed by ``ours``: then ours is not written.

    Only a state of the same incarnation (uid) is compared: the stored state stays when it is
    not older than ours. A deletion is not final for its uid: a Pod that loses every label
    sandbus selects by is deleted from the log, and added again, at a later resourceVersion,
    when it gets one back. resourceVersions are ordered only where both are decimal integers
    (real API servers and the development cluster issue those); otherwise only an equal one
    counts as "not older". At an equal resourceVersion a deletion is newer than the state it
    deletes (a synthetic deletion carries the last state's resourceVersion).
    """
    if not stored.uid or stored.uid != ours.uid:
        return False
    order = compare_resource_versions(stored.resource_version, ours.resource_version)
    if order is None:
        return False
    return order > 0 or (order == 0 and ours.change != "deleted")
