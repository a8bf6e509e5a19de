"""The worker shell every reconciler runs in: bus → cache → queue → observe → plan → execute →
decision.

A worker (sandbox, pool, claim, snapshot) is described by a :class:`WorkerDefinition`: its
name, the kinds whose changes it follows, which keys a change of an object wakes, one
:class:`Reconciler` per kind it reconciles, the executors of its own action kinds
(:mod:`.executing`), and further input sources (:mod:`.sources`). A reconciler is two
functions and no I/O:

``observe(key, observed) -> inputs``
    Everything the planner may look at, read from :class:`Observed` into one
    msgspec-encodable value: the cache, the key's memo and expectations, the messages of
    further sources held for the key, and the failure of the key's previous pass (a write the
    API server refused), so a planner can report it, as controller-runtime reconcilers report
    the error they return.
``plan(inputs, now) -> Plan``
    Pure: the same inputs and time give the same plan.

A reconciler may also set ``memo_type`` (the type its memo converts back to; default: JSON
builtins) and ``expects = True`` (the worker then keeps expectations of its creates and
deletes, :mod:`.expectations`).

For each key taken from the queue, :meth:`Worker.reconcile` observes, plans, writes the key's
memory ahead of the actions when it changed (:mod:`.memory`), executes the plan, schedules what
comes next, and records a ``DecisionMade`` event on the bus: the events that woke the key, the
inputs by reference (every object observe read, by resourceVersion, plus memo, expectations,
messages and last error) and their digest, the time (the decision's ``time`` attribute *is*
the ``now`` the planner was given, so a re-run can make the same call), each action with its
outcome, the digest of what the plan decided, the planner's reason, the error, and when the
key comes back.

What comes next, in order of precedence:

1. an action failed → retry with per-key exponential backoff;
2. the API showed the plan was made on stale state (AlreadyExists, NotFound) → again now;
3. the planner reported an error it cannot fix → backoff;
4. otherwise the planner's ``requeue_after`` (0 = now; None = wait for the next event), and the
   key's backoff is reset.

With a tracer (:mod:`.tracing`), a reconciler that asks for it gets a span around observe →
plan → execute → record, child spans for the steps of its plan, and its decision event
carries the span's ``traceparent``. The worker remembers, per key, the trace context of the
last event that woke it, which the span hangs under (:func:`~.tracing.reconcile_parent`);
without a tracer it remembers nothing.

Its metrics (:mod:`services.runtime.metrics`): each pass by kind and result (a pass that raised
counts as an error too) and its duration, the events it handled, dead-lettered, skipped and
retried, its consumer's lag, the decisions it published, and the gauges its definition reads by
I/O (:class:`Gauge`), sampled at each scrape while the worker runs (so, for an active-passive
worker, only on the replica that leads).

A planner that writes on every pass would spin on rule 4 with ``requeue_after=0``; after
``max_write_passes`` consecutive writing passes of one key the worker falls back to backoff and
says so in the decision. A planner that raises is a bug, not a reason to stop serving the other
keys: the exception is recorded as a failed decision and the key backs off.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

import msgspec
from nats.js import JetStreamContext
from opentelemetry.trace import Status, StatusCode, Tracer

from events.codec import ObservedState
from events.envelope import ObjectRef
from events.ids import inputs_digest
from events.types import (
    Decision,
    DecisionAction,
    DecisionInputs,
    ObjectDeleted,
    ObjectEvent,
    ObjectModified,
    ObservedVersion,
    Outcome,
    decision_event,
)
from services.runtime.bus import BusConfig, publish_event
from services.runtime.cache import Change, Json, ObjectCache, ObjectKey, key_of, metadata_of
from services.runtime.cancellation import supervise
from services.runtime.kube import KubeApi
from services.runtime.metrics import RECONCILE_SECONDS, RECONCILES, Metrics, MetricSpec
from services.runtime.reconcile.actions import (
    Ack,
    Create,
    Delete,
    Plan,
    Release,
    flattened,
    plan_digest,
)
from services.runtime.reconcile.executing import (
    ALREADY_GONE,
    RUNTIME_EXECUTORS,
    ActionFailed,
    Executed,
    Execution,
    ExecutionContext,
    Executor,
    execute,
)
from services.runtime.reconcile.expectations import (
    DEFAULT_TTL,
    Expectations,
    answered,
    expect,
    settle,
)
from services.runtime.reconcile.feeding import BusFeed, until_nats_answers
from services.runtime.reconcile.memory import KeyRecord, MemoStore
from services.runtime.reconcile.queueing import QueueShutDown, WorkQueue
from services.runtime.reconcile.sources import Delivery, Held, Source, SourceMessage
from services.runtime.reconcile.tracing import trace_headers, traced_reconcile

__all__ = [
    "Gauge",
    "Observed",
    "Reconciler",
    "Wakes",
    "Worker",
    "WorkerDefinition",
    "WorkerSettings",
    "decision_inputs",
]

log = logging.getLogger(__name__)

_MAX_RECORDED_ERROR: Final = 4000
REST_AFTER: Final = 1.0
"""Seconds of an idle queue after which the cache lets go of what it keeps unpacked, and packs
what it keeps loose."""
PACK_SLICE: Final = 500
"""Objects packed at a time while resting: about 10 ms of the loop."""
ECHO_COALESCE: Final = 0.05
"""Seconds at most a coalesced key waits when woken by the echo of its own write: a pool that
creates a batch waits for the batch to show on the bus (its expectations), and the rest of the
batch follows within milliseconds, so a longer window would only slow a fill down, step by
step of its slow start."""
COALESCE_PER_PLANNING_SECOND: Final = 4.0
"""A coalesced key waits at least this many times its last pass's planning (observe, digest,
plan): a pool of 1,000 members plans for tens of milliseconds, and woken by each member's
change it would otherwise plan without pause; this way it takes at most a fifth of the worker."""


@dataclass(frozen=True)
class Observed:
    """What a reconciler's ``observe`` reads its inputs from."""

    cache: ObjectCache
    last_error: str | None = None
    """The failure of this key's previous pass."""
    memo: Any = None
    """What the previous plan of this key asked to keep (converted to ``memo_type``)."""
    expectations: Expectations | None = None
    """This key's creates and deletes that the bus has not shown yet."""
    messages: tuple[SourceMessage, ...] = ()
    """Messages of further sources held for this key, oldest first."""


