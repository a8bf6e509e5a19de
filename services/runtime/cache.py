"""The workers' view of the cluster: the latest observed object per key, fed from the bus, plus
what the worker's own writes returned, with indexes by label value and by controller owner.

A worker never lists or watches Kubernetes. It fills this cache from the state table on start
and from the event log afterwards (see :mod:`services.runtime.reconcile`), and its planners read
only from here. Two sources feed it, and the cache decides which one to believe:

``observed``
    The last object the bus delivered for a key (an ``added``/``modified`` event, or nothing
    after a ``deleted`` one).
``written``
    The object the API server returned to one of *our* writes (or a tombstone when a delete
    answered that the object is gone). The watcher brings that same state back as an event a
    few milliseconds later; until then, a reconcile that read only ``observed`` would act on
    the state from before our write and, for example, create a second pod. Holding the
    response here is the read-your-writes barrier that keeps a worker's next decision honest
    (invariant 6 of docs/architecture.md). A written entry is dropped as soon as the bus delivers a
    state at least as new, or after ``written_ttl`` seconds, so an object that the watcher does not
    publish (a foreign Pod without our labels, found through AlreadyExists) cannot be believed
    forever.

"As new". resourceVersions are opaque by contract, and this module compares them for
equality first. Real API servers (etcd) and the development cluster issue decimal integers
that grow with every write, and where *both* versions are such integers their order is used:
to drop a bus event that is older than what the cache holds (after a restart the event log
replays changes the state table already reflects) and to retire a written entry early. Where
they are not integers nothing is ordered: the bus simply wins, and a written entry lives until
the bus echoes its exact resourceVersion or its time runs out. Either way a reconcile that saw
a stale object is repaired by the next one, because every change wakes its key again.

Objects are keyed by :class:`~events.envelope.ObjectKey` (kind, namespace, name), which is also
the work-queue key of the reconciler of that kind.

The cache hands out plain JSON dicts as the API serves them (camelCase), the same shape the
events carry, and may hand one dict to several readers: callers must not mutate them.

It keeps each observed object packed, and unpacks it when it is read: a worker holds every
object of the kinds it follows, and a Sandbox as dicts takes four times the memory of its JSON.
Packed is that JSON compressed by zlib with the first object of its kind as the preset
dictionary: objects of one kind share their keys and most of their values, so a Sandbox packs
to a fifth of its JSON. An object the bus has just delivered is not packed at once, though: it
is kept *fresh*, as the dict the event was decoded into, until the worker rests or more than
``fresh_limit`` objects are fresh (then the oldest is packed). A change comes in a run (a
claimed Sandbox changes four times within a second, and each change is read by the pass it
wakes), so packing every version and unpacking it for the pass was most of what a delivered
event cost a worker; packed once when its run is over, an object costs one packing.

While the worker is busy, the objects it read last through an index stay unpacked too (at most
``unpacked_limit``): a pass may read many objects that way (a pool's pass reads every member),
and the next pass reads most of them again.
:meth:`ObjectCache.rest` lets them go when the worker has nothing to do. The answers to our
own writes stay as they came until the bus shows them, unless more than ``fresh_limit`` are
waiting (a burst's echoes can be seconds behind): then the oldest are packed too. An answer the
bus has shown already is not held at all. What a process once held stays its resident memory,
so these limits keep a worker's memory closer to its objects than to its busiest second. With
10,000 Sandboxes, ``fresh_limit`` at 2,048 and every answer held made the five services 329 MiB;
at 1,024 with answers packed past it, 299 MiB; at 256, 290 MiB, but a burst of 200 claims then
packs and unpacks its objects again and again, a tenth more CPU (bench/analysis.md, the end of
issue #28).

Packing costs more than everything else a worker does with an object it loads from the state
table (zlib is most of it), so the objects of that read are kept as the JSON they came in,
*loose*, and packed later, a slice at a time, when the worker rests
(:meth:`ObjectCache.pack_loose`): a restarted worker serves new work first, and holds the
loaded objects' JSON, about five times their packed size, until then.
"""

