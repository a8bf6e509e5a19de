"""The executors of the warm-queue actions (the action kinds are agent-sandbox rules, in
``services/domain/agentsandbox/warmqueue.py``).

``Enqueue``
    Put one adoptable sandbox's entry (a ``WarmQueued`` event) on its queue subject. The warm
    stream holds at most one message per subject and refuses a second one (JetStream error
    10077), so an entry already queued is not a failure: the action notes "already queued".
``Purge``
    Remove what the queue holds under a subject: one entry (a ghost, a sandbox adopted or gone)
    or, with a wildcard filter, a whole queue (its template or last pool was deleted).
``Take``
    :class:`WarmTaker`: one entry off a queue. Each node's part of a queue has one durable pull
    consumer, which every claim-worker replica shares, so an entry goes to exactly one of them.
    The taker pulls from the nodes in the order its ``spread`` gives (the node with the most
    sandboxes left first: upstream's node-spread, computed from the worker's cache at the
    moment of the take, as upstream's queue picks at the moment of its pop), then from the
    part without a node, then from any other node the stream says holds an entry (the cache
    may not show a member queued a moment ago). Each pull asks for one message with
    ``no_wait``: an empty part answers at once (status 404), so a claim that finds its pool
    dry goes on to a cold start without waiting. A taken entry is held for the claim until its
    plan acks it after the adoption's writes, or releases it; a replica that dies holding it
    leaves it to come back after the consumer's ack wait.
``DropQueue``
    Delete a queue's durable consumers: its pool is gone. Its entries go with the members (the
    pool worker purges each member's entry as the garbage collector deletes it), so the claim
    worker needs no right to purge the warm stream.

Register :data:`WARM_EXECUTORS` (the producer side) or :meth:`WarmTaker.executors` (both
sides) in a worker's definition.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from events.codec import nats_subject
from services.domain.agentsandbox.warmqueue import (
    WARM_SOURCE,
    DropQueue,
    Enqueue,
    Purge,
    Take,
    WarmQueue,
    consumer_name,
    consumer_prefix,
    nodes_by_depth,
    queue_filter,
)
from services.runtime.bus import BusConfig, enqueue_warm
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.executing import ActionFailed, Executed, ExecutionContext, Executor
from services.runtime.reconcile.sources import Delivery, SourceMessage

__all__ = ["WARM_EXECUTORS", "WarmTaker"]

log = logging.getLogger(__name__)

_ONE_NOW = json.dumps({"batch": 1, "no_wait": True}).encode()


async def _enqueue(action: Enqueue, context: ExecutionContext) -> Executed:
    if context.js is None:
        raise ActionFailed("no bus to enqueue on")
    if await enqueue_warm(context.js, action.entry, context.bus):
        return Executed(note=f"queued on {nats_subject(action.entry)}")
    return Executed(note="already queued")


async def _purge(action: Purge, context: ExecutionContext) -> Executed:
    if context.js is None:
        raise ActionFailed("no bus to purge")
    await context.js.purge_stream(context.bus.warm_stream, subject=action.subject)
    return Executed(note=f"purged {action.subject}")


WARM_EXECUTORS: Mapping[type, Executor] = {Enqueue: _enqueue, Purge: _purge}
"""The producer side: register these in a worker's definition to use ``Enqueue`` and ``Purge``."""


