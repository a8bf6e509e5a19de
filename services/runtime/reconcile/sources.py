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

While a message is held (:class:`HeldMessages`), the worker keeps it alive (``in_progress``)
so that a long reconcile or a backoff does not let JetStream hand it to another replica; if
this replica dies, the ack wait runs out and another one gets it. A plan's ``Ack`` and
``Release`` are carried out here, and a clean stop gives every held message back at once.

:class:`PullSource` is the JetStream implementation: one durable pull consumer, shared by every
replica that names it (each message goes to one of them: active-active). A message that is not
JSON, or names no key, is dead-lettered with the reason and terminated, never left to wedge
the consumer (invariant 7 of docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from events.envelope import ObjectKey
from events.types import DecisionMessage
from services.runtime.bus import BusConfig, dead_letter
from services.runtime.cancellation import honour_lost_cancellation
from services.runtime.reconcile.actions import Ack, Release
from services.runtime.reconcile.executing import (
    ActionFailed,
    Executed,
    ExecutionContext,
    Executor,
)

__all__ = ["Delivery", "HeldMessages", "PullSource", "Source", "SourceMessage"]

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
class _Held:
    message: SourceMessage
    handle: Handle


Deliver = Callable[[Delivery], None]
_Wake = Callable[[ObjectKey, str], None]


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


class HeldMessages:
    """The messages of further sources a worker holds, by key, until a plan acks or releases
    them. ``wake`` is told of each delivery (the key, and the message's token as its trigger)."""

    def __init__(
        self, worker: str, *, max_held: int, keepalive: float, ack_timeout: float, wake: _Wake
    ) -> None:
        self._worker = worker
        self._max_held = max_held
        self._keepalive = keepalive
        self._ack_timeout = ack_timeout
        self._wake = wake
        self._held: dict[ObjectKey, dict[str, _Held]] = {}

    def take(self, delivery: Delivery) -> None:
        """One message of a further source: held for its key, which wakes."""
        held = self._held.setdefault(delivery.key, {})
        token = delivery.message.token
        if token in held:
            held[token].handle = delivery.handle  # redelivered while held: ack the newest
            held[token].message = delivery.message
        else:
            held[token] = _Held(delivery.message, delivery.handle)
        self._wake(delivery.key, token)

    def messages(self, key: ObjectKey) -> tuple[SourceMessage, ...]:
        return tuple(held.message for held in self._held.get(key, {}).values())

    def room(self) -> int:
        """How many more messages may be held now (a source fetches no more)."""
        return self._max_held - sum(len(held) for held in self._held.values())

    def executors(self) -> Mapping[type, Executor]:
        return {Ack: self._ack, Release: self._release}

    async def keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self._keepalive)
            for held in self._all():
                try:
                    await held.handle.in_progress()
                except Exception as error:
                    log.debug("%s: in_progress of %s: %r", self._worker, held.message.token, error)

    async def hand_back(self) -> None:
        """A clean stop gives held messages back at once instead of after their ack wait."""
        for held in self._all():
            with contextlib.suppress(Exception):
                await held.handle.nak()
        self._held.clear()

    async def let_go(self, key: ObjectKey) -> None:
        """A key this replica no longer owns: what it holds for it goes back to its queue."""
        for held in self._held.pop(key, {}).values():
            with contextlib.suppress(Exception):
                await held.handle.nak()

    def _all(self) -> list[_Held]:
        return [held for by_token in self._held.values() for held in by_token.values()]

    async def _ack(self, action: Ack, context: ExecutionContext) -> Executed:
        del context
        held = self._held.get(action.target, {}).get(action.token)
        if held is None:
            raise ActionFailed(f"message {action.token} of {action.source} is not held here")
        await held.handle.ack_sync(timeout=self._ack_timeout)
        self._drop(action.target, action.token)
        return Executed()

    async def _release(self, action: Release, context: ExecutionContext) -> Executed:
        del context
        held = self._drop(action.target, action.token)
        if held is None:
            raise ActionFailed(f"message {action.token} of {action.source} is not held here")
        await held.handle.nak()
        return Executed()

    def _drop(self, key: ObjectKey, token: str) -> _Held | None:
        by_token = self._held.get(key, {})
        held = by_token.pop(token, None)
        if not by_token:
            self._held.pop(key, None)
        return held
