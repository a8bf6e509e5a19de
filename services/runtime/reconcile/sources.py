"""Inputs beyond the event log: messages a reconcile consumes, and acks only when it is done.

The event log says *which* key changed; a reconcile then reads the cache. Some inputs are not
changes of objects but work items: a warm-queue entry handed to the claim worker is one
sandbox offered to one claim, and it must be acknowledged exactly when the adoption is
committed, not when it was read. A :class:`Source` delivers such messages into the worker,
each joined to the key it concerns; the worker holds it, wakes that key, and hands every held
message of the key to the key's observe (``Observed.messages``). The planner ends its plan with
an :class:`~services.runtime.reconcile.actions.Ack` of the message, and the rule "stop at the
first failed action" makes that an ack-after-commit: a worker that fails or dies before the
ack leaves the message to come back.

While a message is held, the worker keeps it alive (``in_progress``) so that a long reconcile
or a backoff does not let JetStream hand it to another replica; if this replica dies, the ack
wait runs out and another one gets it.

:class:`PullSource` is the JetStream implementation: one durable pull consumer, shared by every
replica that names it (each message goes to one of them: active-active). A message that is not
JSON, or names no key, is dead-lettered with the reason and terminated, never left to wedge
the consumer (invariant 7).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from events.types import DecisionMessage
from services.runtime.bus import BusConfig, dead_letter
from services.runtime.cache import ObjectKey
from services.runtime.cancellation import honour_lost_cancellation

__all__ = ["Delivery", "Held", "PullSource", "Source", "SourceMessage"]

log = logging.getLogger(__name__)


SourceMessage = DecisionMessage
"""What a planner sees of one message (source, token, subject, decoded data, deliveries): the
event contract's type, because the same value is recorded in the decision that consumed it."""


class Handle(Protocol):
    """The message's side that the worker acts on (nats-py's ``Msg``)."""

    async def ack_sync(self, timeout: float = ...) -> Any: ...  # noqa: ASYNC109 (nats-py's)

    async def in_progress(self) -> None: ...

    async def nak(self, delay: float | None = ...) -> None: ...


@dataclass(frozen=True)
class Delivery:
    key: ObjectKey
    message: SourceMessage
    handle: Handle


@dataclass
class Held:
    message: SourceMessage
    handle: Handle


Deliver = Callable[[Delivery], None]


class Source(Protocol):
    """A further input of a worker; ``run`` delivers until cancelled. ``room()`` says how many
    more messages the worker will hold now (a source fetches no more than that)."""

    @property
    def name(self) -> str: ...

    async def run(
        self, js: JetStreamContext, deliver: Deliver, room: Callable[[], int]
    ) -> None: ...


KeyFor = Callable[[str, Any], ObjectKey | None]
"""``(subject, decoded data) -> key``: the key a message concerns (None: it concerns none)."""


@dataclass
class PullSource:
    """A durable pull consumer on ``stream`` over ``filter_subject``; see the module doc."""

    name: str
    stream: str
    durable: str
    filter_subject: str
    key_for: KeyFor
    ack_wait: float = 30.0
    batch: int = 64
    max_deliver: int = -1
    bus: BusConfig = field(default_factory=BusConfig)
    retry_delay: float = 0.5

    def consumer_config(self) -> ConsumerConfig:
        return ConsumerConfig(
            name=self.durable,
            durable_name=self.durable,
            filter_subject=self.filter_subject,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=self.max_deliver,
        )

    async def run(self, js: JetStreamContext, deliver: Deliver, room: Callable[[], int]) -> None:
        await js.add_consumer(self.stream, self.consumer_config())
        sub = await js.pull_subscribe_bind(consumer=self.durable, stream=self.stream)
        try:
            while True:
                honour_lost_cancellation()
                wanted = min(self.batch, room())
                if wanted <= 0:
                    await asyncio.sleep(self.retry_delay / 5)
                    continue
                try:
                    messages = await sub.fetch(wanted, timeout=5.0)
                except TimeoutError:
                    continue
                except nats.errors.ConnectionClosedError:
                    raise
                except nats.errors.Error as error:
                    honour_lost_cancellation()
                    log.warning("%s: fetching from %s: %r", self.name, self.durable, error)
                    await asyncio.sleep(self.retry_delay)
                    continue
                for msg in messages:
                    await self._take(js, msg, deliver)
        finally:
            try:
                await sub.unsubscribe()
            except (nats.errors.Error, TimeoutError) as error:
                log.debug("%s: unsubscribing: %r", self.name, error)

    async def _take(self, js: JetStreamContext, msg: Msg, deliver: Deliver) -> None:
        try:
            data = msgspec.json.decode(msg.data)
        except msgspec.DecodeError as error:
            await self._reject(js, msg, f"not JSON: {error}")
            return
        key = self.key_for(msg.subject, data)
        if key is None:
            await self._reject(js, msg, "the message concerns no object this worker knows")
            return
        meta = msg.metadata
        message = SourceMessage(
            source=self.name,
            token=f"{meta.stream}:{meta.sequence.stream}",
            subject=msg.subject,
            data=data,
            delivered=meta.num_delivered,
        )
        deliver(Delivery(key, message, msg))

    async def _reject(self, js: JetStreamContext, msg: Msg, reason: str) -> None:
        log.warning("%s: dead-lettering a message on %s: %s", self.name, msg.subject, reason)
        try:
            await dead_letter(js, msg, reason=reason, config=self.bus, rejected_by=self.durable)
            await msg.term()
        except (nats.errors.Error, TimeoutError) as error:
            log.warning("%s: dead-lettering failed (%r); it will come back", self.name, error)
