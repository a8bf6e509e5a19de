"""The object store: etcd's role, with one global revision and a bounded change history.

What it keeps and why:

- Objects are held per resource as **canonical JSON bytes** (keys sorted). Bytes isolate the
  stored state from whatever a handler later does to a decoded copy, and comparing bytes is how a
  no-op write is detected: the API server does not bump the resourceVersion or emit an event when
  an update changes nothing (docs/devcluster.md §2 row 1).
- One integer ``resource_version`` counts every write across all resources, like the etcd
  revision. Each write stamps the new value into ``metadata.resourceVersion``.
- Every write is appended to a **history ring** of :class:`Change` records, bounded by count and
  by age like the watch cache (``DefaultEventFreshDuration`` = 75 s). The ring serves watches
  that resume from a resourceVersion, and lists at an exact older resourceVersion. Evicting a
  change raises the *floor* of its resource: a watch or list from an RV below the floor gets 410
  Expired, exactly the "too old resource version" rule.
- Each resource also keeps its keys **sorted**, as etcd keeps its key space, so that a page of a
  list (:meth:`Store.snapshot`) starts with a bisection and reads only the objects it returns. A
  :class:`Snapshot` at an older RV is the current objects seen through the changes made since
  (their ``old`` bytes): a continue page costs its own items plus the writes since the first
  page, never a copy or a decode of the whole resource.
- Subscribers (watches, in-process controllers) get each change synchronously at commit time, in
  RV order. Because a watch registers and reads the history without yielding to the event loop,
  list-then-watch has no gap.

Writes happen inside ``async with store.writing():``, one writer at a time (the etcd
linearizability). Reads need no lock: the store only changes inside a synchronous step.

With a persistence backend, a write's context ends once its changes are on file, but the next
writer does not wait for that: the changes are handed to one flushing task, which writes all
that has gathered since its last flush in one transaction (a group commit, as databases do).
Holding the lock through each write's own transaction made every writer wait for the one before
it to be on file; under a burst of writes one transaction now carries many. The file holds only
states the API served, in order, and a write is answered only once it is on file.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import msgspec

__all__ = [
    "Backend",
    "Change",
    "ChangeType",
    "Snapshot",
    "Store",
    "Subscription",
    "TooOld",
    "decode",
    "encode",
]

ChangeType = Literal["ADDED", "MODIFIED", "DELETED"]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects

_encoder = msgspec.json.Encoder(order="sorted")
_decoder = msgspec.json.Decoder()


def encode(obj: Any) -> bytes:
    """Canonical JSON: sorted keys, no whitespace. Equal objects give equal bytes."""
    return _encoder.encode(obj)


def decode(raw: bytes) -> Any:
    return _decoder.decode(raw)


class _Meta(msgspec.Struct):
    resourceVersion: str = ""


class _Versioned(msgspec.Struct):
    metadata: _Meta


_version_decoder = msgspec.json.Decoder(_Versioned)


def _stored_version(raw: bytes) -> str:
    """``metadata.resourceVersion`` of stored bytes, without decoding the rest: msgspec skips
    every other field, several times faster than a full decode on every update."""
    try:
        return _version_decoder.decode(raw).metadata.resourceVersion
    except msgspec.ValidationError:  # not the stored shape: read it the long way
        return str(decode(raw)["metadata"]["resourceVersion"])


@dataclass(frozen=True, slots=True)
class Change:
    """One committed write. For DELETED, ``new`` is the last state stamped with the delete's RV."""

    rv: int
    resource: str
    type: ChangeType
    namespace: str
    name: str
    new: bytes | None
    old: bytes | None
    at: float


class TooOld(Exception):
    """The history no longer reaches back to ``requested``; ``floor`` is the oldest reachable."""

    def __init__(self, requested: int, floor: int) -> None:
        super().__init__(f"too old resource version: {requested} ({floor})")
        self.requested = requested
        self.floor = floor


