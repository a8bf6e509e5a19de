"""Feeding a worker from the bus: the state table once, then the event log, durably.

On start a worker needs every object of the kinds it cares about, and then every change. It
never lists Kubernetes; it reads the bus:

1. **The durable consumer first.** One durable pull consumer per worker on the event log,
   filtered to ``sandbus.events.<kind>.>`` of its kinds. Created when missing with
   ``DeliverPolicy.BY_START_TIME`` a little (``start_margin``) before now; when it already
   exists (a restart) it resumes from its ack floor, so nothing that happened while the worker
   was down is skipped.
2. **Then the state table.** A read to the end with ``DeliverPolicy.LAST_PER_SUBJECT`` over
   ``sandbus.state.<kind>.>`` (:func:`services.runtime.streams.push_to_end`) delivers the
   latest event of every object, which fills the cache (each decoded with its object left as
   JSON, :func:`events.codec.decode_observed`, and handed to ``load``). Because the durable
   existed before this read began, a change is either already in the state table when it is
   read or delivered by the durable afterwards; the margin covers the server's copying of the
   log into the state table (:mod:`services.runtime.bus`), which lags the log by moments.
   Changes delivered twice this way are harmless: the cache ignores a state older than the one
   it holds, and reconciles are idempotent.

   A durable that already existed (a restart, or a Lease won back) resumes where an earlier run
   left it, and the state table may not have been copied that far yet: after NATS itself
   restarted, the copying can be seconds behind. The changes in between were handed to the
   earlier run, so the durable will not deliver them again, and the state table does not hold
   them: a worker would never see a Sandbox created then until it changes again (a pool would
   make its members a second time). So the read of the state table is followed by one of the
   event log over exactly that gap, from the last change the state table held when the read
   began (the origin sequence the server stamps on every copy, ``Nats-Stream-Source``) to the
   last the durable had delivered.
3. **Then follow the durable** with the shared consumer of :mod:`services.runtime.consume`:
   each event is handed to the worker (which updates the cache and enqueues the keys it
   wakes) and only then acked. A message that is not a valid event, or sits on another
   object's subject, is dead-lettered with the reason and acked, so it cannot wedge the
   consumer (invariant 7 of docs/architecture.md); an event of a type this version does not know is
   skipped.

If the durable disappears (the bus was reset), the cycle starts again at step 1, state table
included, because changes may have been missed in between.

Each worker has one durable. Two replicas of one worker would split its events between them
and each would see half the world, so a worker runs as a single active replica (standbys wait
for a Lease, :mod:`services.runtime.election`), or each replica of a sharded worker
(:mod:`.sharding`) has a durable of its own (:func:`replica_durable_name`), which the server
removes once the replica has been gone for ``inactive_threshold``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from events.codec import EventDecodeError, ObservedState, UnknownEventType, decode_observed
from events.subjects import STATE_SUBJECTS, encode_token, event_filter, state_filter
from events.types import Event, ObjectAdded, ObjectDeleted, ObjectEvent, ObjectModified
from services.runtime.bus import BusConfig, dead_letter
from services.runtime.cancellation import stop_tasks, supervise
from services.runtime.consume import ConsumeStats, consume_events
from services.runtime.streams import push_to_end, read_to_end

__all__ = ["BusFeed", "replica_durable_name", "until_nats_answers"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def durable_name(worker: str) -> str:
    return f"{worker}-worker"


def replica_durable_name(worker: str, identity: str) -> str:
    return f"{durable_name(worker)}-{encode_token(identity)}"


class BusFeed:
    """Reads the state table, handing each object's latest state to ``load``, then follows the
    event log, handing each object event to ``deliver``. ``deliver`` runs synchronously before
    the message is acked."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        worker: str,
        kinds: Sequence[str],
        deliver: Callable[[ObjectEvent], None],
        load: Callable[[ObservedState], None],
        bus: BusConfig | None = None,
        start_margin: float = 10.0,
        batch: int = 256,
        ack_wait: float = 30.0,
        durable_check: float = 30.0,
        retry_delay: float = 1.0,
        wanted: Callable[[str, bytes], bool] | None = None,
        durable_suffix: str = "",
    ) -> None:
        self.js = js
        self.worker = worker
        self.kinds = tuple(kinds)
        self.deliver = deliver
        self.load = load
        self.bus = bus or BusConfig()
        self.start_margin = start_margin
        self.batch = batch
        self.ack_wait = ack_wait
        self.durable_suffix = durable_suffix
        """Tells the durable apart from the worker's other feeds' (``""``: its main one)."""
        self.durable = durable_name(worker) + durable_suffix
        self.inactive_threshold: float | None = None
        """Seconds without a fetch after which the server removes the durable (a replica's)."""
        self.loaded = asyncio.Event()
        """Set once the state table has been read (the cache holds the world)."""
        self.durable_check = durable_check
        self.retry_delay = retry_delay
        """Seconds between two attempts to set the feed up while NATS is away."""
        self.stats = ConsumeStats()
        self.wanted = wanted
        """Asked of each event before it is decoded: False, and it is acked unread."""

    @property
    def event_filters(self) -> list[str]:
        return [event_filter(kind) for kind in self.kinds]

    async def run(self, on_loaded: Callable[[], None] | None = None) -> None:
        """Load, then follow until cancelled; ``on_loaded`` runs after each state-table read."""
        while True:
            count = await until_nats_answers(
                f"{self.worker}: setting up the feed", self._set_up, self.retry_delay
            )
            log.info("%s: loaded %d objects from the state table", self.worker, count)
            self.loaded.set()
            if on_loaded is not None:
                on_loaded()
            try:
                await self._follow()
            except _DurableLost as lost:
                log.warning("%s: durable consumer lost (%s); reloading", self.worker, lost)

    async def _set_up(self) -> int:
        delivered = await self._ensure_durable()
        copied = await self._state_copied_through()
        count = await self.load_state()
        if delivered > copied:
            count += await self._catch_up(copied + 1, delivered)
        return count

    # -- step 1 -----------------------------------------------------------------------------

    async def _ensure_durable(self) -> int:
        """Make the durable when it is missing; the last event-log sequence it had delivered
        when it was there already (0 for a new one)."""
        stream = self.bus.event_log_stream
        wanted = sorted(self.event_filters)
        try:
            info = await self.js.consumer_info(stream, self.durable)
        except NotFoundError:
            info = None
        if info is not None:
            have = sorted(info.config.filter_subjects or [info.config.filter_subject or ""])
            if have == wanted:
                return int(info.delivered.stream_seq or 0) if info.delivered else 0
            log.info("%s: filters changed from %s to %s; recreating", self.durable, have, wanted)
            await self.js.delete_consumer(stream, self.durable)
        start = datetime.now(UTC) - timedelta(seconds=self.start_margin)
        await self.js.add_consumer(
            stream,
            ConsumerConfig(
                name=self.durable,
                durable_name=self.durable,
                description=f"sandbus {self.worker} worker: changes of {', '.join(self.kinds)}",
                filter_subjects=wanted,
                deliver_policy=DeliverPolicy.BY_START_TIME,
                opt_start_time=start,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=self.ack_wait,
                max_ack_pending=max(self.batch * 4, 1024),
                inactive_threshold=self.inactive_threshold,
            ),
        )
        return 0

    async def forget_durable(self) -> None:
        """Delete the durable, if there is one: a feed not needed now must not keep a backlog
        for when it is needed again (it starts from the state table then)."""
        with contextlib.suppress(NotFoundError):
            await self.js.delete_consumer(self.bus.event_log_stream, self.durable)

    # -- step 2 -----------------------------------------------------------------------------

    async def load_state(self) -> int:
        """Load the latest event of every object of our kinds; returns how many.

        One read per kind, all at once: nats-server serves a consumer of one filter subject far
        more cheaply than one of several (10,000 Sandboxes under the sandbox worker's four
        filters: about 0.5 s of the server's CPU, against 0.05 s under the Sandboxes' filter
        alone), and the reads' round trips overlap."""
        loaded = 0

        async def take(msg: Msg) -> None:
            nonlocal loaded
            if await self._take(msg):
                loaded += 1

        async def read(kind: str) -> None:
            await push_to_end(
                self.js,
                self.bus.state_stream,
                [state_filter(kind)],
                take,
                deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                name_prefix=f"{self.durable}-state",
            )

        await supervise((f"{self.durable}-state-{kind}", read(kind)) for kind in self.kinds)
        return loaded

    async def _state_copied_through(self) -> int:
        """The event-log sequence through which the state table holds every change: the origin
        of its latest copy, since the server copies the log in order (a lower bound: a
        tombstone removed since only makes it earlier). 0 for an empty state table."""
        try:
            last = await self.js.get_last_msg(self.bus.state_stream, STATE_SUBJECTS[0])
        except NotFoundError:
            return 0
        return origin_sequence(last.headers, self.bus.event_log_stream)

    async def _catch_up(self, first: int, last: int) -> int:
        """Load the changes of our kinds on the event log from ``first`` through ``last``: what
        a resumed durable handed to an earlier run and the state table did not hold yet."""
        count = 0
        async for msg in read_to_end(
            self.js,
            self.bus.event_log_stream,
            self.event_filters,
            start_seq=first,
            until_seq=last,
            name_prefix=f"{self.durable}-catch-up",
        ):
            if await self._take(msg):
                count += 1
        if count:
            log.info(
                "%s: %d changes the state table did not hold yet, read from the event log",
                self.worker,
                count,
            )
        return count

    # -- step 3 -----------------------------------------------------------------------------

    async def _follow(self) -> None:
        """Follow the durable through the shared consumer (:mod:`services.runtime.consume`:
        strict decoding, dead letters, retries), while checking that the durable still exists."""

        async def handle(event: Event, msg: Msg) -> None:
            del msg  # acked by consume_events once this returns
            if isinstance(event, ObjectAdded | ObjectModified | ObjectDeleted):
                self.deliver(event)

        consume = asyncio.create_task(
            consume_events(
                self.js,
                filter_subjects=self.event_filters,
                handle=handle,
                rejected_by=self.durable,
                durable=self.durable,
                bus=self.bus,
                batch=self.batch,
                stats=self.stats,
                wanted=self.wanted,
            ),
            name=f"{self.durable}-consume",
        )
        watch = asyncio.create_task(self._watch_durable(), name=f"{self.durable}-check")
        try:
            done, _ = await asyncio.wait({consume, watch}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # _DurableLost, or what the consumer died of
            raise RuntimeError(f"{self.durable}: the event-log consumer stopped")
        finally:
            await stop_tasks((watch, consume))

    async def _watch_durable(self) -> None:
        while True:
            await asyncio.sleep(self.durable_check)
            try:
                await self.js.consumer_info(self.bus.event_log_stream, self.durable)
            except NotFoundError as error:
                raise _DurableLost(str(error)) from None
            except nats.errors.Error as error:
                log.debug("%s: checking the durable: %r", self.durable, error)

    async def _take(self, msg: Msg) -> bool:
        """Decode and load one state-table message; garbage is dead-lettered (the state
        table is read once, without acks, so there is nothing to retry)."""
        try:
            state = decode_observed(msg.data)
        except UnknownEventType as error:
            log.info("%s: skipping %s on %s", self.worker, error.event_type, msg.subject)
            return False
        except EventDecodeError as error:
            log.warning("%s: dead-lettering a message on %s: %s", self.worker, msg.subject, error)
            try:
                await dead_letter(
                    self.js, msg, reason=str(error), config=self.bus, rejected_by=self.durable
                )
            except Exception:
                log.exception("%s: could not dead-letter a message on %s", self.worker, msg.subject)
            return False
        if state is None:
            return False  # a valid event, but no object's state
        self.load(state)
        return True


def origin_sequence(headers: Mapping[str, str] | None, stream: str) -> int:
    """The sequence in ``stream`` of the message a copy was made from, as the server stamps it
    on every message it sources (``Nats-Stream-Source: <stream> <sequence> ...``); 0 when the
    copy is not from ``stream``."""
    fields = (headers or {}).get("Nats-Stream-Source", "").split()
    if len(fields) < 2 or fields[0] != stream or not fields[1].isdecimal():
        return 0
    return int(fields[1])


class _DurableLost(Exception):
    pass


async def until_nats_answers(what: str, attempt: Callable[[], Awaitable[T]], delay: float) -> T:
    """``attempt()``, made again every ``delay`` seconds while NATS does not answer (or its
    JetStream is not back yet): the connection reconnects on its own, so an outage during a
    worker's start or reload is waited out, as the follow step rides one out, instead of
    ending the worker."""
    while True:
        try:
            return await attempt()
        except nats.errors.Error as error:
            log.warning("%s: %r; again in %g s", what, error, delay)
            await asyncio.sleep(delay)