class WarmTaker:
    """Takes entries off warm queues; one per worker process (it remembers which queues'
    consumers it has made sure of)."""

    def __init__(
        self,
        *,
        ack_wait: float = 30.0,
        timeout: float = 5.0,
        spread: Callable[[WarmQueue, ObjectCache], Sequence[str]] | None = None,
        spread_ttl: float = 0.25,
    ) -> None:
        self.ack_wait = ack_wait
        """Seconds an entry taken by a replica that died stays away before it comes back."""
        self.timeout = timeout
        self.spread = spread
        """The nodes of a queue to take from, in order; without it, any node, most entries
        first (the stream is asked)."""
        self.spread_ttl = spread_ttl
        """Seconds an order is reused for the next takes of its queue. Counting a pool's
        members costs a pass over them, and a burst takes from one queue hundreds of times a
        second; an order a moment old still spreads, and the queue itself decides what is
        there to take."""
        self._orders: dict[WarmQueue, tuple[float, Sequence[str]]] = {}
        self._ready: set[str] = set()
        self._pulls: dict[str, _ConsumerPulls] = {}
        self.taken = 0
        self.empty = 0

    def executors(self) -> Mapping[type, Executor]:
        return {**WARM_EXECUTORS, Take: self.take, DropQueue: self.drop}

    def consumer_config(self, queue: WarmQueue, node: str) -> ConsumerConfig:
        name = consumer_name(queue, node)
        return ConsumerConfig(
            name=name,
            durable_name=name,
            filter_subject=queue_filter(queue, node),
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=-1,
        )

    async def take(self, action: Take, context: ExecutionContext) -> Executed:
        if context.js is None or context.hold is None:
            raise ActionFailed("no bus to take from")
        preferred = self._order(action.queue, context.cache)
        msg = await self._take_spread(context.js, context.bus, action.queue, preferred)
        if msg is None:
            self.empty += 1
            return Executed(note="queue empty")
        try:
            data = msgspec.json.decode(msg.data)
        except msgspec.DecodeError as error:
            # Not an entry anyone can use: gone from the queue for good, with the reason said.
            await msg.term()
            raise ActionFailed(f"a queue entry on {msg.subject} is not JSON: {error}") from error
        meta = msg.metadata
        token = f"{meta.stream}:{meta.sequence.stream}"
        message = SourceMessage(
            source=WARM_SOURCE,
            token=token,
            subject=msg.subject,
            data=data,
            delivered=meta.num_delivered,
        )
        context.hold(Delivery(action.target, message, msg))
        self.taken += 1
        left = meta.num_pending
        return Executed(
            note=f"took {msg.subject} ({token}; node depth {left + 1}→{left})", stale=True
        )

    def _order(self, queue: WarmQueue, cache: ObjectCache) -> Sequence[str]:
        if self.spread is None:
            return ()
        now = time.monotonic()
        known = self._orders.get(queue)
        if known is not None and now - known[0] < self.spread_ttl:
            return known[1]
        order = self.spread(queue, cache)
        self._orders[queue] = (now, order)
        return order

    async def _take_spread(
        self, js: JetStreamContext, bus: BusConfig, queue: WarmQueue, preferred: Sequence[str]
    ) -> Msg | None:
        tried: set[str] = set()
        for node in (*preferred, ""):
            if node not in tried:
                tried.add(node)
                msg = await self._pull(js, bus, queue, node)
                if msg is not None:
                    return msg
                if node:
                    self._drained(queue, node)
        for node in await self._nodes_holding(js, bus, queue):
            if node not in tried:
                tried.add(node)
                msg = await self._pull(js, bus, queue, node)
                if msg is not None:
                    return msg
        return None

    def _drained(self, queue: WarmQueue, node: str) -> None:
        """``node``'s part of ``queue`` answered empty: the next takes that reuse the queue's
        order skip it. In a burst the order's first node drains first, and without this every
        later take of the order's lifetime would ask each drained node again (measured: 2.8
        pulls per take in a burst of 200 on six nodes, against one)."""
        known = self._orders.get(queue)
        if known is not None and node in known[1]:
            self._orders[queue] = (known[0], tuple(n for n in known[1] if n != node))

    async def _nodes_holding(
        self, js: JetStreamContext, bus: BusConfig, queue: WarmQueue
    ) -> list[str]:
        """The nodes whose part of ``queue`` holds entries (taken ones included), most first."""
        info = await js.stream_info(bus.warm_stream, subjects_filter=queue_filter(queue))
        return nodes_by_depth(info.state.subjects or {})

    async def _pull(
        self, js: JetStreamContext, bus: BusConfig, queue: WarmQueue, node: str
    ) -> Msg | None:
        config = self.consumer_config(queue, node)
        name = str(config.durable_name)
        for attempt in (1, 2):
            if name not in self._ready:
                await js.add_consumer(bus.warm_stream, config)
                self._ready.add(name)
            try:
                msg = await self._request(js, bus, name)
            except nats.errors.NoRespondersError:
                if attempt == 2:
                    raise
                # The consumer is gone (its pool was dropped, or someone deleted it): again.
                self._ready.discard(name)
                continue
            status = (msg.headers or {}).get("Status")
            if not status:
                return msg
            if status in ("404", "408"):
                return None
            raise ActionFailed(
                f"queue {name} answered {status} {(msg.headers or {}).get('Description', '')}"
            )
        return None

    async def _request(self, js: JetStreamContext, bus: BusConfig, consumer: str) -> Msg:
        pulls = self._pulls.get(consumer)
        if pulls is None:
            pulls = self._pulls[consumer] = _ConsumerPulls(
                js._nc, f"{js._prefix}.CONSUMER.MSG.NEXT.{bus.warm_stream}.{consumer}"
            )
        try:
            msg = await pulls.next(self.timeout)
        except TimeoutError as error:
            raise ActionFailed(f"no answer from queue {consumer} within {self.timeout}s") from error
        if (msg.headers or {}).get("Status") == "503":
            raise nats.errors.NoRespondersError
        return msg

    async def drop(self, action: DropQueue, context: ExecutionContext) -> Executed:
        if context.js is None:
            raise ActionFailed("no bus to drop a queue from")
        prefix = consumer_prefix(action.queue)
        names = await _consumer_names(context.js, context.bus.warm_stream)
        dropped = [name for name in names if name.startswith(prefix)]
        for name in dropped:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await context.js.delete_consumer(context.bus.warm_stream, name)
            self._ready.discard(name)
            pulls = self._pulls.pop(name, None)
            if pulls is not None:
                await pulls.close(f"queue consumer {name} was deleted")
        return Executed(note=f"deleted {len(dropped)} consumers {prefix}*")