from __future__ import annotations

import contextlib
import sys
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

import msgspec

from api.objects import (
    Json,
    compare_resource_versions,
    controller_in,
    controller_of,
    labels_of,
    metadata_of,
)
from events.codec import ObservedState
from events.envelope import ObjectKey, key_of
from events.types import strip_managed_fields

__all__ = [
    "Change",
    "ObjectCache",
]

Change = Literal["added", "modified", "deleted"]


def _resource_version(obj: Mapping[str, Any] | None) -> str:
    return str(metadata_of(obj).get("resourceVersion") or "") if obj is not None else ""


def _uid(obj: Mapping[str, Any] | None) -> str:
    return str(metadata_of(obj).get("uid") or "") if obj is not None else ""


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(dict[str, Any]).decode


class _Packer:
    """Packs objects of each kind against that kind's preset dictionary, chosen once."""

    def __init__(self) -> None:
        self._dictionaries: dict[str, bytes] = {}

    def pack(self, kind: str, obj: Json) -> bytes:
        return self.pack_json(kind, _encode(obj))

    def pack_json(self, kind: str, raw: bytes) -> bytes:
        compressor = zlib.compressobj(1, zdict=self._dictionaries.setdefault(kind, raw))
        return compressor.compress(raw) + compressor.flush()

    def unpack(self, kind: str, packed: bytes) -> Json:
        return _decode(zlib.decompressobj(zdict=self._dictionaries[kind]).decompress(packed))


@dataclass(frozen=True)
class _Written:
    obj: Json | bytes | None
    """None: the API said the object is gone (a tombstone); bytes: the object, packed."""
    uid: str
    resource_version: str
    expires: float
    writer: ObjectKey | None = None
    """The key whose reconcile wrote it (None: read, not written)."""


