"""Consuming the event log: strict decoding at the edge, and a dead letter for whatever fails.

The watcher only publishes; every *consumer* of the bus (the workers, and any future reader
that acts on events) must be able to meet a message it cannot use, because anything with
access to NATS can publish on ``sandbus.events.>``, and the event log stores whatever arrives
there. Invariant 7 of docs/architecture.md says such a message never crashes a service and never
disappears silently, so every consumer goes through :func:`consume_events`, which decides per
message (:func:`classify`, pure):

- **decodes, and belongs on this subject** → the handler gets the typed event; the message is
  acked when the handler returns.
- **does not decode** (not JSON, not a CloudEvent, a bad attribute, an id that does not match
  its object...) or **decodes but sits on another object's subject** (a subscriber filtering
  by subject would be misled) → a dead letter on ``sandbus.dlq.<subject>`` with the
  original bytes and the precise reason (:class:`events.codec.EventDecodeError` names the
  attribute), then the message is acked so it is not redelivered.
- **a well-formed event of a type this version does not know** → skipped (acked) by default:
  a newer producer is not a broken one. ``unknown_types="dead-letter"`` dead-letters those too.
- **not wanted** (``wanted``, asked before anything is decoded, says the consumer has no use
  for it) → acked and counted as filtered.
- **the handler raises** → the message is nak'ed with a growing delay and redelivered; after
  ``max_deliver`` deliveries it is dead-lettered with the handler's error as the reason. A
  poison message therefore costs a few retries, not the consumer.

Dead-lettering happens *before* the ack: a crash in between redelivers the message, and the
dead letter's ``Nats-Msg-Id`` (stream and sequence) makes the second dead letter a no-op.

**Pulling, without nats-py's fetch.** Every message a worker consumes came through here, and
nats-py's ``fetch`` spends two tasks and a random id on each message it waits for, and a
request per batch: 120-140 µs of CPU per message trickling in, against 50 µs for the loop here
(measured in isolation, with 2 KB messages). :class:`_Pulls` keeps pull requests of ``batch``
messages waiting at the server (JetStream's pull protocol: a request on
``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`` with a reply inbox, which the server answers
with messages as they come, until the batch is full or the request expires with a 408 status
saying how many it did not fill) and asks for more when half of them have arrived; the
messages land on one subscription's callback and are handled in order by the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from events.codec import EventDecodeError, UnknownEventType, decode_event, nats_subject
from events.types import Event
from services.runtime.bus import BusConfig, dead_letter
from services.runtime.cancellation import honour_lost_cancellation

__all__ = ["ConsumeStats", "consume_events"]

log = logging.getLogger(__name__)

Handler = Callable[[Event, Msg], Awaitable[None]]

PULL_EXPIRES: Final = 5.0
"""Seconds a pull request waits at the server for messages before it expires (and is
renewed): how soon a pull lost with a connection is noticed."""


@dataclass(frozen=True)
class Accepted:
    event: Event


@dataclass(frozen=True)
class Rejected:
    """Goes to the dead-letter subject with ``reason``."""

    reason: str


@dataclass(frozen=True)
class Skipped:
    """Acked and left alone (logged)."""

    reason: str


def classify(
    subject: str,
    payload: bytes,
    *,
    unknown_types: Literal["skip", "dead-letter"] = "skip",
) -> Accepted | Rejected | Skipped:
    """What to do with one message received on ``subject``."""
    try:
        event = decode_event(payload)
    except UnknownEventType as error:
        if unknown_types == "skip":
            return Skipped(str(error))
        return Rejected(f"undecodable event: {error}")
    except EventDecodeError as error:
        return Rejected(f"undecodable event: {error}")
    expected = nats_subject(event)
    if subject != expected:
        return Rejected(
            f"event {event.id} of {event.subject} was published on {subject}, "
            f"but belongs on {expected}"
        )
    return Accepted(event)


@dataclass
class ConsumeStats:
    handled: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    filtered: int = 0
    """Messages ``wanted`` turned away before decoding them."""
    retried: int = 0
    pending: int = 0
    """Messages the consumer had not delivered yet when it last fetched: its lag."""


async def consume_events(
    js: JetStreamContext,
    *,
    filter_subjects: Sequence[str],
    handle: Handler,
    rejected_by: str,
    durable: str | None = None,
    bus: BusConfig | None = None,
    deliver_policy: DeliverPolicy = DeliverPolicy.ALL,
    max_deliver: int = 5,
    ack_wait: float = 30.0,
    batch: int = 64,
    unknown_types: Literal["skip", "dead-letter"] = "skip",
    stats: ConsumeStats | None = None,
    started: asyncio.Event | None = None,
    wanted: Callable[[str, bytes], bool] | None = None,
) -> None:
    """Run a pull consumer on the event log until cancelled, handling or dead-lettering each
    message. With ``durable`` the consumer is shared by every replica that names it (each
    message goes to one of them); without, it is ephemeral.

    ``max_deliver`` is enforced here (the consumer itself allows one more delivery), so the
    last failing delivery dead-letters instead of leaving the message stranded.
    """
    bus = bus or BusConfig()
    stats = stats if stats is not None else ConsumeStats()
    config = ConsumerConfig(
        durable_name=durable,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=deliver_policy,
        ack_wait=ack_wait,
        max_deliver=max_deliver + 1,
        filter_subjects=list(filter_subjects) if len(filter_subjects) > 1 else None,
        filter_subject=filter_subjects[0] if len(filter_subjects) == 1 else None,
        inactive_threshold=None if durable else 300.0,
    )
    consumer = await _consumer(js, bus.event_log_stream, config, durable)
    pulls = _Pulls(js, bus.event_log_stream, consumer, batch)
    await pulls.subscribe()
    if started is not None:
        started.set()
    try:
        while True:
            # Each pass through nats-py (pull, ack, nak, dead letter) may have lost a cancel.
            honour_lost_cancellation()
            try:
                messages = await pulls.next_messages()
            except NatsError as error:
                honour_lost_cancellation()
                log.warning("%s: pulling events: %r", rejected_by, error)
                await asyncio.sleep(0.5)
                continue
            honour_lost_cancellation()
            for msg in messages:
                if wanted is not None and not wanted(msg.subject, msg.data):
                    stats.filtered += 1
                    await msg.ack()
                    continue
                await _process(js, msg, handle, rejected_by, bus, max_deliver, unknown_types, stats)
            if messages:
                stats.pending = messages[-1].metadata.num_pending
    finally:
        try:
            await pulls.unsubscribe()
        except (NatsError, TimeoutError) as error:
            log.debug("%s: unsubscribing: %r", rejected_by, error)


async def _consumer(
    js: JetStreamContext, stream: str, config: ConsumerConfig, durable: str | None
) -> str:
    """The name of the consumer to pull from: the durable when it exists, else one made."""
    if durable is not None:
        try:
            await js.consumer_info(stream, durable)
            return durable
        except NotFoundError:
            pass
    info = await js.add_consumer(stream, config)
    return info.name


class _PullStatus(msgspec.Struct):
    """What a pull request's status answer says (JetStream's headers)."""

    code: str
    description: str
    unfilled: int | None


class _Pulls:
    """Pull requests kept waiting at the server, and the messages they bring (module doc)."""

    def __init__(self, js: JetStreamContext, stream: str, consumer: str, batch: int) -> None:
        self._nc: Client = js._nc  # the connection the context uses: its inbox, its requests
        self._next = f"{js._prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._batch = batch
        self._inbox = self._nc.new_inbox()
        self._arrived: list[Msg] = []
        self._ready = asyncio.Event()
        self._subscription: Any = None
        self._outstanding = 0
        """Messages asked for and not arrived, of requests not expired."""
        self._expires_at = 0.0
        """When the latest request expires: by then its 408 has come, or it was lost."""
        self._refused: str | None = None
        """Why the server ended every request (a 409 or 503), told on the next call."""

    async def subscribe(self) -> None:
        self._subscription = await self._nc.subscribe(self._inbox, cb=self._arrive)

    async def unsubscribe(self) -> None:
        if self._subscription is not None:
            await self._subscription.unsubscribe()

    async def _arrive(self, msg: Msg) -> None:
        self._arrived.append(msg)
        self._ready.set()

    async def next_messages(self) -> list[Msg]:
        """The messages that arrived (at least one, or none once a request expired); raises
        when the server ended the requests (the consumer deleted, JetStream unavailable), after
        handing over what arrived before."""
        if self._refused is not None:
            refused, self._refused = self._refused, None
            raise NatsError(f"the consumer answered {refused}")
        loop = asyncio.get_running_loop()
        if loop.time() >= self._expires_at:
            self._outstanding = 0  # expired: its 408 came, or it was lost with a connection
        if self._outstanding <= self._batch // 2:
            await self._nc.publish(
                self._next, _pull_request(self._batch - self._outstanding), reply=self._inbox
            )
            self._outstanding = self._batch
            self._expires_at = loop.time() + PULL_EXPIRES
        if not self._arrived:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(self._expires_at + _EXPIRY_MARGIN):
                    await self._ready.wait()
        self._ready.clear()
        arrived, self._arrived = self._arrived, []
        messages = []
        for msg in arrived:
            status = _status_of(msg)
            if status is None:
                self._outstanding = max(0, self._outstanding - 1)
                messages.append(msg)
            elif status.code == "408":  # a request expired with this many unfilled
                self._outstanding = max(0, self._outstanding - (status.unfilled or 0))
            elif status.code != "100":  # not a heartbeat: the requests are gone
                self._outstanding = 0
                self._refused = f"{status.code} {status.description}"
        return messages


_EXPIRY_MARGIN: Final = 1.0
"""Seconds a request's 408 may take to arrive after it expired."""