class Snapshot:
    """One resource's objects as they were at ``rv``, read in key order without copying them.

    ``undo`` maps every key written after ``rv`` to its bytes at ``rv`` (None: it did not exist
    then); every other key reads the live bytes. Built and read synchronously, between two
    writes: the live key list and objects are the store's own, not copies.
    """

    def __init__(
        self,
        keys: list[Key],
        objects: dict[Key, bytes],
        undo: dict[Key, bytes | None],
        namespace: str | None,
        rv: int,
    ) -> None:
        self.rv = rv
        self._keys = keys
        self._objects = objects
        self._undo = undo
        if namespace is None:
            self._lo, self._hi = 0, len(keys)
        else:
            # Keys sort by (namespace, name), so one namespace is one contiguous run of them.
            self._lo = bisect_left(keys, (namespace, ""))
            self._hi = bisect_left(keys, (namespace + "\x00", ""))

    def _start(self, after: Key | None) -> int:
        return self._lo if after is None else max(self._lo, bisect_right(self._keys, after))

    def _revived(self, after: Key | None) -> list[Key]:
        """Keys that existed at ``rv`` but are gone now, after ``after``, sorted."""
        return sorted(
            key
            for key, raw in self._undo.items()
            if raw is not None and key not in self._objects and (after is None or key > after)
        )

    def after(self, after: Key | None = None) -> Iterator[tuple[Key, bytes]]:
        """(key, bytes) of every object after ``after`` (from the first if None), in key order."""
        keys, undo, objects = self._keys, self._undo, self._objects
        live = (keys[i] for i in range(self._start(after), self._hi))
        revived = self._revived(after)
        for key in heapq.merge(live, revived) if revived else live:
            if key in undo:
                raw = undo[key]
                if raw is not None:
                    yield key, raw
            else:
                yield key, objects[key]

    def count_after(self, after: Key | None) -> int:
        """How many objects :meth:`after` would yield, without reading them."""
        count = max(0, self._hi - self._start(after))  # ``after`` may lie past the namespace
        for key, raw in self._undo.items():
            if after is None or key > after:
                count += (raw is not None) - (key in self._objects)
        return count


class Backend(Protocol):
    """Durable storage behind the store (see :mod:`devtools.cluster.storage.persistence`)."""

    async def load(self) -> tuple[int, list[tuple[str, str, str, bytes]]]: ...

    async def write(
        self,
        rv: int,
        puts: list[tuple[str, str, str, bytes]],
        deletes: list[tuple[str, str, str]],
    ) -> None: ...

    async def close(self) -> None: ...


Sink = Callable[[Change], None]


@dataclass(eq=False)
class Subscription:
    resource: str | None  # None: every resource
    sink: Sink
    store: Store = field(repr=False)

    def close(self) -> None:
        self.store._unsubscribe(self)