class _ConsumerPulls:
    """The pulls of one queue consumer, over one subscription of its own, kept.

    A pulled message arrives with its own subject, not its request's reply inbox, so the
    connection's request multiplexer cannot route it to its request. But the server answers
    one consumer's requests in the order they came, each with one message or one status (every
    request asks for one message, ``no_wait``), so the answers go to the takes waiting in the
    order their requests went out (:meth:`next` publishes before it awaits). A take that gave
    up waiting is passed over; should its answer still come, the next take gets it, and the
    last answer, finding nobody, is an entry that comes back after the consumer's ack wait, as
    one whose taker died does: any entry of a consumer serves any take of it. A subscription
    for each pull instead cost the claim worker about a quarter of a millisecond a take, and
    the server an interest added and removed."""

    def __init__(self, nc: Client, next_subject: str) -> None:
        self._nc = nc
        self._next = next_subject
        self._inbox = nc.new_inbox()
        self._subscribing: asyncio.Future[Subscription] | None = None
        """One subscription, whichever take comes first: two would hand out each answer twice."""
        self._waiting: collections.deque[asyncio.Future[Msg]] = collections.deque()

    async def next(self, within: float) -> Msg:
        """The answer to one pull of one message, ``no_wait``; TimeoutError without one."""
        if self._subscribing is None:
            self._subscribing = asyncio.ensure_future(
                self._nc.subscribe(self._inbox, cb=self._answer)
            )
        try:
            await asyncio.shield(self._subscribing)
        except (nats.errors.Error, OSError):
            self._subscribing = None  # the next take subscribes again
            raise
        answer: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self._waiting.append(answer)
        await self._nc.publish(self._next, _ONE_NOW, reply=self._inbox)
        async with asyncio.timeout(within):
            return await answer

    async def _answer(self, msg: Msg) -> None:
        while self._waiting:
            answer = self._waiting.popleft()
            if not answer.done():
                answer.set_result(msg)
                return

    async def close(self, why: str) -> None:
        """No more pulls: the takes still waiting fail with ``why``."""
        for answer in self._waiting:
            if not answer.done():
                answer.set_exception(ActionFailed(why))
        self._waiting.clear()
        subscribing, self._subscribing = self._subscribing, None
        if subscribing is not None:
            with contextlib.suppress(nats.errors.Error, OSError):
                await (await subscribing).unsubscribe()


async def _consumer_names(js: JetStreamContext, stream: str) -> list[str]:
    """Every consumer name of ``stream`` (the names API pages by 1,024; nats-py has no call)."""
    names: list[str] = []
    while True:
        reply = await js._api_request(
            f"{js._prefix}.CONSUMER.NAMES.{stream}",
            json.dumps({"offset": len(names)}).encode(),
            timeout=js._timeout,
        )
        page = reply.get("consumers") or []
        names.extend(page)
        if not page or len(names) >= int(reply.get("total") or 0):
            return names
