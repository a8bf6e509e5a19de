"""What a watcher that starts (or takes over) has published before: the recovery, without I/O.

Every change is written twice: first to the event log (the record), then to the state table
(the latest event per object, which the diff of a relist is made against). A watcher can die
between the two writes. The state table then lags the event log for that object, and a relist
diffed against the state table alone would publish the same change again (only deduplicated
if the restart falls inside the duplicate window), or, worse, miss a deletion: if the object
was added to the log but not to the state table and then deleted while the watcher was down,
nothing in the state table says a synthetic deletion is owed.

So the published view is rebuilt from both. Finding the events whose state-table write was cut
off must not mean reading the whole event log, which is why the watcher keeps a **low-water
mark** (:class:`LowWater`): the event-log sequence below which every event it published has
reached the state table. It is recorded in the leader's Lease at every renewal, in the
annotation :data:`LOW_WATER_ANNOTATION` (and in a header of every state-table write, as a
fallback). A new leader reads the event log's watcher subjects
from the highest mark it finds, takes the newest event per object from that tail, and where
that event is not the one the state table holds, the log wins (it is written first, so it can
only be ahead) and the state table is repaired. With no mark anywhere (a first start, or a
state table that was lost), the whole event log is read: slow once, but correct.

Two leaders for a moment. During a handover the old leader may still write what it decided
before it noticed the loss. Both write through the subject-sequence fence; when it finds
another writer's message, the event log takes ours after it (the log keeps every event), but
the state table must not take an older state of the object over a newer one:
:func:`keeps_stored_state` decides.

The tracker's arithmetic: each change takes a *floor* when it starts (one more than the
highest event-log sequence acknowledged so far, which no publish still in flight can be below)
and gives it back when its state-table write is acknowledged. The mark is the lowest floor
still taken, or one more than the highest acknowledged sequence when nothing is in flight.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, NamedTuple

import msgspec

from api.objects import compare_resource_versions
from events.envelope import ObjectKey
from events.ids import ChangeEventId, ChangeKind, EventIdError, parse_change_event_id
from events.types import ObjectAdded, ObjectDeleted, ObjectEvent
from services.watcher.core.diffing import Seen

__all__ = [
    "LOW_WATER_ANNOTATION",
    "LowWater",
    "Recovered",
    "Seqs",
    "StoredEvent",
    "StoredEventError",
    "keeps_stored_state",
    "low_water_annotations",
    "low_water_of",
    "newest_per_key",
    "recover",
    "state_identity",
    "stored_event",
]

LOW_WATER_ANNOTATION: Final = "watcher.sandbus.io/event-log-low-water"
"""The Lease annotation that carries the leader's low-water mark."""


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
    """An observed-change event as found in a stream, at stream sequence ``seq``."""

    key: ObjectKey
    id: ChangeEventId
    seq: int
    event_seq: int | None = None
    """For a state-table entry: the event-log sequence of the same event, when recorded."""
    low_water: int | None = None
    """For a state-table entry: the writer's low-water mark at the time of the write."""

    @property
    def event_id(self) -> str:
        return ":".join(self.id)


def _header_int(headers: Mapping[str, str] | None, name: str) -> int | None:
    value = (headers or {}).get(name)
    return int(value) if isinstance(value, str) and value.isdigit() else None


def stored_event(
    payload: bytes,
    seq: int,
    headers: Mapping[str, str] | None = None,
    *,
    event_seq_header: str = "",
    low_water_header: str = "",
) -> StoredEvent:
    """Read the identity of a stored event; raises :class:`StoredEventError` if it has none."""
    try:
        identity = _identity_decoder.decode(payload)
        event_id = parse_change_event_id(identity.id)
    except (msgspec.DecodeError, EventIdError) as error:
        raise StoredEventError(f"message {seq} is not an observed change: {error}") from None
    return StoredEvent(
        key=ObjectKey(identity.kind, identity.namespace or "", identity.name),
        id=event_id,
        seq=seq,
        event_seq=_header_int(headers, event_seq_header) if event_seq_header else None,
        low_water=_header_int(headers, low_water_header) if low_water_header else None,
    )


def newest_per_key(events: Iterable[StoredEvent]) -> dict[ObjectKey, StoredEvent]:
    """The highest-sequence event of every key."""
    newest: dict[ObjectKey, StoredEvent] = {}
    for event in events:
        current = newest.get(event.key)
        if current is None or event.seq > current.seq:
            newest[event.key] = event
    return newest