class Store:
    """Objects by resource, one global resourceVersion, and the change history.

    ``resource`` everywhere is the storage key of a resource: the plural for the core group
    (``pods``), ``plural.group`` otherwise (``jobs.batch``, ``widgets.example.com``).
    """

    def __init__(
        self,
        *,
        history_size: int = 5000,
        history_age: float = 75.0,
        clock: Callable[[], float] = time.monotonic,
        backend: Backend | None = None,
    ) -> None:
        self.history_size = history_size
        self.history_age = history_age
        self._clock = clock
        self._backend = backend
        self._objects: dict[str, dict[Key, bytes]] = {}
        self._keys: dict[str, list[Key]] = {}  # per resource, sorted
        self._uids: dict[str, tuple[str, str, str]] = {}
        self._rv = 0
        self._history: deque[Change] = deque()
        self._floors: dict[str, int] = {}
        self._compacted = 0
        self._subscribers: dict[str | None, list[Subscription]] = {}
        self._lock = asyncio.Lock()
        self._rv_changed = asyncio.Condition()
        self._pending_puts: dict[tuple[str, str, str], bytes] = {}
        self._pending_deletes: set[tuple[str, str, str]] = set()
        self._unflushed: dict[tuple[str, str, str], bytes | None] = {}
        """Changes handed to the flusher and not on file yet: the last state of each key (None:
        deleted), as of :attr:`_unflushed_rv`."""
        self._unflushed_rv = 0
        self._flushed: list[tuple[int, asyncio.Future[None]]] = []
        """Writers waiting for the flush that covers their resourceVersion."""
        self._flusher: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Load persisted objects. History starts empty, so older RVs are compacted away."""
        if self._backend is None:
            return
        rv, rows = await self._backend.load()
        for resource, namespace, name, raw in rows:
            self._objects.setdefault(resource, {})[(namespace, name)] = raw
            uid = decode(raw).get("metadata", {}).get("uid")
            if uid:
                self._uids[uid] = (resource, namespace, name)
        self._keys = {resource: sorted(objects) for resource, objects in self._objects.items()}
        self._rv = rv
        self._compacted = rv

    async def close(self) -> None:
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
        if self._backend is not None:
            await self._backend.close()

    # -- reads ------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def now(self) -> float:
        """The store's clock (the time base of :attr:`Change.at`)."""
        return self._clock()

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        raw = self._objects.get(resource, {}).get((namespace, name))
        return None if raw is None else decode(raw)

    def get_raw(self, resource: str, namespace: str, name: str) -> bytes | None:
        return self._objects.get(resource, {}).get((namespace, name))

    def items(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Current objects of a resource, ordered by (namespace, name) like an etcd range read."""
        return [decode(raw) for _, raw in self._sorted(resource, namespace)]

    def count(self, resource: str, namespace: str | None = None) -> int:
        objects = self._objects.get(resource, {})
        if namespace is None:
            return len(objects)
        return sum(1 for ns, _ in objects if ns == namespace)

    def resources(self) -> list[str]:
        return sorted(r for r, objs in self._objects.items() if objs)

    def find_uid(self, uid: str) -> tuple[str, str, str] | None:
        """(resource, namespace, name) of the live object with this uid."""
        return self._uids.get(uid)

    def items_at(self, resource: str, namespace: str | None, rv: int) -> list[dict[str, Any]]:
        """The objects as they were at ``rv``, rebuilt by undoing newer changes.

        Raises :class:`TooOld` when the history has been trimmed past ``rv``; that is the
        expired-continue-token and ``resourceVersionMatch=Exact`` 410 of the real server.
        """
        return [decode(raw) for _, raw in self.snapshot(resource, namespace, rv).after()]

    def snapshot(self, resource: str, namespace: str | None, rv: int | None = None) -> Snapshot:
        """The objects of ``resource`` (in ``namespace`` if given) as they were at ``rv``
        (now if None), to be read before the next write.

        Raises :class:`TooOld` when the history no longer reaches back to ``rv``.
        """
        undo: dict[Key, bytes | None] = {}
        if rv is None:
            rv = self._rv
        else:
            self._check_reachable(resource, rv)
            for change in reversed(self._history):
                if change.rv <= rv:
                    break
                if change.resource != resource:
                    continue
                if namespace is not None and change.namespace != namespace:
                    continue
                # Oldest change last: it holds the bytes the key had at rv.
                undo[(change.namespace, change.name)] = change.old
        return Snapshot(
            self._keys.get(resource, []), self._objects.get(resource, {}), undo, namespace, rv
        )

    def floor(self, resource: str) -> int:
        """Changes of ``resource`` with an RV above this are all still in the history."""
        self._trim()
        return max(self._compacted, self._floors.get(resource, 0))

    def changes_since(self, resource: str, rv: int) -> list[Change]:
        self._check_reachable(resource, rv)
        return [c for c in self._history if c.rv > rv and c.resource == resource]

    def history(self) -> list[Change]:
        """All retained changes, oldest first (for assertions in tests)."""
        self._trim()
        return list(self._history)

    # -- watching ---------------------------------------------------------------------------

    def subscribe(self, resource: str | None, sink: Sink) -> Subscription:
        """Deliver every future change of ``resource`` (all resources if None) to ``sink``."""
        sub = Subscription(resource, sink, self)
        self._subscribers.setdefault(resource, []).append(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        subs = self._subscribers.get(sub.resource, [])
        if sub in subs:
            subs.remove(sub)

    async def wait_for_resource_version(self, rv: int, within: float) -> bool:
        """Wait until the store has reached ``rv``; False if ``within`` seconds pass first."""
        async with self._rv_changed:
            try:
                await asyncio.wait_for(self._rv_changed.wait_for(lambda: self._rv >= rv), within)
            except TimeoutError:
                return False
        return True

    # -- writes -----------------------------------------------------------------------------

    @asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """Hold the single commit lock; persist what was written before releasing it."""
        async with self._lock:
            before = self._rv
            try:
                yield
            finally:
                on_file = self._hand_to_flusher()
                if self._rv != before:
                    async with self._rv_changed:
                        self._rv_changed.notify_all()
        if on_file is not None:
            await on_file

    def create(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Insert a new object, stamping the next RV. The caller has checked it is absent."""
        return decode(self.create_encoded(resource, obj))

    def create_encoded(self, resource: str, obj: dict[str, Any]) -> bytes:
        """:meth:`create`, answering with the stored bytes (a caller that only serves the
        result need not decode it)."""
        namespace, name = _key_of(obj)
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        raw = encode(obj)
        objects = self._objects.setdefault(resource, {})
        if (namespace, name) not in objects:
            insort(self._keys.setdefault(resource, []), (namespace, name))
        objects[(namespace, name)] = raw
        uid = obj["metadata"].get("uid")
        if uid:
            self._uids[uid] = (resource, namespace, name)
        self._record(Change(rv, resource, "ADDED", namespace, name, raw, None, self._clock()))
        return raw

    def update(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace an existing object. A write that changes nothing keeps the old RV, no event."""
        return decode(self.update_encoded(resource, obj))

    def update_encoded(self, resource: str, obj: dict[str, Any]) -> bytes:
        """:meth:`update`, answering with the stored bytes (the old ones for a no-op)."""
        namespace, name = _key_of(obj)
        old = self._objects[resource][(namespace, name)]
        obj["metadata"]["resourceVersion"] = _stored_version(old)
        candidate = encode(obj)
        if candidate == old:
            return old
        return self._replace(resource, namespace, name, obj, old)

    def touch(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Rewrite an object with a new RV and no other change (a racing writer's footprint)."""
        old = self._objects.get(resource, {}).get((namespace, name))
        if old is None:
            return None
        return decode(self._replace(resource, namespace, name, decode(old), old))

    def delete(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        """Remove an object; returns its last state stamped with the deletion RV."""
        old = self._objects[resource].pop((namespace, name))
        keys = self._keys[resource]
        del keys[bisect_left(keys, (namespace, name))]
        rv = self._next_rv()
        last = decode(old)
        last["metadata"]["resourceVersion"] = str(rv)
        raw = encode(last)
        uid = last["metadata"].get("uid")
        if uid:
            self._uids.pop(uid, None)
        self._record(Change(rv, resource, "DELETED", namespace, name, raw, old, self._clock()))
        return last

    def compact(self) -> int:
        """Forget all history (etcd compaction): every resume from an older RV now gets 410."""
        self._history.clear()
        self._compacted = self._rv
        return self._rv

    # -- internals --------------------------------------------------------------------------

    def _replace(
        self, resource: str, namespace: str, name: str, obj: dict[str, Any], old: bytes
    ) -> bytes:
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        raw = encode(obj)
        self._objects[resource][(namespace, name)] = raw
        self._record(Change(rv, resource, "MODIFIED", namespace, name, raw, old, self._clock()))
        return raw

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _record(self, change: Change) -> None:
        self._history.append(change)
        self._trim()
        key = (change.resource, change.namespace, change.name)
        if change.type == "DELETED":
            self._pending_puts.pop(key, None)
            self._pending_deletes.add(key)
        else:
            assert change.new is not None
            self._pending_deletes.discard(key)
            self._pending_puts[key] = change.new
        for sub in [*self._subscribers.get(change.resource, []), *self._subscribers.get(None, [])]:
            sub.sink(change)

    def _trim(self) -> None:
        now = self._clock()
        history = self._history
        while history and (
            len(history) > self.history_size or now - history[0].at > self.history_age
        ):
            gone = history.popleft()
            self._floors[gone.resource] = gone.rv

    def _check_reachable(self, resource: str, rv: int) -> None:
        floor = self.floor(resource)
        if rv < floor:
            raise TooOld(rv, floor)

    def _sorted(self, resource: str, namespace: str | None) -> Iterable[tuple[Key, bytes]]:
        return self.snapshot(resource, namespace).after()

    def _hand_to_flusher(self) -> asyncio.Future[None] | None:
        """This write's changes to the flusher; the future of the flush that covers them (None:
        nothing to put on file)."""
        if not self._pending_puts and not self._pending_deletes:
            return None
        for key in self._pending_deletes:
            self._unflushed[key] = None
        self._unflushed.update(self._pending_puts)
        self._pending_puts = {}
        self._pending_deletes = set()
        if self._backend is None:
            self._unflushed.clear()
            return None
        self._unflushed_rv = self._rv
        on_file = asyncio.get_running_loop().create_future()
        self._flushed.append((self._rv, on_file))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="devcluster-flush")
        return on_file

    async def _flush(self) -> None:
        """Write what gathered, in one transaction, until nothing is left; then tell the
        writers it covers. A failed write fails every writer waiting for it."""
        assert self._backend is not None
        while self._unflushed:
            changes, rv = self._unflushed, self._unflushed_rv
            self._unflushed = {}
            waiting = [entry for entry in self._flushed if entry[0] <= rv]
            self._flushed = [entry for entry in self._flushed if entry[0] > rv]
            puts = [(*key, raw) for key, raw in changes.items() if raw is not None]
            deletes = [key for key, raw in changes.items() if raw is None]
            try:
                await self._backend.write(rv, puts, deletes)
            except Exception as error:  # handed to every writer it concerns
                for _, future in waiting:
                    if not future.done():
                        future.set_exception(error)
                continue
            for _, future in waiting:
                if not future.done():
                    future.set_result(None)


def _key_of(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]