def _pull_request(batch: int) -> bytes:
    return msgspec.json.encode({"batch": batch, "expires": int(PULL_EXPIRES * 1e9)})


def _status_of(msg: Msg) -> _PullStatus | None:
    headers = msg.headers
    if not headers or "Status" not in headers:
        return None
    unfilled = headers.get("Nats-Pending-Messages")
    return _PullStatus(
        headers["Status"],
        headers.get("Description", ""),
        int(unfilled) if unfilled and unfilled.isdigit() else None,
    )


async def _process(
    js: JetStreamContext,
    msg: Msg,
    handle: Handler,
    rejected_by: str,
    bus: BusConfig,
    max_deliver: int,
    unknown_types: Literal["skip", "dead-letter"],
    stats: ConsumeStats,
) -> None:
    verdict = classify(msg.subject, msg.data, unknown_types=unknown_types)
    if isinstance(verdict, Skipped):
        log.info("%s: skipping a message on %s: %s", rejected_by, msg.subject, verdict.reason)
        stats.skipped += 1
        await msg.ack()
        return
    if isinstance(verdict, Rejected):
        await _dead_letter(js, msg, verdict.reason, rejected_by, bus, stats)
        return
    try:
        await handle(verdict.event, msg)
    except asyncio.CancelledError:
        raise
    except Exception as error:
        delivered = msg.metadata.num_delivered
        if delivered >= max_deliver:
            reason = f"the handler failed {delivered} times, last with {error!r}"
            await _dead_letter(js, msg, reason, rejected_by, bus, stats)
            return
        log.warning("%s: handling %s failed (%r); retrying", rejected_by, verdict.event.id, error)
        stats.retried += 1
        await msg.nak(delay=min(30.0, 0.5 * 2 ** (delivered - 1)))
        return
    stats.handled += 1
    await msg.ack()


async def _dead_letter(
    js: JetStreamContext,
    msg: Msg,
    reason: str,
    rejected_by: str,
    bus: BusConfig,
    stats: ConsumeStats,
) -> None:
    log.warning("%s: dead-lettering a message on %s: %s", rejected_by, msg.subject, reason)
    try:
        await dead_letter(js, msg, reason=reason, config=bus, rejected_by=rejected_by)
    except (NatsError, TimeoutError) as error:
        # Not acked: it comes back after ack_wait and is dead-lettered then.
        log.warning("%s: dead-lettering failed (%r); it will be redelivered", rejected_by, error)
        return
    stats.dead_lettered += 1
    await msg.ack()
