"""WATCH: one long HTTP response per watcher, fed from the store's change history.

The wire format is the API server's (api-concepts "efficient detection of changes"): HTTP 200,
``application/json``, chunked, one ``{"type": ..., "object": ...}`` document per line.

- **Start.** With ``resourceVersion`` unset or ``0`` the watch first sends a synthetic ADDED per
  current object; with ``resourceVersion=X`` it replays every retained change after X and sends
  no synthetic events. The replay and the subscription to new changes happen in one synchronous
  step, so nothing falls between a list and the watch that follows it. X older than the
  history → one ERROR event with a 410 Expired Status, then EOF (``cacher.go``: "other errors
  must fail with a watch event of type ERROR"). X in the future → wait up to a few seconds, then
  an ERROR 504 "Too large resource version".
- **Selectors.** An object that stops matching arrives as DELETED (its previous state, stamped
  with the new RV); one that starts matching as ADDED (``convertToWatchEvent``).
- **Bookmarks** only with ``allowWatchBookmarks``: one per ``bookmark_interval`` (upstream: a
  minute) and one shortly before the deadline; the object is ``{kind, apiVersion,
  metadata.resourceVersion}``. ``sendInitialEvents`` ends its initial ADDED events with a
  bookmark annotated ``k8s.io/initial-events-end``.
- **End.** ``timeoutSeconds`` gives a clean EOF at the deadline; without it the server picks a
  random deadline in [minRequestTimeout, 2 * minRequestTimeout) like upstream (30-60 min). A
  watcher that falls more than ``queue_size`` changes behind is closed, as the cacher closes
  unresponsive watchers.
- **Faults.** :meth:`Watch.inject` closes (clean EOF), aborts (the client sees a broken chunked
  stream), stalls, or expires (ERROR 410) a live watch; :class:`WatchHub` lists live watches so
  the fault engine can reach them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import Any, Literal

import msgspec
from aiohttp import web

from api.objects import Json
from devtools.cluster.apirules import errors
from devtools.cluster.apirules.errors import StatusError
from devtools.cluster.apirules.resources import ResourceType
from devtools.cluster.http import wire
from devtools.cluster.http.reads import ListOptions, matches, parse_resource_version
from devtools.cluster.storage.store import Change, Store, Subscription, TooOld, decode

__all__ = ["Watch", "WatchAction", "WatchHub", "WatchSettings"]

log = logging.getLogger(__name__)

WatchAction = Literal["close", "abort", "stall", "expire"]


@dataclass
class WatchSettings:
    bookmark_interval: float = 60.0
    bookmark_before_deadline: float = 2.0
    min_request_timeout: float = 1800.0
    queue_size: int = 10000
    too_large_wait: float = 3.0
    idle_check: float = 1.0


@dataclass(eq=False)
class WatchInfo:
    resource: str  # the plural
    group: str
    namespace: str
    user_agent: str
    started: float = field(default_factory=time.monotonic)
    events_sent: int = 0


class WatchHub:
    """The live watches, so that tests and the fault engine can act on them."""

    def __init__(self) -> None:
        self._watches: set[Watch] = set()
        self._changed = asyncio.Event()

    def add(self, watch: Watch) -> None:
        self._watches.add(watch)
        self._changed.set()

    def discard(self, watch: Watch) -> None:
        self._watches.discard(watch)
        self._changed.set()

    async def wait_for(self, count: int = 1, *, resource: str | None = None) -> list[Watch]:
        """Wait until at least ``count`` watches (of ``resource``) are live; bound it with
        ``asyncio.timeout``."""
        while True:
            live = [w for w in self._watches if resource is None or w.info.resource == resource]
            if len(live) >= count:
                return live
            self._changed.clear()
            await self._changed.wait()

    def active(self) -> list[Watch]:
        return list(self._watches)

    def inject(
        self,
        action: WatchAction,
        *,
        resource: str | None = None,
        namespace: str | None = None,
    ) -> int:
        """Apply ``action`` to every live watch that matches; returns how many."""
        hit = 0
        for watch in self.active():
            if resource is not None and watch.info.resource != resource:
                continue
            if namespace is not None and watch.info.namespace != namespace:
                continue
            watch.inject(action)
            hit += 1
        return hit


def _line(event_type: str, obj: Json) -> bytes:
    return wire.event_line(event_type, obj)


def _rendered(watch: Watch, event_type: str, obj: Json | bytes) -> bytes:
    """An event line, with the object in the representation the watcher asked for.

    ``obj`` is the stored bytes when the event needs no change to them (:mod:`.wire` presents
    them without decoding), or a decoded object.
    """
    if isinstance(obj, bytes):
        if watch.render is None:
            return wire.event_line(event_type, wire.presented(watch.rtype, obj))
        obj = watch.rtype.present(decode(obj))
    return wire.event_line(event_type, watch.render(obj) if watch.render is not None else obj)


_BATCH_EVENTS = 256
_BATCH_BYTES = 256 * 1024
"""The most events, and bytes, one write of a watch carries (see :meth:`Watch._send_due`)."""

_SHARED_LIMIT = 512
_shared: dict[tuple[int, int], tuple[ResourceType, bytes, Json]] = {}


def _shared_decoded(rtype: ResourceType, raw: bytes) -> Json:
    """``raw`` decoded and presented, read-only, shared by every filtered watch of a change:
    each of the watches of Pods by label would otherwise decode the change's new and old bytes
    again, and those decodes were the development cluster's largest single cost."""
    key = (id(rtype), id(raw))
    held = _shared.get(key)
    if held is not None and held[0] is rtype and held[1] is raw:
        return held[2]
    obj = rtype.present(decode(raw))
    if len(_shared) >= _SHARED_LIMIT:
        del _shared[next(iter(_shared))]
    _shared[key] = (rtype, raw, obj)
    return obj


