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
    (invariant 6). A written entry is dropped as soon as the bus delivers a state at least as
    new, or after ``written_ttl`` seconds, so an object that the watcher does not publish (a
    foreign Pod without our labels, found through AlreadyExists) cannot be believed forever.

"As new". resourceVersions are opaque by contract, and this module compares them for
equality first. Real API servers (etcd) and the development cluster issue decimal integers
that grow with every write, and where *both* versions are such integers their order is used:
to drop a bus event that is older than what the cache holds (after a restart the event log
replays changes the state table already reflects) and to retire a written entry early. Where
they are not integers nothing is ordered: the bus simply wins, and a written entry lives until
the bus echoes its exact resourceVersion or its time runs out. Either way a reconcile that saw
a stale object is repaired by the next one, because every change wakes its key again.

Objects are keyed by :class:`~events.envelope.ObjectKey` (kind, namespace, name), re-exported
here because it is also the work-queue key of the reconciler of that kind.

The cache hands out plain JSON dicts as the API serves them (camelCase), the same shape the
events carry, and may hand one dict to several readers: callers must not mutate them.

It keeps each observed object packed, and unpacks it when it is read: a worker holds every
object of the kinds it follows, and a Sandbox as dicts takes four times the memory of its JSON.
Packed is that JSON compressed by zlib with the first object of its kind as the preset
dictionary: objects of one kind share their keys and most of their values, so a Sandbox packs
to a fifth of its JSON. While the worker is busy, the objects it read last through an index
stay unpacked too (at most ``unpacked_limit``): a pass may read many objects that way (a
pool's pass reads every member), and the next pass reads most of them again.
:meth:`ObjectCache.rest` lets them go when the worker has nothing to do. The answers to our
own writes are short-lived and stay as they came.
"""

from __future__ import annotations

import contextlib
import sys
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from events.envelope import ObjectKey
from events.types import strip_managed_fields

__all__ = [
    "Change",
    "Json",
    "ObjectCache",
    "ObjectKey",
    "compare_resource_versions",
    "controller_of",
    "key_of",
    "labels_of",
    "metadata_of",
]

Json = dict[str, Any]
Change = Literal["added", "modified", "deleted"]


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    if type(metadata) is dict:
        return metadata  # decoded JSON, as always: without the costlier check of an ABC
    return metadata if isinstance(metadata, Mapping) else {}


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels = metadata_of(obj).get("labels")
    if type(labels) is dict:
        return labels
    return labels if isinstance(labels, Mapping) else {}


def key_of(obj: Mapping[str, Any], kind: str | None = None) -> ObjectKey:
    """The key of ``obj``; ``kind`` fills in for list items that arrive without one."""
    metadata = metadata_of(obj)
    # Interned: a cache holds a key per object, and these two are the same few strings.
    return ObjectKey(
        sys.intern(str(kind or obj.get("kind") or "")),
        sys.intern(str(metadata.get("namespace") or "")),
        str(metadata.get("name") or ""),
    )


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference with ``controller: true``, if any (there is at most one)."""
    for ref in metadata_of(obj).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def _resource_version(obj: Mapping[str, Any] | None) -> str:
    return str(metadata_of(obj).get("resourceVersion") or "") if obj is not None else ""


def _uid(obj: Mapping[str, Any] | None) -> str:
    return str(metadata_of(obj).get("uid") or "") if obj is not None else ""


def compare_resource_versions(a: str, b: str) -> int | None:
    """-1, 0 or 1 when ``a`` is older than, the same as, or newer than ``b``; None when the two
    cannot be ordered (only equal strings are "the same" then)."""
    if a == b:
        return 0
    if a.isdecimal() and b.isdecimal():
        return -1 if int(a) < int(b) else 1
    return None


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(dict[str, Any]).decode


class _Packer:
    """Packs objects of each kind against that kind's preset dictionary, chosen once."""

    def __init__(self) -> None:
        self._dictionaries: dict[str, bytes] = {}

    def pack(self, kind: str, obj: Json) -> bytes:
        raw = _encode(obj)
        compressor = zlib.compressobj(1, zdict=self._dictionaries.setdefault(kind, raw))
        return compressor.compress(raw) + compressor.flush()

    def unpack(self, kind: str, packed: bytes) -> Json:
        return _decode(zlib.decompressobj(zdict=self._dictionaries[kind]).decompress(packed))


@dataclass(frozen=True)
class _Written:
    obj: Json | None
    """None: the API said the object is gone (a tombstone)."""
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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._label_indexes: dict[str, tuple[str, ...]] = defaultdict(tuple)
        for kind, label in label_indexes:
            self._label_indexes[kind] += (label,)
        self._written_ttl = written_ttl
        self._clock = clock
        self._observed: dict[ObjectKey, tuple[str, bytes]] = {}
        """Each object's resourceVersion, and the object packed."""
        self._packer = _Packer()
        self._unpacked: dict[ObjectKey, tuple[bytes, Json]] = {}
        """Objects read lately, with the packed form they came from (oldest first)."""
        self._unpacked_limit = unpacked_limit
        self._written: dict[ObjectKey, _Written] = {}
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
        found = written.obj if written is not None else self._unpacked_observed(key, keep)
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
        unpacked = self._unpacked.get(key)
        if unpacked is not None and unpacked[0] is held[1]:
            return unpacked[1]
        obj = self._packer.unpack(key.kind, held[1])
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
        key = key_of(obj, kind)
        version = _resource_version(obj)
        current = self._observed.get(key)
        if current is not None:
            order = compare_resource_versions(version, current[0])
            if order is not None and order < 0:
                return False
        self._unpacked.pop(key, None)
        if change == "deleted":
            self._observed.pop(key, None)
        else:
            self._observed[key] = (version, self._packer.pack(key.kind, obj))
        written = self._written.get(key)
        if written is not None and self._supersedes(change, obj, written):
            del self._written[key]
        self._reindex(key, None if change == "deleted" or key in self._written else obj)
        return True

    @staticmethod
    def _supersedes(change: Change, obj: Json, written: _Written) -> bool:
        if change == "deleted" and _uid(obj) == written.uid:
            return True  # a deletion is final for that incarnation, whatever we wrote before
        order = compare_resource_versions(_resource_version(obj), written.resource_version)
        return order is not None and order >= 0

    # -- our writes -------------------------------------------------------------------------

    def remember(
        self, obj: Json, *, kind: str | None = None, writer: ObjectKey | None = None
    ) -> None:
        """Hold the object a write (or a read) of ours returned, until the bus catches up;
        ``writer`` is the key whose reconcile wrote it.

        Without its ``managedFields``, as the bus carries objects: a planner reads the same
        object whichever way it came, and a re-run from the event log rebuilds it exactly."""
        obj = strip_managed_fields(obj)
        key = key_of(obj, kind)
        self._written[key] = _Written(
            obj,
            _uid(obj),
            _resource_version(obj),
            self._clock() + self._written_ttl,
            writer,
        )
        self._reindex(key, obj)

    def remember_gone(self, key: ObjectKey) -> None:
        """Hold "this object is gone", as a delete or a NotFound told us."""
        last = self.get(key)
        self._written[key] = _Written(
            None, _uid(last), _resource_version(last), self._clock() + self._written_ttl
        )
        self._reindex(key)

    def expire(self) -> list[ObjectKey]:
        """Drop written entries whose time ran out; returns their keys."""
        now = self._clock()
        expired = [key for key, written in self._written.items() if written.expires <= now]
        for key in expired:
            del self._written[key]
            self._reindex(key)
        return expired

    # -- indexes ----------------------------------------------------------------------------

    def _current(self, key: ObjectKey) -> Json | None:
        written = self._written.get(key)
        return written.obj if written is not None else self.observed(key)

    def _reindex(self, key: ObjectKey, current: Json | None = None) -> None:
        """Index ``key`` anew; ``current`` is its object when the caller has it at hand."""
        for index, value in self._index_entries.pop(key, ()):
            index[value].discard(key)
            if not index[value]:
                del index[value]
        obj = current if current is not None else self._current(key)
        if obj is None:
            return
        entries: list[tuple[dict[Any, set[ObjectKey]], Any]] = [(self._by_kind, key.kind)]
        labels = labels_of(obj)
        for label in self._label_indexes.get(key.kind, ()):
            value = labels.get(label)
            if isinstance(value, str):
                entries.append((self._by_label, (key.kind, key.namespace, label, value)))
        owner = controller_of(obj)
        if owner is not None and owner.get("uid"):
            entries.append((self._by_owner, (key.kind, str(owner["uid"]))))
        for index, value in entries:
            index[value].add(key)
        self._index_entries[key] = entries
