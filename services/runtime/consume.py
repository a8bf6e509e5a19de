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
- **the handler raises** → the message is nak'ed with a growing delay and redelivered; after
  ``max_deliver`` deliveries it is dead-lettered with the handler's error as the reason. A
  poison message therefore costs a few retries, not the consumer.

Dead-lettering happens *before* the ack: a crash in between redelivers the message, and the
dead letter's ``Nats-Msg-Id`` (stream and sequence) makes the second dead letter a no-op.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from events.codec import EventDecodeError, UnknownEventType, decode_event, nats_subject
from events.types import Event
from services.runtime.bus import BusConfig, dead_letter
from services.runtime.cancellation import honour_lost_cancellation

__all__ = ["ConsumeStats", "consume_events"]

log = logging.getLogger(__name__)

Handler = Callable[[Event, Msg], Awaitable[None]]


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
    sub = await js.pull_subscribe(
        filter_subjects[0], durable=durable, stream=bus.event_log_stream, config=config
    )
    if started is not None:
        started.set()
    try:
        while True:
            # Each pass through nats-py (fetch, ack, nak, dead letter) may have lost a cancel.
            honour_lost_cancellation()
            try:
                messages = await sub.fetch(batch, timeout=5.0)
            except TimeoutError:
                continue
            except NatsError as error:
                honour_lost_cancellation()
                log.warning("%s: fetching events: %r", rejected_by, error)
                await asyncio.sleep(0.5)
                continue
            honour_lost_cancellation()
            for msg in messages:
                await _process(js, msg, handle, rejected_by, bus, max_deliver, unknown_types, stats)
            if messages:
                stats.pending = messages[-1].metadata.num_pending
    finally:
        try:
            await sub.unsubscribe()
        except (NatsError, TimeoutError) as error:
            log.debug("%s: unsubscribing: %r", rejected_by, error)


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
