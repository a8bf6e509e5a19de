"""Publishing decided changes: in order per object, in parallel across objects, never dropped.

The watch loops decide (:mod:`services.watcher.core.diffing`) and hand each :class:`Change` to
:meth:`Publisher.submit`. The publisher keeps three promises:

**Order per object.** Every object key hashes to one of ``shards`` queues, each drained by one
task that publishes one change at a time: the changes of one object leave in the order they
were decided, while different objects proceed in parallel (the idea of Kopf's per-object
queues, with a fixed number of tasks instead of one per object).

**Bounded memory, and backpressure.** At most ``max_pending`` changes wait in all queues
together; :meth:`submit` blocks when they are full. The watch loop that called it stops reading
its HTTP stream, TCP fills up, and the API server holds its events (or, if it falls too far
behind, closes the watch, which the watch loop resumes from the last resourceVersion). A slow
NATS therefore slows the watcher down; it never makes it buffer without limit.

**Exactly once, in one write.** Each change becomes one CloudEvent, written to the event log
(with its deterministic id as ``Nats-Msg-Id`` and the trace context as headers), fenced by the
subject's last sequence (:func:`services.watcher.streams.fenced_publish`) and retried until it
lands or this replica stops leading. The server copies it into the state table
(:mod:`services.runtime.bus`). When the fence finds another writer's message (two leaders
overlapping), ours is written after it unless that message is the same object at a
resourceVersion at least as new (:func:`keeps_stored_message`): an older state never becomes
an object's latest, in the log or in the table derived from it. A deletion's tombstone is
scheduled for removal from the table (:mod:`services.watcher.tombstones`).

A synthetic deletion has no object of its own: its object is the last state published for that
key, read back from the event log (or the state table, if the log no longer holds it).

An event larger than the connection's ``max_payload`` cannot be published at all (NATS' default
is 1 MiB; the API server admits objects up to 1.5 MiB). It is not dropped silently: a dead
letter with the reason and the object's identity (its metadata only) goes to the dead-letter
subject of the event, and the change counts as handled. The remedy is to raise
``max_payload`` in the NATS server configuration.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.js.api import RawStreamMsg
from opentelemetry.trace import Span

from events.codec import EventDecodeError, decode_event, encode_event
from events.envelope import ObjectKey
from events.headers import MSG_ID, event_headers
from events.redaction import public_subject, redacted_object
from events.subjects import event_subject, state_subject
from events.types import (
    ObjectAdded,
    ObjectDeleted,
    ObjectEvent,
    ObjectModified,
    ObservedObjectError,
    observed_event,
)
from services.runtime.acked import AckedPublisher
from services.runtime.bus import BusConfig, ensure_bus, publish_dead_letter
from services.runtime.cancellation import honour_lost_cancellation, supervise
from services.watcher.core.diffing import Change
from services.watcher.core.recovery import keeps_stored_state, state_identity
from services.watcher.resources import WatchedResource
from services.watcher.streams import (
    TRANSIENT,
    Backoff,
    LeadershipLost,
    PublishStats,
    fenced_publish,
    last_message,
)
from services.watcher.tombstones import Tombstones
from services.watcher.tracing import PublishSpans, TraceContext, failed, trace_context

__all__ = ["Publisher", "event_id_of_log_message", "keeps_stored_message"]

log = logging.getLogger(__name__)

_HEADER_ALLOWANCE = 1024
"""Room left for the headers under ``max_payload``, which limits headers and payload together."""


def event_id_of_log_message(msg: RawStreamMsg) -> str | None:
    return (msg.headers or {}).get(MSG_ID)


def keeps_stored_message(ours: ObjectEvent, stored: RawStreamMsg) -> bool:
    """Whether ``stored``, another writer's last message of the object in the event log, stays
    its last instead of being followed by ``ours``
    (:func:`~services.watcher.core.recovery.keeps_stored_state`); a stored message that is not an
    observed change is written after."""
    if not stored.data:
        return False
    try:
        event = decode_event(stored.data)
    except EventDecodeError:
        return False
    return isinstance(event, ObjectAdded | ObjectModified | ObjectDeleted) and keeps_stored_state(
        state_identity(event), state_identity(ours)
    )


class Publisher:
    """Sharded, ordered, bounded publishing of one leader's changes."""

    def __init__(
        self,
        nc: Client,
        *,
        bus: BusConfig,
        resources: Mapping[str, WatchedResource],
        may_write: Callable[[], bool],
        seqs: dict[ObjectKey, int | None],
        tombstones: Tombstones,
        shards: int = 32,
        max_pending: int = 1024,
        ack_timeout: float = 5.0,
        stats: PublishStats | None = None,
        public: bool = False,
        spans: PublishSpans | None = None,
        acked: AckedPublisher | None = None,
    ) -> None:
        self._nc = nc
        self._public = public
        self._js = nc.jetstream()
        self._acked = acked if acked is not None else AckedPublisher(nc)
        self._bus = bus
        self._resources = resources
        self._may_write = may_write
        self._seqs = seqs
        self._tombstones = tombstones
        self._queues: list[asyncio.Queue[Change]] = [asyncio.Queue() for _ in range(shards)]
        self._slots = asyncio.Semaphore(max_pending)
        self._pending = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._ack_timeout = ack_timeout
        self.stats = stats if stats is not None else PublishStats()
        self._spans = spans if spans is not None else PublishSpans(None)

    # -- the watch loops' side --------------------------------------------------------------

    async def submit(self, change: Change) -> None:
        """Queue ``change`` behind the earlier changes of its object; waits while full."""
        await self._slots.acquire()
        self._pending += 1
        self._idle.clear()
        self._queues[hash(change.key) % len(self._queues)].put_nowait(change)

    async def idle(self) -> None:
        """Wait until every submitted change is published (for tests and benchmarks)."""
        await self._idle.wait()

    @property
    def pending(self) -> int:
        return self._pending

    # -- the publishing side ----------------------------------------------------------------

    async def run(self) -> None:
        """Drain the queues until cancelled, or until this replica stops leading
        (:class:`LeadershipLost`)."""
        await supervise(
            (f"watcher-publish-{index}", self._drain(queue))
            for index, queue in enumerate(self._queues)
        )

    async def _drain(self, queue: asyncio.Queue[Change]) -> None:
        while True:
            change = await queue.get()
            await self._publish(change)
            self._pending -= 1
            self._slots.release()
            if self._pending == 0:
                self._idle.set()

    async def _repair_bus(self) -> None:
        await ensure_bus(self._js, self._bus)

    async def _publish(self, change: Change) -> None:
        obj = change.object
        if obj is None:
            obj = await self._last_published_object(change)
        resource = self._resources[change.key.kind]
        obj = resource.projected(resource.complete(dict(obj)))
        trace = trace_context(change.event_id, obj)
        # The watcher's span of this change, with the ids its event carries (services/watcher/
        # tracing.py): what consumers trace under the event's traceparent hangs under it.
        with self._spans.publishing(trace, change.change, change.key, change.event_id) as span:
            await self._write(change, obj, trace, span)

    async def _write(
        self, change: Change, obj: dict[str, Any], trace: TraceContext, span: Span | None
    ) -> None:
        """The change's write to the event log, or its dead letter."""
        try:
            event = observed_event(
                change.change,
                obj,
                time=datetime.now(UTC),
                synthetic=change.synthetic,
                traceparent=trace.traceparent,
                tracestate=trace.tracestate,
            )
        except ObservedObjectError as error:
            reason = f"the object cannot become an event: {error}"
            failed(span, f"dead-lettered: {reason}")
            await self._dead_letter(change, obj, reason)
            return
        payload = encode_event(event)
        if len(payload) + _HEADER_ALLOWANCE > self._nc.max_payload:
            reason = (
                f"event {change.event_id} is {len(payload)} bytes, above the NATS max_payload "
                f"of {self._nc.max_payload} bytes; raise max_payload in the server config"
            )
            failed(span, f"dead-lettered: {reason}")
            await self._dead_letter(change, obj, reason)
            return
        key = change.key
        headers = event_headers(
            event.id, traceparent=event.traceparent, tracestate=event.tracestate, dedup=True
        )
        seq = await fenced_publish(
            self._js,
            self._acked,
            stream=self._bus.event_log_stream,
            subject=event_subject(key.kind, key.namespace or None, key.name),
            payload=payload,
            headers=headers,
            expected=self._seqs.get(key),
            event_id=event.id,
            stored_id=event_id_of_log_message,
            may_write=self._may_write,
            repair_bus=self._repair_bus,
            stats=self.stats,
            ack_timeout=self._ack_timeout,
            keep_stored=functools.partial(keeps_stored_message, event),
        )
        if self._public:
            await self._publish_public(event, obj, change, trace)
        self.stats.published += 1
        if change.change == "deleted":
            self._tombstones.schedule(
                state_subject(key.kind, key.namespace or None, key.name), event.id, seq
            )
            # Forget the object: memory stays bounded by the live objects. A later object
            # under the same name starts unfenced and learns the sequence on its first write.
            self._seqs.pop(key, None)
        else:
            self._seqs[key] = seq

    async def _publish_public(
        self, event: ObjectEvent, obj: Mapping[str, Any], change: Change, trace: TraceContext
    ) -> None:
        """The redacted copy for external subscribers (events/redaction.py), once the event is
        on the log, with the log entry's id (it derives from the object's uid and version):
        core NATS, no ack, so a slow or absent subscriber never holds the log up."""
        key = change.key
        copy = observed_event(
            change.change,
            redacted_object(dict(obj)),
            time=event.time,
            synthetic=change.synthetic,
            traceparent=trace.traceparent,
            tracestate=trace.tracestate,
        )
        headers = event_headers(
            event.id, traceparent=trace.traceparent, tracestate=trace.tracestate, dedup=False
        )
        subject = public_subject(event_subject(key.kind, key.namespace or None, key.name))
        await self._nc.publish(subject, encode_event(copy), headers=headers)

    async def _last_published_object(self, change: Change) -> dict[str, Any]:
        """The state a synthetic deletion carries: the last one published for its key."""
        key = change.key
        places = (
            (self._bus.event_log_stream, event_subject(key.kind, key.namespace or None, key.name)),
            (self._bus.state_stream, state_subject(key.kind, key.namespace or None, key.name)),
        )
        backoff = Backoff()
        for stream, subject in places:
            while True:
                if not self._may_write():
                    raise LeadershipLost(f"stopped before publishing {change.event_id}")
                try:
                    last = await last_message(self._js, stream, subject)
                    break
                except TRANSIENT as error:
                    log.info("reading %s for %s: %r; retrying", subject, change.event_id, error)
                    await backoff.wait()
            if last is None or not last.data:
                continue
            try:
                event = decode_event(last.data)
            except EventDecodeError:
                continue
            if not isinstance(event, ObjectAdded | ObjectModified | ObjectDeleted):
                continue
            metadata = event.data.object.get("metadata") or {}
            if (metadata.get("uid"), metadata.get("resourceVersion")) == (
                change.uid,
                change.resource_version,
            ):
                return dict(event.data.object)
        log.warning(
            "the last published state of %s (%s) is not on the bus any more; "
            "its synthetic deletion carries only its identity",
            key,
            change.event_id,
        )
        metadata_only: dict[str, Any] = {
            "name": key.name,
            "uid": change.uid,
            "resourceVersion": change.resource_version,
        }
        if key.namespace:
            metadata_only["namespace"] = key.namespace
        return {"kind": key.kind, "metadata": metadata_only}

    async def _dead_letter(self, change: Change, obj: Mapping[str, Any], reason: str) -> None:
        """Record a change that cannot be published, with its identity, on the dead-letter
        subject of its event; retried like any write."""
        key = change.key
        metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        notice = {
            "id": change.event_id,
            "kind": key.kind,
            "namespace": key.namespace,
            "name": key.name,
            "change": change.change,
            "metadata": metadata,
        }
        payload = msgspec.json.encode(notice)
        if len(payload) + _HEADER_ALLOWANCE > self._nc.max_payload:
            payload = msgspec.json.encode({k: v for k, v in notice.items() if k != "metadata"})
        log.error("dead-lettering %s: %s", change.event_id, reason)
        backoff = Backoff()
        while True:
            if not self._may_write():
                raise LeadershipLost(f"stopped before dead-lettering {change.event_id}")
            try:
                await publish_dead_letter(
                    self._js,
                    original_subject=event_subject(key.kind, key.namespace or None, key.name),
                    payload=payload,
                    reason=reason,
                    config=self._bus,
                    rejected_by="watcher",
                    ack_timeout=self._ack_timeout,
                )
                honour_lost_cancellation()
                break
            except TRANSIENT as error:
                log.info("dead-lettering %s: %r; retrying", change.event_id, error)
                await backoff.wait()
        self.stats.dead_lettered += 1