class Reconciler(Protocol):
    """The reconcile of one kind: an observation and a pure planner."""

    @property
    def kind(self) -> str: ...

    def observe(self, key: ObjectKey, observed: Observed) -> Any: ...

    def plan(self, inputs: Any, now: datetime) -> Plan: ...


Wakes = Callable[[str, Json, ObjectCache], Iterable[ObjectKey]]
"""``(kind, object, cache) -> keys``: the keys a change of ``object`` wakes."""


@dataclass(frozen=True)
class Gauge:
    """A gauge a worker reads by I/O at each scrape (a stream's info): a sample per label
    values, from the bus and the worker's cache."""

    name: str
    help: str
    labels: tuple[str, ...]
    read: Callable[
        [JetStreamContext, BusConfig, ObjectCache], Awaitable[Mapping[tuple[str, ...], float]]
    ]


@dataclass(frozen=True)
class WorkerDefinition:
    name: str
    """The worker's name: the ``worker`` of its decisions and the name of its durable."""
    reconcilers: tuple[Reconciler, ...]
    watched_kinds: tuple[str, ...]
    wakes: Wakes
    label_indexes: tuple[tuple[str, str], ...] = ()
    executors: Mapping[type, Executor] = field(default_factory=dict)
    """Executors of the worker's own action kinds, by action type."""
    sources: tuple[Source, ...] = ()
    """Further inputs: each message is joined to a key and acked by that key's plan."""
    coalesce: Mapping[str, float] = field(default_factory=dict)
    """Kind → seconds: a key of that kind woken by an event waits up to that long, so that the
    events of a burst (a pool's members) are served by one pass instead of one each; longer
    when its passes plan long (:data:`COALESCE_PER_PLANNING_SECOND`), shorter when the event
    echoes the key's own write (:data:`ECHO_COALESCE`)."""
    metrics: tuple[MetricSpec, ...] = ()
    """The metrics its planners record (``Record`` actions), besides the runtime's own."""
    follows: Mapping[str, Callable[[Json], bool]] = field(default_factory=dict)
    """Kind → the objects of that kind the worker follows, when not all of them: the others
    are neither cached nor wake anything (an object that stops matching leaves the cache)."""
    patience: Mapping[str, Callable[[Json, Json], float]] = field(default_factory=dict)
    """Kind → for a change of an object of that kind (before, after), the seconds it may wait
    for a pass already scheduled of a key it wakes: within them it joins that pass instead of
    waking one of its own (0: it wakes the key as usual). A starting Pod's progress, which only
    a held status would report, waits for the pass that ends its Sandbox's status window."""
    gauges: tuple[Gauge, ...] = ()
    """Gauges read by I/O at each scrape while the worker runs."""


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int = 16
    """Keys reconciled at the same time (each key by one task at a time)."""
    base_delay: float = 0.005
    max_delay: float = 300.0
    written_ttl: float = 30.0
    """How long a response to our write outranks the bus (see :mod:`services.runtime.cache`)."""
    start_margin: float = 10.0
    fetch_batch: int = 256
    max_write_passes: int = 8
    decision_timeout: float = 5.0
    expectations_ttl: float = DEFAULT_TTL.total_seconds()
    max_held: int = 512
    """Messages of further sources held at once (a source fetches no more)."""
    keepalive: float = 5.0
    """Seconds between the ``in_progress`` signals of held messages (well under their ack
    wait)."""