class _LabelsOnly(msgspec.Struct):
    labels: Any = None


class _MetadataOnly(msgspec.Struct):
    metadata: _LabelsOnly


_labels_decoder = msgspec.json.Decoder(_MetadataOnly)
_shared_labels_of: dict[int, tuple[bytes, Any]] = {}


def _shared_labels(raw: bytes) -> Any:
    """``metadata.labels`` of stored bytes (None if unset), shared like
    :func:`_shared_decoded`: a watch filtered by labels alone needs nothing else to decide, and
    msgspec reads only that field, skipping the rest of the object, several times faster than
    a full decode."""
    key = id(raw)
    held = _shared_labels_of.get(key)
    if held is not None and held[0] is raw:
        return held[1]
    labels = _labels_decoder.decode(raw).metadata.labels
    if len(_shared_labels_of) >= _SHARED_LIMIT:
        del _shared_labels_of[next(iter(_shared_labels_of))]
    _shared_labels_of[key] = (raw, labels)
    return labels


class Watch:
    def __init__(
        self,
        *,
        store: Store,
        rtype: ResourceType,
        namespace: str,
        opts: ListOptions,
        settings: WatchSettings,
        rng: Random,
        event_delay: Callable[[], float] = lambda: 0.0,
        info: WatchInfo,
        render: Callable[[Json], Json] | None = None,
    ) -> None:
        self.render = render
        self.store = store
        self.rtype = rtype
        self.namespace = namespace
        self.opts = opts
        self.settings = settings
        self.rng = rng
        self.event_delay = event_delay
        self.info = info
        self._pending: deque[Change] = deque()
        self._due_for: Change | None = None  # the pending change whose due time is _due
        self._timer: asyncio.TimerHandle | None = None  # sets _wake (see _wake_by)
        self._due = 0.0
        self._wake = asyncio.Event()
        self._actions: deque[WatchAction] = deque()
        self._scheduled: list[tuple[int, float, WatchAction]] = []
        self._overflowed = False
        self._subscription: Subscription | None = None
        self._response: web.StreamResponse | None = None

    # -- control ----------------------------------------------------------------------------

    def inject(self, action: WatchAction) -> None:
        self._actions.append(action)
        self._wake.set()

    def schedule(
        self, action: WatchAction, *, after_events: int = 0, after_seconds: float = 0
    ) -> None:
        """Fire ``action`` once this watch has sent ``after_events`` events and
        ``after_seconds`` have passed since it started."""
        self._scheduled.append((after_events, self.info.started + after_seconds, action))
        self._wake.set()

    def _sink(self, change: Change) -> None:
        if len(self._pending) >= self.settings.queue_size:
            self._overflowed = True
        else:
            self._pending.append(change)
        self._wake.set()

    # -- serving ----------------------------------------------------------------------------

    def _deadline(self) -> float:
        if self.opts.timeout_seconds is not None and self.opts.timeout_seconds > 0:
            return time.monotonic() + self.opts.timeout_seconds
        low = self.settings.min_request_timeout
        return time.monotonic() + low + self.rng.random() * low

    async def serve(self, request: web.Request) -> web.StreamResponse:
        requested: int | None = None
        if self.opts.resource_version not in ("", "0"):
            requested = parse_resource_version(self.opts.resource_version)
        deadline = self._deadline()
        response = web.StreamResponse(
            status=200,
            headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"},
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        self._response = response
        try:
            await self._run(request, response, requested, deadline)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # never let a watch die with a traceback on the wire
            log.exception("watch failed")
        finally:
            if self._subscription is not None:
                self._subscription.close()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        return response

    async def _run(
        self,
        request: web.Request,
        response: web.StreamResponse,
        requested: int | None,
        deadline: float,
    ) -> None:
        if requested is not None and requested > self.store.resource_version:
            reached = await self.store.wait_for_resource_version(
                requested, self.settings.too_large_wait
            )
            if not reached:
                error = errors.too_large_resource_version(requested, self.store.resource_version)
                await self._send_error(response, error)
                return
        initial = self._start(requested)
        if isinstance(initial, StatusError):
            await self._send_error(response, initial)
            return
        # The initial events go out in writes of up to _BATCH_BYTES: one write per event was
        # a socket send (and a chunk) per object. The byte stream the client reads is the same.
        batch: list[bytes] = []
        size = 0
        for event_type, obj in initial:
            line = _rendered(self, event_type, obj)
            batch.append(line)
            size += len(line)
            if size >= _BATCH_BYTES:
                await response.write(b"".join(batch))
                self.info.events_sent += len(batch)
                batch, size = [], 0
        if batch:
            await response.write(b"".join(batch))
            self.info.events_sent += len(batch)
        if self.opts.send_initial_events:
            await self._bookmark(response, initial_end=True)
        await self._loop(request, response, deadline)

    def _start(self, requested: int | None) -> list[tuple[str, Json | bytes]] | StatusError:
        """Synchronously: the initial events, the backlog, and the subscription."""
        initial: list[tuple[str, Json | bytes]] = []
        storage = self.rtype.storage
        scope = self.namespace or None
        if requested is None or self.opts.send_initial_events:
            filtered = self.opts.filtered
            for _, raw in self.store.snapshot(storage, scope).after():
                if not filtered:
                    initial.append(("ADDED", raw))
                    continue
                obj = self.rtype.present(decode(raw))
                if matches(obj, self.opts):
                    initial.append(("ADDED", obj))
        else:
            try:
                backlog = self.store.changes_since(storage, requested)
            except TooOld as exc:
                return errors.expired(f"too old resource version: {exc.requested} ({exc.floor})")
            self._pending.extend(backlog)
        self._subscription = self.store.subscribe(storage, self._sink)
        return initial

    def _convert(self, change: Change) -> tuple[str, Json | bytes] | None:
        if self.namespace and change.namespace != self.namespace:
            return None
        if not self.opts.filtered:
            # Everything matches: the event type is the change's, the object its stored bytes
            # (for DELETED, the last state already stamped with the deletion's RV).
            if change.new is None:
                return None
            return change.type, change.new
        if (
            self.opts.fields is None
            and self.opts.labels is not None
            and self.rtype.to_external is None
        ):
            return self._convert_by_labels(change)
        new_obj = None
        if change.type != "DELETED" and change.new is not None:
            new_obj = _shared_decoded(self.rtype, change.new)
        old_obj = _shared_decoded(self.rtype, change.old) if change.old is not None else None
        current = new_obj is not None and matches(new_obj, self.opts)
        previous = old_obj is not None and matches(old_obj, self.opts)
        if current:
            assert change.new is not None
            return ("MODIFIED" if previous else "ADDED"), change.new
        if previous:
            assert old_obj is not None
            stamped = {**old_obj, "metadata": {**old_obj["metadata"]}}
            stamped["metadata"]["resourceVersion"] = str(change.rv)
            return "DELETED", stamped
        return None

    def _convert_by_labels(self, change: Change) -> tuple[str, Json | bytes] | None:
        """:meth:`_convert` for a watch filtered by a label selector alone: the same decision
        from the labels of the new and old bytes (what :func:`~.reads.matches` reads of a
        presented object; presenting sets only apiVersion and kind), decoding the whole old
        object only to send it as DELETED."""
        selector = self.opts.labels
        assert selector is not None
        current = (
            change.type != "DELETED"
            and change.new is not None
            and selector.matches(_shared_labels(change.new) or {})
        )
        if current:
            assert change.new is not None
            previous = change.old is not None and selector.matches(_shared_labels(change.old) or {})
            return ("MODIFIED" if previous else "ADDED"), change.new
        if change.old is not None and selector.matches(_shared_labels(change.old) or {}):
            old_obj = _shared_decoded(self.rtype, change.old)
            stamped = {**old_obj, "metadata": {**old_obj["metadata"]}}
            stamped["metadata"]["resourceVersion"] = str(change.rv)
            return "DELETED", stamped
        return None

    def _head_due(self) -> float:
        """When the oldest pending change is due (its commit plus the drawn watch delay).

        Drawn once per change and remembered: a change looked at for a batch but not yet due
        keeps its draw, so the latency model's random sequence is what it was one event at a
        time."""
        head = self._pending[0]
        if self._due_for is not head:
            self._due_for, self._due = head, head.at + self.event_delay()
        return self._due

    async def _send_due(self, response: web.StreamResponse) -> None:
        """Send the oldest pending change (its delay has passed) and, in the same write, every
        change after it that is already due, up to _BATCH_EVENTS / _BATCH_BYTES.

        One write per event cost a chunk and a socket send each, for every watcher, and under a
        burst of writes a watch has many changes waiting. The client reads the same lines in the
        same order; only the chunk boundaries differ. Batching stops wherever one event at a
        time could have acted in between: an action injected or scheduled (``after_events``
        counts events), or a change whose delay has not passed."""
        lines: list[bytes] = []
        size = 0
        while True:
            change = self._pending.popleft()
            self._due_for = None
            event = self._convert(change)
            if event is not None:
                line = _rendered(self, *event)
                lines.append(line)
                size += len(line)
            if (
                not self._pending
                or self._actions
                or self._scheduled
                or self._overflowed
                or len(lines) >= _BATCH_EVENTS
                or size >= _BATCH_BYTES
                or self._head_due() > self.store.now()
            ):
                break
        if lines:
            await response.write(lines[0] if len(lines) == 1 else b"".join(lines))
            self.info.events_sent += len(lines)

    async def _bookmark(self, response: web.StreamResponse, *, initial_end: bool = False) -> None:
        meta: Json = {"resourceVersion": str(self.store.resource_version)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": self.rtype.kind, "apiVersion": self.rtype.api_version, "metadata": meta}
        await response.write(_line("BOOKMARK", obj))

    async def _send_error(self, response: web.StreamResponse, error: StatusError) -> None:
        await response.write(_line("ERROR", error.body()))
        await response.write_eof()

    def _due_action(self) -> WatchAction | None:
        if self._actions:
            return self._actions.popleft()
        now = time.monotonic()
        for entry in list(self._scheduled):
            after_events, at, action = entry
            if self.info.events_sent >= after_events and now >= at:
                self._scheduled.remove(entry)
                return action
        return None

    async def _loop(
        self, request: web.Request, response: web.StreamResponse, deadline: float
    ) -> None:
        settings = self.settings
        bookmarks = self.opts.allow_bookmarks
        pre_deadline = deadline - min(
            settings.bookmark_before_deadline, max(0.0, (deadline - time.monotonic()) / 2)
        )
        next_bookmark = time.monotonic() + settings.bookmark_interval
        sent_pre_deadline = False
        while True:
            action = self._due_action()
            if action is not None:
                await self._perform(action, request, response, deadline)
                return
            if self._overflowed:
                await response.write_eof()
                return
            now = time.monotonic()
            if now >= deadline:
                await response.write_eof()
                return
            if self._pending:
                delay = self._head_due() - self.store.now()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self._send_due(response)
                continue
            if bookmarks and not sent_pre_deadline and now >= pre_deadline:
                await self._bookmark(response)
                sent_pre_deadline = True
                continue
            if bookmarks and now >= next_bookmark:
                await self._bookmark(response)
                next_bookmark = now + settings.bookmark_interval
                continue
            transport = request.transport
            if transport is None or transport.is_closing():
                return
            timers = [deadline, now + settings.idle_check]
            if bookmarks:
                timers.append(next_bookmark)
                if not sent_pre_deadline:
                    timers.append(pre_deadline)
            for _, at, _ in self._scheduled:
                timers.append(at)
            self._wake.clear()
            self._wake_by(max(0.0, min(timers) - now))
            await self._wake.wait()

    def _wake_by(self, delay: float) -> None:
        """Have :attr:`_wake` set ``delay`` seconds from now at the latest.

        This runs once per event a watch sends. A timeout around each wait (``asyncio.timeout``)
        armed a timer and built a context for every event; one timer now serves many: one armed
        for no later than needed is kept, and waking early only makes the loop look again (the
        idle check alone asks for a wake a second after every event)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        timer = self._timer
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self._timer = loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._wake.set()

    async def _perform(
        self,
        action: WatchAction,
        request: web.Request,
        response: web.StreamResponse,
        deadline: float,
    ) -> None:
        if action == "close":
            await response.write_eof()
        elif action == "expire":
            current = self.store.resource_version
            await self._send_error(
                response, errors.expired(f"too old resource version: {current} ({current})")
            )
        elif action == "abort":
            transport = request.transport
            if transport is not None:
                transport.abort()
        elif action == "stall":
            while time.monotonic() < deadline:
                transport = request.transport
                if transport is None or transport.is_closing():
                    return
                self._wake.clear()
                wait = min(self.settings.idle_check, deadline - time.monotonic())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(0.0, wait))
                if self._actions:
                    nxt = self._actions.popleft()
                    if nxt != "stall":
                        await self._perform(nxt, request, response, deadline)
                        return
            transport = request.transport
            if transport is not None:
                transport.abort()