class Seqs(NamedTuple):
    """The last sequence of an object's subject in the event log and in the state table.

    They fence the next write of that object (``Nats-Expected-Last-Subject-Sequence``); None
    means not known, which fences as "no message yet" and is corrected on the first mismatch.
    """

    event: int | None
    state: int | None


@dataclass
class Recovered:
    """The published view of one recovery, and what it owes the state table."""

    view: dict[ObjectKey, Seen] = field(default_factory=dict)
    """The identity of the last published state of every object not deleted."""
    seqs: dict[ObjectKey, Seqs] = field(default_factory=dict)
    repairs: list[StoredEvent] = field(default_factory=list)
    """Event-log events whose state-table write is missing, oldest first."""


def recover(
    state: Mapping[ObjectKey, StoredEvent], log_tail: Mapping[ObjectKey, StoredEvent]
) -> Recovered:
    """Combine the state table with the newest event per key from the event log's tail.

    Where both know a key and hold different events, the log's is newer: it is written first,
    and the tail starts below every event whose state write may be missing. Unless two leaders
    overlapped: then the log's last event of an object may be a stale leader's older state,
    which the state table refused (:func:`keeps_stored_state`), and the state table's stays.
    """
    recovered = Recovered()
    for key in sorted(set(state) | set(log_tail)):
        stored = state.get(key)
        logged = log_tail.get(key)
        if logged is not None and (
            stored is None
            or (stored.id != logged.id and not keeps_stored_state(stored.id, logged.id))
        ):
            recovered.repairs.append(logged)
            latest = logged
            seqs = Seqs(event=logged.seq, state=stored.seq if stored else None)
        else:
            assert stored is not None
            latest = stored
            seqs = Seqs(event=logged.seq if logged else stored.event_seq, state=stored.seq)
        recovered.seqs[key] = seqs
        if latest.id.change != "deleted":
            recovered.view[key] = Seen(latest.id.uid, latest.id.resource_version)
    recovered.repairs.sort(key=lambda event: event.seq)
    return recovered


class LowWater:
    """The event-log low-water mark of the running leader (see the module docstring).

    Until the recovery is done the mark is *pinned* to the one inherited from the previous
    leader, because until then that one is still the truth.
    """

    def __init__(self, inherited: int) -> None:
        self._pinned: int | None = max(1, inherited)
        self._last_acked = max(1, inherited) - 1
        self._floors: Counter[int] = Counter()

    def recovered(self, confirmed_through: int) -> None:
        """Every event up to ``confirmed_through`` is in the state table: unpin the mark."""
        self._last_acked = max(self._last_acked, confirmed_through)
        self._pinned = None

    def begin(self) -> int:
        """A change starts; returns its floor, to give back with :meth:`end`."""
        floor = self._last_acked + 1
        self._floors[floor] += 1
        return floor

    def acked(self, seq: int) -> None:
        """The event log acknowledged an event at ``seq``."""
        self._last_acked = max(self._last_acked, seq)

    def end(self, floor: int) -> None:
        """A change's state-table write was acknowledged (or the change was abandoned)."""
        self._floors[floor] -= 1
        if self._floors[floor] <= 0:
            del self._floors[floor]

    @property
    def value(self) -> int:
        if self._pinned is not None:
            return self._pinned
        if self._floors:
            return min(self._floors)
        return self._last_acked + 1


def low_water_annotations(mark: int | None) -> dict[str, str]:
    """What a renewal of the Lease records: the mark, or nothing (the Lease keeps its own)."""
    return {LOW_WATER_ANNOTATION: str(mark)} if mark is not None else {}


def low_water_of(annotations: Mapping[str, str]) -> int | None:
    """The mark a leader recorded in the Lease's annotations, if it recorded a valid one."""
    value = annotations.get(LOW_WATER_ANNOTATION)
    if isinstance(value, str) and value.isdigit() and int(value) >= 1:
        return int(value)
    return None


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
    """Whether the state table keeps ``stored`` (the latest state of the object it holds,
    another writer's) instead of taking ``ours``.

    Only a state of the same incarnation (uid) is compared: a deletion is final for it, and
    otherwise the stored state stays when it is not older than ours. resourceVersions are
    ordered only where both are decimal integers (real API servers and the development cluster
    issue those); otherwise only an equal one counts as "not older". At an equal
    resourceVersion a deletion is newer than the state it deletes (a synthetic deletion
    carries the last state's resourceVersion).
    """
    if not stored.uid or stored.uid != ours.uid:
        return False
    if stored.change == "deleted":
        return True
    order = compare_resource_versions(stored.resource_version, ours.resource_version)
    if order is None:
        return False
    return order > 0 or (order == 0 and ours.change != "deleted")