@dataclass
class _KeyMemory:
    last_error: str | None = None
    write_passes: int = 0


@dataclass
class Worker:
    """Runs one :class:`WorkerDefinition` against a bus and an API server."""

    definition: WorkerDefinition
    js: JetStreamContext
    api: KubeApi
    bus: BusConfig = field(default_factory=BusConfig)
    settings: WorkerSettings = field(default_factory=WorkerSettings)
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    tracer: Tracer | None = None
    """None: no tracing (see :mod:`.tracing`)."""
    may_act: Callable[[], bool] = lambda: True
    """Asked before every action: False once this replica has lost its Lease."""
    owns: Callable[[ObjectKey], bool] = lambda key: True
    """Asked before every reconcile: False for a key another replica reconciles
    (:mod:`.sharding`)."""
    metrics: Metrics = field(default_factory=Metrics)
    """Where its metrics are recorded (the service's ``/metrics`` serves them)."""

    def __post_init__(self) -> None:
        self.metrics.declare(self.definition.metrics)
        self.cache = ObjectCache(
            label_indexes=self.definition.label_indexes, written_ttl=self.settings.written_ttl
        )
        self.queue: WorkQueue[ObjectKey] = WorkQueue(
            base_delay=self.settings.base_delay, max_delay=self.settings.max_delay
        )
        self._reconcilers = {r.kind: r for r in self.definition.reconcilers}
        self._memory: dict[ObjectKey, _KeyMemory] = {}
        self._records: dict[ObjectKey, KeyRecord] = {}
        self._held: dict[ObjectKey, dict[str, Held]] = {}
        self._woken_by: dict[ObjectKey, dict[str, str]] = {}
        """The W3C headers of the last event that woke each key (only with a tracer)."""
        self._planning: dict[ObjectKey, float] = {}
        """Seconds the last pass of each coalesced key spent planning."""
        self._idle_since = 0.0
        self._rest_timer: asyncio.TimerHandle | None = None
        self._executors: dict[type, Executor] = {
            **RUNTIME_EXECUTORS,
            Ack: self._ack,
            Release: self._release,
            **self.definition.executors,
        }
        self.memos = MemoStore(self.js, worker=self.definition.name, bus=self.bus)
        self.feed = BusFeed(
            self.js,
            worker=self.definition.name,
            kinds=self.definition.watched_kinds,
            deliver=self.take_event,
            load=self.take_state,
            bus=self.bus,
            start_margin=self.settings.start_margin,
            batch=self.settings.fetch_batch,
        )
        self.decisions_published = 0
        stats = self.feed.stats
        labels = {"worker": self.definition.name}
        self.metrics.read_from(
            "sandbus_events",
            "Events a worker handled, dead-lettered, skipped or retried from the event log, and "
            "the decision events it published to it.",
            lambda: {
                "handled": stats.handled,
                "dead_lettered": stats.dead_lettered,
                "skipped": stats.skipped,
                "retried": stats.retried,
                "published": self.decisions_published,
            },
            labels=labels,
        )
        self.metrics.read_from(
            "sandbus_events",
            "Events of the event log not delivered to a worker yet: its consumer's lag.",
            lambda: {"pending": stats.pending},
            labels=labels,
            kind="gauge",
        )

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Load the memory and the state table, then reconcile and follow the bus (and the
        further sources) until cancelled or one of them fails."""
        self._records = await until_nats_answers(
            f"{self.definition.name}: loading the memos", self.memos.load, self.feed.retry_delay
        )
        children: list[tuple[str, Any]] = [
            (f"{self.definition.name}-{i}", self._work()) for i in range(self.settings.concurrency)
        ]
        children.append((f"{self.definition.name}-feed", self.feed.run(self._enqueue_everything)))
        for source in self.definition.sources:
            children.append((f"{self.definition.name}-{source.name}", self._run_source(source)))
        if self.definition.sources:
            children.append((f"{self.definition.name}-keepalive", self._keep_alive()))
        samplers = [self._sample(gauge) for gauge in self.definition.gauges]
        try:
            await supervise(children)
        finally:
            for gauge, sampler in zip(self.definition.gauges, samplers, strict=True):
                self.metrics.stop_sampling(gauge.name, sampler)
            self.queue.shutdown()
            if self._rest_timer is not None:
                self._rest_timer.cancel()
            await self._hand_back()

    def _sample(self, gauge: Gauge) -> Callable[[], Awaitable[Mapping[tuple[str, ...], float]]]:
        def sample() -> Awaitable[Mapping[tuple[str, ...], float]]:
            return gauge.read(self.js, self.bus, self.cache)

        self.metrics.sample_from(gauge.name, gauge.help, gauge.labels, sample)
        return sample

    async def _run_source(self, source: Source) -> None:
        await self.feed.loaded.wait()  # a message is planned on a loaded cache, never an empty one
        await source.run(self.js, self.take_delivery, self._room)
        raise RuntimeError(f"input source {source.name} stopped")

    def _enqueue_everything(self) -> None:
        # After a (re)load every object of a reconciled kind gets one pass, as an informer's
        # initial list does: changes made while the worker was away are acted on now.
        # In the background lane: a change that arrives meanwhile is served first.
        for kind in self._reconcilers:
            for key in self.cache.keys(kind):
                self.queue.add(key, background=True)
        for key in self._records:
            if key.kind in self._reconcilers:
                self.queue.add(key, background=True)
        if self.queue.idle():
            self._rest_soon()  # nothing to reconcile: the objects loaded are packed all the same

    def take_event(self, event: ObjectEvent) -> None:
        """One change from the bus: into the cache, then wake the keys it concerns."""
        change: Change = (
            "deleted"
            if isinstance(event, ObjectDeleted)
            else "modified"
            if isinstance(event, ObjectModified)
            else "added"
        )
        obj = event.data.object
        follows = self.definition.follows.get(event.kind)
        if follows is not None and change != "deleted" and not follows(obj):
            if self.cache.observed(key_of(obj, event.kind)) is None:
                return
            change = "deleted"  # it left what this worker follows
        writer = self.cache.writer_of_echo(change, obj, kind=event.kind)
        before = self.cache.observed(key_of(obj, event.kind))
        self.cache.observe(change, obj, kind=event.kind)
        if not self.feed.loaded.is_set():
            return  # the first load wakes every key once it is complete, never a partial view
        # The keys the object concerned before the change wake too, as controller-runtime's
        # owner handlers wake the old and the new owner: a member a claim adopted no longer
        # names its pool, and the pool must see it go.
        woken = dict.fromkeys(self.definition.wakes(event.kind, obj, self.cache))
        if before is not None and before is not obj:
            woken.update(dict.fromkeys(self.definition.wakes(event.kind, before, self.cache)))
        headers = _trace_headers_of(event) if self.tracer is not None else None
        patience = self.definition.patience.get(event.kind)
        wait = 0.0
        if patience is not None and before is not None and change == "modified":
            wait = patience(before, obj)
        for key in woken:
            if key.kind not in self._reconcilers or self._own_echo(key, writer):
                continue
            if wait and self.queue.join_scheduled(key, wait, trigger=event.id):
                continue
            if headers:
                self._woken_by[key] = headers
            window = self.definition.coalesce.get(key.kind)
            if window:
                if writer == key:
                    window = min(window, ECHO_COALESCE)
                planning = self._planning.get(key, 0.0)
                window = max(window, COALESCE_PER_PLANNING_SECOND * planning)
                self.queue.add_soon(key, window, trigger=event.id)
            else:
                self.queue.add(key, trigger=event.id)

    def take_state(self, state: ObservedState) -> None:
        """One object of a read of the state table: into the cache, kept as the JSON it came
        in. Nothing wakes: once the read is complete every key is reconciled
        (:meth:`_enqueue_everything`), never from a partial view."""
        follows = self.definition.follows.get(state.key.kind)
        if follows is not None and state.change != "deleted" and not follows(state.object()):
            if self.cache.observed(state.key) is not None:
                self.cache.observe_state(state, "deleted")  # it left what this worker follows
            return
        self.cache.observe_state(state)

    def _own_echo(self, key: ObjectKey, writer: ObjectKey | None) -> bool:
        # The echo of our own write is nothing new for the key that wrote it: it planned with
        # the write's answer in the cache. Unless it keeps expectations: for those the bus
        # showing the write is the news (it settles them). Every other key still wakes.
        if key != writer:
            return False
        return not getattr(self._reconcilers[key.kind], "expects", False)

    def take_delivery(self, delivery: Delivery) -> None:
        """One message of a further source: held for its key until a plan acks it."""
        held = self._held.setdefault(delivery.key, {})
        token = delivery.message.token
        if token in held:
            held[token].handle = delivery.handle  # redelivered while held: ack the newest
            held[token].message = delivery.message
        else:
            held[token] = Held(delivery.message, delivery.handle)
        if delivery.key.kind in self._reconcilers:
            self.queue.add(delivery.key, trigger=token)

    def _room(self) -> int:
        return self.settings.max_held - sum(len(held) for held in self._held.values())

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self.settings.keepalive)
            for held in [h for by_token in self._held.values() for h in by_token.values()]:
                try:
                    await held.handle.in_progress()
                except Exception as error:
                    log.debug(
                        "%s: in_progress of %s: %r", self.definition.name, held.message.token, error
                    )

    async def _hand_back(self) -> None:
        # A clean stop gives held messages back at once instead of after their ack wait.
        for held in [h for by_token in self._held.values() for h in by_token.values()]:
            with contextlib.suppress(Exception):
                await held.handle.nak()
        self._held.clear()

    async def _ack(self, action: Ack, context: ExecutionContext) -> Executed:
        del context
        held = self._held.get(action.target, {}).get(action.token)
        if held is None:
            raise ActionFailed(f"message {action.token} of {action.source} is not held here")
        await held.handle.ack_sync(timeout=self.settings.decision_timeout)
        self._drop_held(action.target, action.token)
        return Executed()

    async def _release(self, action: Release, context: ExecutionContext) -> Executed:
        del context
        held = self._drop_held(action.target, action.token)
        if held is None:
            raise ActionFailed(f"message {action.token} of {action.source} is not held here")
        await held.handle.nak()
        return Executed()

    def _drop_held(self, key: ObjectKey, token: str) -> Held | None:
        by_token = self._held.get(key, {})
        held = by_token.pop(token, None)
        if not by_token:
            self._held.pop(key, None)
        return held

    async def _let_go(self, key: ObjectKey) -> None:
        # A key this replica no longer owns: what it holds for it goes back to its queue.
        for held in self._held.pop(key, {}).values():
            with contextlib.suppress(Exception):
                await held.handle.nak()

    def reshard(self, gained: Callable[[ObjectKey], bool]) -> None:
        """The replicas changed (see :mod:`.sharding`): reconcile the keys this one gained."""
        if not self.feed.loaded.is_set():
            return  # the load wakes every owned key anyway
        for kind in self._reconcilers:
            for key in {*self.cache.keys(kind), *(k for k in self._records if k.kind == kind)}:
                if gained(key):
                    self.queue.add(key, background=True)

    async def _work(self) -> None:
        while True:
            try:
                key, triggers = await self.queue.get()
            except QueueShutDown:
                return
            if not self.owns(key):
                await self._let_go(key)
                self.queue.done(key)
                continue
            try:
                await self.reconcile(key, triggers)
            except Exception:
                log.exception("%s: reconcile of %s failed", self.definition.name, key)
                labels = {"worker": self.definition.name, "kind": key.kind, "result": "error"}
                self.metrics.record(RECONCILES, labels)
                self.queue.backoff(key)
            finally:
                self.queue.done(key)
                if self.queue.idle():
                    self._rest_soon()

    def _rest_soon(self) -> None:
        """Let the cache drop what it keeps unpacked, and pack what it keeps loose, once the
        queue has stayed idle for :data:`REST_AFTER` (a pool woken again in 50 ms rereads its
        members)."""
        loop = asyncio.get_running_loop()
        self._idle_since = loop.time()
        if self._rest_timer is None:
            self._rest_timer = loop.call_later(REST_AFTER, self._rest_if_still_idle)

    def _rest_if_still_idle(self) -> None:
        loop = asyncio.get_running_loop()
        self._rest_timer = None
        if not self.queue.idle():
            return  # the pass that ends it calls _rest_soon again
        waited = loop.time() - self._idle_since
        if waited >= REST_AFTER:
            self.cache.rest()
            self._pack_loose()
        else:
            self._rest_timer = loop.call_later(REST_AFTER - waited, self._rest_if_still_idle)

    def _pack_loose(self) -> None:
        # What the state table's read left loose is packed a slice at a time while the queue
        # stays idle, so that work arriving meanwhile waits for one slice at most; when work
        # comes first, the next rest goes on with it.
        if not self.queue.idle():
            return
        if self.cache.pack_loose(PACK_SLICE):
            asyncio.get_running_loop().call_soon(self._pack_loose)
        else:
            _give_back_freed_memory()

    # -- one key ----------------------------------------------------------------------------

    def observed(self, key: ObjectKey, now: datetime) -> Observed:
        """What ``observe`` gets for ``key`` now (expectations settled against the bus)."""
        reconciler = self._reconcilers[key.kind]
        record = self._records.get(key)
        memo = None
        if record is not None and record.memo is not None:
            memo_type = getattr(reconciler, "memo_type", None)
            memo = msgspec.convert(record.memo, memo_type) if memo_type else record.memo
        expectations = settle(
            record.expectations if record else None,
            self.cache.observed,
            now,
            timedelta(seconds=self.settings.expectations_ttl),
        )
        owner_uid = metadata_of(self.cache.get(key) or {}).get("uid")
        if expectations is not None and expectations.owner_uid != owner_uid:
            # Another incarnation's (the owner was deleted, or recreated under its name):
            # not this one's to wait for, and forgotten with the next pass's memory.
            expectations = None
        memory = self._memory.get(key)
        return Observed(
            cache=self.cache,
            last_error=memory.last_error if memory else None,
            memo=memo,
            expectations=expectations,
            messages=tuple(held.message for held in self._held.get(key, {}).values()),
        )

    async def reconcile(self, key: ObjectKey, triggers: tuple[str, ...] = ()) -> Decision:
        reconciler = self._reconcilers[key.kind]
        memory = self._memory.setdefault(key, _KeyMemory())
        started = time.perf_counter()
        self.cache.expire()
        now = self.clock()
        given = self.observed(key, now)
        with self.cache.recording() as reads:
            observed = reconciler.observe(key, given)
        recorded = decision_inputs(given, reads)
        woken_by = self._woken_by.get(key)
        with traced_reconcile(self.tracer, reconciler, observed, woken_by) as (span, inputs):
            if span is None and woken_by is not None:
                self._woken_by.pop(key, None)  # not traced (its object is gone): forget it
            # By reference, not content: the same objects at the same resourceVersions make the
            # same inputs, and a pool's pass reads every member and its Pod.
            digest = inputs_digest({"inputs": recorded, "now": now})
            try:
                plan = reconciler.plan(inputs, now)
            except Exception as error:
                log.exception("%s: planner failed for %s", self.definition.name, key)
                plan = Plan(reason="the planner raised", error=f"planner bug: {error!r}")
                execution = Execution()
            else:
                self._note_planning(key, time.perf_counter() - started)
                steps_tracer = self.tracer if span is not None else None
                execution = await self._carry_out(key, reconciler, plan, given, now, steps_tracer)
            requeue_after, note = self._schedule(key, memory, plan, execution)
            decision = self._decision(
                key, triggers, digest, recorded, plan, execution, requeue_after, note
            )
            if self._memory.get(key) == _KeyMemory():
                self._memory.pop(key, None)
            if span is not None and decision.error is not None:
                span.set_status(Status(StatusCode.ERROR, decision.error))
            await self._record(decision, now, trace_headers(span))
        labels = {"worker": self.definition.name, "kind": key.kind}
        self.metrics.record(RECONCILE_SECONDS, labels, time.perf_counter() - started)
        result = "ok" if decision.error is None else "error"
        self.metrics.record(RECONCILES, {**labels, "result": result})
        return decision

    def _note_planning(self, key: ObjectKey, seconds: float) -> None:
        if key.kind not in self.definition.coalesce:
            return
        if key in self.cache:
            self._planning[key] = seconds
        else:
            self._planning.pop(key, None)

    async def _carry_out(
        self,
        key: ObjectKey,
        reconciler: Reconciler,
        plan: Plan,
        given: Observed,
        now: datetime,
        tracer: Tracer | None,
    ) -> Execution:
        """Write the key's memory ahead of the actions it covers, execute, then record what the
        answers taught (the uids of created objects)."""
        expectations = given.expectations
        if getattr(reconciler, "expects", False):
            owner_uid = str(metadata_of(self.cache.get(key) or {}).get("uid") or "")
            if owner_uid:
                expectations = expect(expectations, owner_uid, flattened(plan.actions), now)
        memo = msgspec.to_builtins(plan.memo) if plan.memo is not None else None
        try:
            await self._remember(key, memo, expectations)
        except Exception as error:
            return Execution(error=f"keeping the memo of {key} on the bus: {error!r}")
        execution = await execute(
            plan,
            self._executors,
            ExecutionContext(
                self.api, self.cache, self.js, self.bus, key, self.take_delivery, self.metrics
            ),
            may_act=self.may_act,
            tracer=tracer,
        )
        if expectations is not None and expectations is not given.expectations:
            learned = answered(expectations, *self._answers(plan, execution))
            if learned != expectations:
                try:
                    await self._remember(key, memo, learned)
                except Exception as error:
                    # The next pass writes it again; meanwhile the names still match.
                    log.warning(
                        "%s: keeping the answers of %s: %r", self.definition.name, key, error
                    )
        return execution

    def _answers(
        self, plan: Plan, execution: Execution
    ) -> tuple[list[Json], list[Json], list[str]]:
        """The objects our creates returned, the bodies of creates that surely did not happen
        (refused, or never attempted after an earlier failure), and the uids our deletes found
        already gone."""
        created: list[Json] = []
        refused: list[Json] = []
        gone: list[str] = []
        done = {id(outcome.action): outcome for outcome in execution.outcomes}
        for action in flattened(plan.actions):
            outcome = done.get(id(action))
            if isinstance(action, Delete):
                if outcome is not None and outcome.note == ALREADY_GONE and action.uid:
                    gone.append(action.uid)
                continue
            if not isinstance(action, Create):
                continue
            if outcome is None:
                refused.append(action.body)
            elif outcome.error is None:
                obj = self.cache.get(outcome.target)
                if obj is not None:
                    created.append(obj)
            elif not outcome.uncertain:
                refused.append(action.body)
        return created, refused, gone

    async def _remember(self, key: ObjectKey, memo: Any, expectations: Expectations | None) -> None:
        record = KeyRecord(
            kind=key.kind,
            namespace=key.namespace,
            name=key.name,
            memo=memo,
            expectations=expectations,
        )
        current = self._records.get(key)
        if current == record or (current is None and record.empty):
            return
        await self.memos.put(record, ack_timeout=self.settings.decision_timeout)
        if record.empty:
            self._records.pop(key, None)
        else:
            self._records[key] = record

    def _schedule(
        self, key: ObjectKey, memory: _KeyMemory, plan: Plan, execution: Execution
    ) -> tuple[float | None, str]:
        """Decide when ``key`` comes back; returns the delay (None: on the next event) and a
        note for the decision when the worker overrode the planner."""
        wrote = bool(execution.outcomes)
        memory.write_passes = memory.write_passes + 1 if wrote else 0
        memory.last_error = execution.error
        if execution.error is not None:
            return self.queue.backoff(key), ""
        if execution.stale:
            self.queue.add(key)
            return 0.0, ""
        if plan.error is not None:
            return self.queue.backoff(key), ""
        if (
            plan.requeue_after is not None
            and plan.requeue_after <= 0
            and memory.write_passes >= self.settings.max_write_passes
        ):
            delay = self.queue.backoff(key)
            return delay, (
                f"{memory.write_passes} passes in a row wrote something; backing off instead "
                "of reconciling again at once"
            )
        self.queue.forget(key)
        if plan.requeue_after is None:
            return None, ""
        self.queue.add_after(key, plan.requeue_after)
        return max(plan.requeue_after, 0.0), ""

    def _decision(
        self,
        key: ObjectKey,
        triggers: tuple[str, ...],
        digest: str,
        recorded: DecisionInputs,
        plan: Plan,
        execution: Execution,
        requeue_after: float | None,
        note: str,
    ) -> Decision:
        error = execution.error or plan.error
        if error is not None:
            outcome = Outcome.FAILED
        elif execution.outcomes:
            outcome = Outcome.APPLIED
        elif requeue_after is not None:
            outcome = Outcome.REQUEUED
        else:
            outcome = Outcome.NOOP
        actions = tuple(
            DecisionAction(
                verb=done.action.verb,
                target=_ref(done.target, done.action),
                detail="; ".join(part for part in (done.action.why, done.note) if part),
                error=done.error,
            )
            for done in execution.outcomes
        )
        reason = "; ".join(part for part in (plan.reason, note) if part)
        return Decision(
            worker=self.definition.name,
            key=_ref(key),
            inputs_digest=digest,
            outcome=outcome,
            triggers=triggers,
            actions=actions,
            reason=reason,
            error=error[:_MAX_RECORDED_ERROR] if error else None,
            requeue_after_seconds=requeue_after,
            inputs=recorded,
            plan_digest=plan_digest(plan),
        )

    async def _record(self, decision: Decision, now: datetime, trace: dict[str, str]) -> None:
        event = decision_event(
            decision,
            time=now,
            traceparent=trace.get("traceparent"),
            tracestate=trace.get("tracestate"),
        )
        try:
            await publish_event(
                self.js, event, self.bus, ack_timeout=self.settings.decision_timeout
            )
        except Exception as error:
            # A decision is a record of what was done, not a change: losing one loses history,
            # never state. Say so loudly and keep serving.
            log.warning("%s: could not record %s: %s", self.definition.name, event.id, error)
            return
        self.decisions_published += 1

    # -- for tests and tools ----------------------------------------------------------------

    async def settled(self) -> None:
        """Wait until no key is queued or being reconciled (keys scheduled for later may
        remain); bound it with ``asyncio.timeout``."""
        await self.queue.join()


def _trace_headers_of(event: ObjectEvent) -> dict[str, str] | None:
    """The W3C headers an event carries (the watcher's span of the change), if any."""
    if not isinstance(event.traceparent, str):
        return None
    headers = {"traceparent": event.traceparent}
    if isinstance(event.tracestate, str) and event.tracestate:
        headers["tracestate"] = event.tracestate
    return headers


def _give_back_freed_memory() -> None:
    """Return the C heap's free memory to the system (glibc's ``malloc_trim``; nothing where
    the C library has none). A worker at rest has just let go of what it kept unpacked or
    loose, and glibc keeps freed blocks of that size for itself: measured, a restarted sandbox
    worker with 10,000 Sandboxes held 4 MiB more without this."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    return getattr(ctypes.CDLL(None), "malloc_trim", None)


def decision_inputs(given: Observed, reads: Mapping[ObjectKey, Json | None]) -> DecisionInputs:
    """The inputs of a pass by reference: what a re-run needs besides the event log."""
    observed = []
    for key in sorted(reads):
        meta = metadata_of(reads[key] or {})
        observed.append(
            ObservedVersion(
                kind=key.kind,
                namespace=key.namespace or None,
                name=key.name,
                resource_version=str(meta["resourceVersion"])
                if "resourceVersion" in meta
                else None,
                uid=str(meta["uid"]) if "uid" in meta else None,
            )
        )
    return DecisionInputs(
        observed=tuple(observed),
        memo=msgspec.to_builtins(given.memo) if given.memo is not None else None,
        expectations=msgspec.to_builtins(given.expectations) if given.expectations else None,
        last_error=given.last_error,
        messages=given.messages,
    )


def _ref(key: ObjectKey, action: Any = None) -> ObjectRef:
    name = key.name
    if not name and action is not None:
        body = getattr(action, "body", None)
        name = str(metadata_of(body).get("generateName") or "") if body else ""
    return ObjectRef(kind=key.kind, namespace=key.namespace or None, name=name or "-")