class ObjectCache:
    """Objects by key, with read-your-writes and two indexes.

    ``label_indexes`` names the ``(kind, label key)`` pairs to index by value (the sandbox
    worker indexes Pods by ``agents.x-k8s.io/sandbox-name-hash``); every object is indexed by
    the uid of its controller owner.
    """

    def __init__(
        self,
        *,
        label_indexes: Iterable[tuple[str, str]] = (),
        written_ttl: float = 30.0,
        unpacked_limit: int = 2048,
        fresh_limit: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._label_indexes: dict[str, tuple[str, ...]] = defaultdict(tuple)
        for kind, label in label_indexes:
            self._label_indexes[kind] += (label,)
        self._written_ttl = written_ttl
        self._clock = clock
        self._observed: dict[ObjectKey, tuple[str, bytes | Json]] = {}
        """Each object's resourceVersion, and the object: packed, its JSON (loose) or the dict
        its event was decoded into (fresh)."""
        self._loose: set[ObjectKey] = set()
        """The keys whose object is held as its JSON, not packed yet."""
        self._fresh: dict[ObjectKey, None] = {}
        """The keys whose object is held as a dict, not packed yet (oldest first)."""
        self._fresh_limit = fresh_limit
        self._packer = _Packer()
        self._unpacked: dict[ObjectKey, tuple[bytes, Json]] = {}
        """Objects read lately, with the packed form they came from (oldest first)."""
        self._unpacked_limit = unpacked_limit
        self._written: dict[ObjectKey, _Written] = {}
        """Our writes the bus has not shown yet, in the order they expire (see :meth:`_hold`)."""
        self._written_unpacked: dict[ObjectKey, None] = {}
        """The keys whose written object is held as a dict (oldest first): at most
        ``fresh_limit``, the older ones packed, since a burst's answers can wait seconds for
        their echoes, and whole objects held that long are memory the process keeps."""
        self._by_kind: dict[str, set[ObjectKey]] = defaultdict(set)
        self._by_label: dict[tuple[str, str, str, str], set[ObjectKey]] = defaultdict(set)
        self._by_owner: dict[tuple[str, str], set[ObjectKey]] = defaultdict(set)
        self._index_entries: dict[ObjectKey, list[tuple[dict[Any, set[ObjectKey]], Any]]] = {}
        self._reads: dict[ObjectKey, Json | None] | None = None

    # -- reading ----------------------------------------------------------------------------

    def get(self, key: ObjectKey, *, keep: bool = False) -> Json | None:
        """The object of ``key``, or None. ``keep``: it stays unpacked while the worker is
        busy, as what is read through an index does (a pass that reads many objects, which the
        next pass reads again: a pool's members' Pods)."""
        written = self._written.get(key)
        if written is not None:
            found = self._answer(key, written)
        else:
            found = self._unpacked_observed(key, keep)
        if self._reads is not None:
            self._reads[key] = found
        return found

    @contextlib.contextmanager
    def recording(self) -> Iterator[dict[ObjectKey, Json | None]]:
        """Record every object read meanwhile (every read goes through :meth:`get`), with
        None for a key looked up and not found: what a planner's inputs were made of."""
        reads: dict[ObjectKey, Json | None] = {}
        self._reads = reads
        try:
            yield reads
        finally:
            self._reads = None

    def observed(self, key: ObjectKey) -> Json | None:
        """The object as the bus last showed it, ignoring our own writes' answers."""
        return self._unpacked_observed(key, keep=False)

    def _unpacked_observed(self, key: ObjectKey, keep: bool) -> Json | None:
        held = self._observed.get(key)
        if held is None:
            return None
        if not isinstance(held[1], bytes):
            return held[1]
        unpacked = self._unpacked.get(key)
        if unpacked is not None and unpacked[0] is held[1]:
            return unpacked[1]
        obj = _decode(held[1]) if key in self._loose else self._packer.unpack(key.kind, held[1])
        if keep:
            if len(self._unpacked) >= self._unpacked_limit:
                del self._unpacked[next(iter(self._unpacked))]
            self._unpacked[key] = (held[1], obj)
        return obj

    def rest(self) -> None:
        """Drop the objects kept unpacked: the worker has nothing to do for now."""
        self._unpacked.clear()

    def known_gone(self, key: ObjectKey) -> bool:
        """Did a read or write of ours find ``key`` gone, and the bus show nothing newer since?
        (A key merely never seen is not known gone.)"""
        written = self._written.get(key)
        return written is not None and written.obj is None

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, ObjectKey):
            return False
        written = self._written.get(key)
        return written.obj is not None if written is not None else key in self._observed

    def keys(self, kind: str, namespace: str | None = None) -> list[ObjectKey]:
        """The keys of every object of ``kind`` (in ``namespace`` when given), sorted."""
        return sorted(
            key for key in self._by_kind.get(kind, ()) if namespace is None or key[1] == namespace
        )

    def objects(self, kind: str, namespace: str | None = None) -> Iterator[Json]:
        for key in self.keys(kind, namespace):
            obj = self.get(key)
            if obj is not None:
                yield obj

    def by_label(self, kind: str, namespace: str, label: str, value: str) -> list[Json]:
        """Objects of ``kind`` in ``namespace`` whose label ``label`` is ``value`` (the label
        must be one of ``label_indexes``)."""
        if label not in self._label_indexes.get(kind, ()):
            raise KeyError(f"{kind} objects are not indexed by label {label!r}")
        keys = sorted(self._by_label.get((kind, namespace, label, value), ()))
        return [obj for obj in (self.get(key, keep=True) for key in keys) if obj is not None]

    def owned_by(self, kind: str, owner_uid: str) -> list[Json]:
        """Objects of ``kind`` whose controller owner has ``owner_uid``."""
        keys = sorted(self._by_owner.get((kind, owner_uid), ()))
        return [obj for obj in (self.get(key, keep=True) for key in keys) if obj is not None]

    def __len__(self) -> int:
        return sum(1 for keys in self._by_kind.values() for _ in keys)

    # -- the bus ----------------------------------------------------------------------------

    def writer_of_echo(
        self, change: Change, obj: Json, *, kind: str | None = None
    ) -> ObjectKey | None:
        """The key whose write the bus now echoes, when it delivers exactly what that write
        answered (the same resourceVersion): nothing new for that key, whose reconcile already
        had the answer. None for anything else."""
        written = self._written.get(key_of(obj, kind))
        if (
            change == "deleted"
            or written is None
            or written.obj is None
            or not written.resource_version
            or written.resource_version != _resource_version(obj)
        ):
            return None
        return written.writer

    def observe(self, change: Change, obj: Json, *, kind: str | None = None) -> bool:
        """Apply one observed change; False when it was older than what is held and ignored."""
        return self._observe(
            key_of(obj, kind),
            change,
            _resource_version(obj),
            _uid(obj),
            obj,
            labels_of(obj),
            controller_of(obj),
        )

    def observe_state(self, state: ObservedState, change: Change | None = None) -> bool:
        """:meth:`observe` for an object as the state table's read hands it over, still JSON
        (``change`` overrides the state's own). It is kept as that JSON, loose, until
        :meth:`pack_loose`: a worker loading thousands of objects serves sooner when it
        packs them once it has nothing else to do."""
        kind, namespace, name = state.key
        labels = state.labels
        return self._observe(
            ObjectKey(sys.intern(kind), sys.intern(namespace), name),
            change or state.change,
            state.resource_version,
            state.uid,
            state.object_json,
            labels if isinstance(labels, Mapping) else {},
            controller_in(state.owner_references),
        )

    def _observe(
        self,
        key: ObjectKey,
        change: Change,
        version: str,
        uid: str,
        held: Json | bytes,
        labels: Mapping[str, Any],
        controller: Mapping[str, Any] | None,
    ) -> bool:
        """``held``: the object, to keep fresh, or its JSON, to keep loose."""
        current = self._observed.get(key)
        if current is not None:
            order = compare_resource_versions(version, current[0])
            if order is not None and order < 0:
                return False
        self._unpacked.pop(key, None)
        self._loose.discard(key)
        self._fresh.pop(key, None)
        if change == "deleted":
            self._observed.pop(key, None)
        else:
            self._observed[key] = (version, held)
            if isinstance(held, bytes):
                self._loose.add(key)
            else:
                self._fresh[key] = None
                if len(self._fresh) > self._fresh_limit:
                    self._pack(next(iter(self._fresh)))
        written = self._written.get(key)
        if written is not None and self._supersedes(change, uid, version, written):
            self._drop_written(key)
        if change == "deleted" or key in self._written:
            self._reindex(key)
        else:
            self._index(key, labels, controller)
        return True

    @property
    def loose(self) -> int:
        """How many objects are not packed yet: loose (their JSON) or fresh (a dict)."""
        return len(self._loose) + len(self._fresh)

    def pack_loose(self, limit: int) -> bool:
        """Pack up to ``limit`` of the objects kept fresh or loose; True while some are left."""
        for _ in range(min(limit, self.loose)):
            self._pack(next(iter(self._fresh)) if self._fresh else self._loose.pop())
        return bool(self.loose)

    def _pack(self, key: ObjectKey) -> None:
        self._fresh.pop(key, None)
        version, held = self._observed[key]
        if isinstance(held, bytes):
            self._observed[key] = (version, self._packer.pack_json(key.kind, held))
        else:
            self._observed[key] = (version, self._packer.pack(key.kind, held))

    @staticmethod
    def _supersedes(change: Change, uid: str, version: str, written: _Written) -> bool:
        if change == "deleted" and uid == written.uid:
            return True  # a deletion is final for that incarnation, whatever we wrote before
        order = compare_resource_versions(version, written.resource_version)
        return order is not None and order >= 0

    # -- our writes -------------------------------------------------------------------------

    def remember(
        self, obj: Json, *, kind: str | None = None, writer: ObjectKey | None = None
    ) -> None:
        """Hold the object a write (or a read) of ours returned, until the bus catches up;
        ``writer`` is the key whose reconcile wrote it.

        Without its ``managedFields``, as the bus carries objects: a planner reads the same
        object whichever way it came, and a re-run from the event log rebuilds it exactly.

        Nothing is held when the bus already showed this version or a later one: on a busy
        cluster the echo often comes before the answer, and an answer held for nothing would
        stay for the whole ttl (thousands of whole objects after a burst, memory the process
        keeps once it has had it)."""
        key = key_of(obj, kind)
        version = _resource_version(obj)
        if self._shown(key, version):
            if self._drop_written(key):
                self._reindex(key)
            return
        obj = strip_managed_fields(obj)
        self._hold(key, _Written(obj, _uid(obj), version, self._expiry(), writer))
        self._reindex(key, obj)

    def _shown(self, key: ObjectKey, version: str) -> bool:
        """Has the bus shown ``key`` at ``version``, or later?"""
        observed = self._observed.get(key)
        order = compare_resource_versions(observed[0], version) if observed else None
        return order is not None and order >= 0

    def remember_gone(self, key: ObjectKey) -> None:
        """Hold "this object is gone", as a delete or a NotFound told us."""
        last = self.get(key)
        self._hold(key, _Written(None, _uid(last), _resource_version(last), self._expiry()))
        self._reindex(key)

    def _expiry(self) -> float:
        return self._clock() + self._written_ttl

    def _hold(self, key: ObjectKey, written: _Written) -> None:
        # Every entry lives the same ttl on a clock that does not go back, so appending keeps
        # the dict in the order the entries expire (a rewrite moves to the end; assigning to a
        # key in place would keep its old position) and expire() stops at the first that has
        # time left: a pass does not walk every write in flight.
        self._drop_written(key)
        self._written[key] = written
        if isinstance(written.obj, dict):
            self._written_unpacked[key] = None
            if len(self._written_unpacked) > self._fresh_limit:
                oldest = next(iter(self._written_unpacked))
                del self._written_unpacked[oldest]
                held = self._written[oldest]
                packed = self._packer.pack(oldest.kind, cast(Json, held.obj))
                self._written[oldest] = replace(held, obj=packed)

    def _drop_written(self, key: ObjectKey) -> bool:
        """Forget what we wrote to ``key``; whether there was something."""
        self._written_unpacked.pop(key, None)
        return self._written.pop(key, None) is not None

    def _answer(self, key: ObjectKey, written: _Written) -> Json | None:
        if isinstance(written.obj, bytes):
            return self._packer.unpack(key.kind, written.obj)
        return written.obj

    def expire(self) -> list[ObjectKey]:
        """Drop written entries whose time ran out; returns their keys."""
        now = self._clock()
        expired: list[ObjectKey] = []
        for key, written in self._written.items():
            if written.expires > now:
                break
            expired.append(key)
        for key in expired:
            self._drop_written(key)
            self._reindex(key)
        return expired

    # -- indexes ----------------------------------------------------------------------------

    def _current(self, key: ObjectKey) -> Json | None:
        written = self._written.get(key)
        return self._answer(key, written) if written is not None else self.observed(key)

    def _reindex(self, key: ObjectKey, current: Json | None = None) -> None:
        """Index ``key`` anew; ``current`` is its object when the caller has it at hand."""
        obj = current if current is not None else self._current(key)
        if obj is None:
            self._unindex(key)
        else:
            self._index(key, labels_of(obj), controller_of(obj))

    def _unindex(self, key: ObjectKey) -> None:
        for index, value in self._index_entries.pop(key, ()):
            index[value].discard(key)
            if not index[value]:
                del index[value]

    def _index(
        self, key: ObjectKey, labels: Mapping[str, Any], controller: Mapping[str, Any] | None
    ) -> None:
        self._unindex(key)
        entries: list[tuple[dict[Any, set[ObjectKey]], Any]] = [(self._by_kind, key.kind)]
        for label in self._label_indexes.get(key.kind, ()):
            value = labels.get(label)
            if isinstance(value, str):
                entries.append((self._by_label, (key.kind, key.namespace, label, value)))
        if controller is not None and controller.get("uid"):
            entries.append((self._by_owner, (key.kind, str(controller["uid"]))))
        for index, value in entries:
            index[value].add(key)
        self._index_entries[key] = entries
