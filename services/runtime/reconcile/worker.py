"""The worker: bus → cache → queue → observe → plan → execute → decision, for one
:class:`~.definition.WorkerDefinition`.

For each key taken from the queue, :meth:`Worker.reconcile` observes (an
:class:`~.definition.Observed`: the cache, the key's memo and expectations, the messages held
for it, its last error), plans, carries the plan out (:func:`~.executing.carry_out`: the key's
memory written ahead of the actions, then the actions; a plan that took a message of a further
source for its key and stopped there is planned again at once with it, in the same pass),
schedules when the key comes back (:func:`~.queueing.schedule`) and records a
``DecisionMade`` event (:mod:`.recording`). The parts it ties together, each in its module:

- :mod:`.feeding` and :mod:`.waking`: the state table, then the event log, into the cache; the
  keys each change wakes, into the work queue (:class:`api.workqueue.WorkQueue`). The kinds a
  definition follows ``on_demand`` have a feed of their own, started once the cache holds an
  object that needs them; the keys of those objects wait for it to be loaded;
- :mod:`.sources`: messages of further sources, held for their keys until a plan acks them;
- :mod:`.memory`: what the worker keeps per key, on the bus and in this process;
- :mod:`.resting`: memory given back while the queue is idle.

With a tracer (:mod:`.tracing`), a reconciler that asks for it gets a span around observe →
plan → execute → record, child spans for the steps of its plan, and its decision event carries
the span's ``traceparent``; the span hangs under the last event that woke the key.

Its metrics (:mod:`services.runtime.metrics`): each pass by kind and result (a pass that raised
counts as an error too) and its duration, the same under controller-runtime's and client-go's
names for each reconciler, with its queue's series (:mod:`.controller_series`), the events it
handled, dead-lettered, skipped and retried, its consumer's lag, the decisions it published, and
the gauges its definition reads by I/O, sampled at each scrape while the worker runs (so, for an
active-passive worker, only on the replica that leads).

A planner that raises is a bug, not a reason to stop serving the other keys: the exception is
recorded as a failed decision and the key backs off.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import nats.errors
from nats.js import JetStreamContext
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from api.workqueue import QueueShutDown, WorkQueue
from events.codec import ObservedState
from events.envelope import ObjectKey
from events.ids import inputs_digest
from events.types import Decision, DecisionInputs, ObjectEvent
from services.runtime.bus import BusConfig
from services.runtime.cache import ObjectCache
from services.runtime.cancellation import supervise
from services.runtime.kube import KubeApi
from services.runtime.metrics import RECONCILE_SECONDS, RECONCILES, Metrics
from services.runtime.reconcile.actions import Plan
from services.runtime.reconcile.controller_series import (
    ERROR,
    ControllerSeries,
    MeteredQueue,
    result_of,
)
from services.runtime.reconcile.definition import (
    Gauge,
    Observed,
    WorkerDefinition,
    WorkerSettings,
)
from services.runtime.reconcile.executing import (
    RUNTIME_EXECUTORS,
    Execution,
    ExecutionContext,
    Executor,
    carry_out,
)
from services.runtime.reconcile.failures import failed_write
from services.runtime.reconcile.feeding import BusFeed, until_nats_answers
from services.runtime.reconcile.memory import KeyMemory, MemoStore
from services.runtime.reconcile.queueing import schedule
from services.runtime.reconcile.recording import Recorder, decision_inputs, decision_of
from services.runtime.reconcile.resting import Resting
from services.runtime.reconcile.sources import Delivery, HeldMessages, Source
from services.runtime.reconcile.tracing import trace_carrier, trace_headers, traced_reconcile
from services.runtime.reconcile.waking import Waking

__all__ = ["Worker"]

log = logging.getLogger(__name__)


@dataclass
class Worker:
    """Runs one :class:`~.definition.WorkerDefinition` against a bus and an API server."""

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
        name, settings = self.definition.name, self.settings
        self.metrics.declare(self.definition.metrics)
        self.cache = ObjectCache(
            label_indexes=self.definition.label_indexes, written_ttl=settings.written_ttl
        )
        self._reconcilers = {r.kind: r for r in self.definition.reconcilers}
        self.series: ControllerSeries[ObjectKey] = ControllerSeries(
            self.metrics,
            name,
            list(self._reconcilers),
            concurrency=settings.concurrency,
            kind_of=lambda key: key.kind,
        )
        self.queue: WorkQueue[ObjectKey] = MeteredQueue(
            self.series.book, base_delay=settings.base_delay, max_delay=settings.max_delay
        )
        self.memos = MemoStore(self.js, worker=name, bus=self.bus)
        self._memory = KeyMemory(self.memos, ack_timeout=settings.decision_timeout)
        self._held = HeldMessages(
            name,
            max_held=settings.max_held,
            keepalive=settings.keepalive,
            ack_timeout=settings.decision_timeout,
            wake=self._wake_for_message,
        )
        self._waking = Waking(self.cache, self.queue)
        self._taking: dict[ObjectKey, list[str]] = {}
        """The keys whose pass is carrying out a plan, and the messages taken for each."""
        self._woken_by = self._waking.woken_by
        self._resting = Resting(self.cache, self.queue.idle)
        self._recorder = Recorder(
            self.js, self.bus, worker=name, ack_timeout=settings.decision_timeout
        )
        self._executors: dict[type, Executor] = {
            **RUNTIME_EXECUTORS,
            **self._held.executors(),
            **self.definition.executors,
        }
        on_demand = self.definition.on_demand

        def feed(kinds: tuple[str, ...], durable_suffix: str = "") -> BusFeed:
            return BusFeed(
                self.js,
                worker=name,
                kinds=kinds,
                deliver=self.take_event,
                load=self.take_state,
                bus=self.bus,
                start_margin=settings.start_margin,
                batch=settings.fetch_batch,
                wanted=self._wants if self.definition.follows else None,
                durable_suffix=durable_suffix,
            )

        self.feed = feed(tuple(k for k in self.definition.watched_kinds if k not in on_demand))
        self.demand_feed = feed(tuple(on_demand), "-on-demand") if on_demand else None
        """The kinds followed on demand (``WorkerDefinition.on_demand``): a feed of their own,
        started once an object that needs them is in the cache, never stopped after."""
        self._needing = frozenset(kind for needs in on_demand.values() for kind in needs)
        self._demanded = asyncio.Event()
        labels = {"worker": name}

        def counts() -> dict[str, float]:
            stats = [f.stats for f in self.feeds]
            return {
                "handled": sum(s.handled for s in stats),
                "dead_lettered": sum(s.dead_lettered for s in stats),
                "skipped": sum(s.skipped for s in stats),
                "filtered": sum(s.filtered for s in stats),
                "retried": sum(s.retried for s in stats),
                "published": self.decisions_published,
            }

        self.metrics.read_from(
            "sandbus_events",
            "Events a worker handled, dead-lettered, skipped, filtered (not followed, turned away "
            "unread) or retried from the event log, and the decision events it published to it.",
            counts,
            labels=labels,
        )
        self.metrics.read_from(
            "sandbus_events",
            "Events of the event log not delivered to a worker yet: its consumer's lag.",
            lambda: {"pending": sum(f.stats.pending for f in self.feeds)},
            labels=labels,
            kind="gauge",
        )

    @property
    def decisions_published(self) -> int:
        return self._recorder.published

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Load the memory and the state table, then reconcile and follow the bus (and the
        further sources) until cancelled or one of them fails."""
        name = self.definition.name
        await until_nats_answers(
            f"{name}: loading the memos", self._memory.load, self.feed.retry_delay
        )
        children: list[tuple[str, Any]] = [
            (f"{name}-{i}", self._work()) for i in range(self.settings.concurrency)
        ]
        children.append((f"{name}-feed", self.feed.run(self._enqueue_everything)))
        if self.demand_feed is not None:
            children.append((f"{name}-feed-on-demand", self._follow_on_demand(self.demand_feed)))
        for source in self.definition.sources:
            children.append((f"{name}-{source.name}", self._run_source(source)))
        if self.definition.sources:
            children.append((f"{name}-keepalive", self._held.keep_alive()))
        samplers = [self._sample(gauge) for gauge in self.definition.gauges]
        self.series.start()
        try:
            await supervise(children)
        finally:
            self.series.stop()
            for gauge, sampler in zip(self.definition.gauges, samplers, strict=True):
                self.metrics.stop_sampling(gauge.name, sampler)
            self.queue.shutdown()
            self._resting.stop()
            await self._held.hand_back()

    @property
    def feeds(self) -> tuple[BusFeed, ...]:
        """The worker's feeds from the bus: the main one, and the one of kinds on demand."""
        return (self.feed,) if self.demand_feed is None else (self.feed, self.demand_feed)

    async def _follow_on_demand(self, feed: BusFeed) -> None:
        await self.feed.loaded.wait()
        if not self._demanded.is_set():
            # Nothing needs the kinds now: an earlier run's durable goes, so that a later
            # demand starts from the state table instead of the backlog since. Only a saving:
            # a durable left would be followed from where it stopped, which is correct too.
            try:
                await feed.forget_durable()
            except nats.errors.Error as error:
                log.warning(
                    "%s: could not delete %s: %r", self.definition.name, feed.durable, error
                )
            await self._demanded.wait()
        log.info("%s: following %s from now on", self.definition.name, ", ".join(feed.kinds))
        await feed.run(self._enqueue_needing)

    def _enqueue_needing(self) -> None:
        """After a load of the kinds on demand: a pass for each key whose planner reads them."""
        for kind in self._needing & self._reconcilers.keys():
            for key in self.cache.keys(kind):
                self.queue.add(key, background=True)

    def _demand(self, kind: str) -> None:
        if kind in self._needing:
            self._demanded.set()

    def _sample(self, gauge: Gauge) -> Callable[[], Awaitable[Mapping[tuple[str, ...], float]]]:
        def sample() -> Awaitable[Mapping[tuple[str, ...], float]]:
            return gauge.read(self.js, self.bus, self.cache)

        self.metrics.sample_from(gauge.name, gauge.help, gauge.labels, sample)
        return sample

    async def _run_source(self, source: Source) -> None:
        await self.feed.loaded.wait()  # a message is planned on a loaded cache, never an empty one
        await source.run(self.js, self.take_delivery, self._held.room)
        raise RuntimeError(f"input source {source.name} stopped")

    def _enqueue_everything(self) -> None:
        # After a (re)load every object of a reconciled kind gets one pass, as an informer's
        # initial list does: changes made while the worker was away are acted on now.
        # In the background lane: a change that arrives meanwhile is served first.
        for kind in self._reconcilers:
            for key in self.cache.keys(kind):
                self.queue.add(key, background=True)
        for key in self._memory.remembered():
            if key.kind in self._reconcilers:
                self.queue.add(key, background=True)
        if self.queue.idle():
            self._resting.soon()  # nothing to reconcile: the objects loaded are packed all the same

    def take_event(self, event: ObjectEvent) -> None:
        """One change from the bus: into the cache, then wake the keys it concerns
        (:mod:`.waking`)."""
        self._demand(event.kind)
        self._waking.take_event(
            event,
            self.definition,
            self._reconcilers,
            loaded=self.feed.loaded.is_set(),
            traced=self.tracer is not None,
        )

    def _wants(self, subject: str, payload: bytes) -> bool:
        return self._waking.wants(subject, payload, self.definition)

    def take_state(self, state: ObservedState) -> None:
        """One object of a read of the state table: into the cache. Nothing wakes: once the
        read is complete every key is reconciled, never from a partial view."""
        self._demand(state.key.kind)
        self._waking.take_state(state, self.definition)

    def take_delivery(self, delivery: Delivery) -> None:
        """One message of a further source: held for its key until a plan acks it."""
        self._held.take(delivery)

    def _wake_for_message(self, key: ObjectKey, token: str) -> None:
        taking = self._taking.get(key)
        if taking is not None:
            taking.append(token)  # its pass is carrying out a plan: that pass looks at it
        elif key.kind in self._reconcilers:
            self.queue.add(key, trigger=token)

    def _room(self) -> int:
        return self._held.room()

    def reshard(self, gained: Callable[[ObjectKey], bool]) -> None:
        """The replicas changed (see :mod:`.sharding`): reconcile the keys this one gained."""
        if not self.feed.loaded.is_set():
            return  # the load wakes every owned key anyway
        remembered = self._memory.remembered()
        for kind in self._reconcilers:
            for key in {*self.cache.keys(kind), *(k for k in remembered if k.kind == kind)}:
                if gained(key):
                    self.queue.add(key, background=True)

    async def _work(self) -> None:
        while True:
            try:
                key, triggers = await self.queue.get()
            except QueueShutDown:
                return
            if not self.owns(key):
                await self._held.let_go(key)
                self.queue.done(key)
                continue
            if key.kind in self._needing and self.demand_feed is not None:
                # Its planner reads kinds on demand: never from a cache without them.
                self._demand(key.kind)
                await self.demand_feed.loaded.wait()
            self.series.begin(key.kind)
            started = time.perf_counter()
            try:
                await self.reconcile(key, triggers)
            except Exception:
                log.exception("%s: reconcile of %s failed", self.definition.name, key)
                labels = {"worker": self.definition.name, "kind": key.kind, "result": "error"}
                self.metrics.record(RECONCILES, labels)
                self.series.passed(key.kind, ERROR, time.perf_counter() - started)
                self.queue.backoff(key)
            finally:
                self.series.end(key.kind)
                self.queue.done(key)
                if self.queue.idle():
                    self._resting.soon()

    # -- one key ----------------------------------------------------------------------------

    def observed(self, key: ObjectKey, now: datetime) -> Observed:
        """What ``observe`` gets for ``key`` now (expectations settled against the bus)."""
        ttl = timedelta(seconds=self.settings.expectations_ttl)
        return Observed(
            cache=self.cache,
            last_error=self._memory.last_error(key),
            failure_persists=self._memory.failure_persists(
                key, now, timedelta(seconds=self.settings.report_failures_after)
            ),
            memo=self._reconcilers[key.kind].memo_of(self._memory.memo(key)),
            expectations=self._memory.expectations(key, self.cache, now, ttl),
            messages=self._held.messages(key),
        )

    def _observe(self, key: ObjectKey, now: datetime) -> tuple[Observed, Any, DecisionInputs]:
        """What the planner gets for ``key`` now, and its record by reference."""
        given = self.observed(key, now)
        with self.cache.recording() as reads:
            observed = self._reconcilers[key.kind].observe(key, given)
        return given, observed, decision_inputs(given, reads)

    async def _plan_and_carry_out(
        self,
        key: ObjectKey,
        inputs: Any,
        given: Observed,
        now: datetime,
        started: float,
        span: Span | None,
    ) -> tuple[Plan, Execution, bool]:
        """The plan for ``inputs``, carried out; and whether the planner raised."""
        reconciler = self._reconcilers[key.kind]
        try:
            plan = reconciler.plan(inputs, now)
        except Exception as error:
            log.exception("%s: planner failed for %s", self.definition.name, key)
            return (
                Plan(reason="the planner raised", error=f"planner bug: {error!r}"),
                Execution(),
                True,
            )
        self._waking.planned(key, time.perf_counter() - started, self.definition)
        execution = await carry_out(
            plan,
            self._executors,
            ExecutionContext(
                self.api, self.cache, self.js, self.bus, key, self.take_delivery, self.metrics
            ),
            remember=lambda memo, expectations: self._memory.remember(key, memo, expectations),
            expectations=given.expectations,
            expects=reconciler.expects,
            now=now,
            may_act=self.may_act,
            tracer=self.tracer if span is not None else None,
        )
        return plan, execution, False

    async def reconcile(self, key: ObjectKey, triggers: tuple[str, ...] = ()) -> Decision:
        name = self.definition.name
        reconciler = self._reconcilers[key.kind]
        started = time.perf_counter()
        self.cache.expire()
        now = self.clock()
        given, observed, recorded = self._observe(key, now)
        woken_by = self._woken_by.get(key)
        with traced_reconcile(self.tracer, reconciler, observed, woken_by) as (span, inputs):
            if span is None and woken_by is not None:
                self._woken_by.pop(key, None)  # not traced (its object is gone): forget it
            self._taking[key] = []
            try:
                plan, execution, panicked = await self._plan_and_carry_out(
                    key, inputs, given, now, started, span
                )
            finally:
                taken = self._taking.pop(key)
            if taken and execution.stale and execution.error is None:
                # The plan took an entry off a queue for the key, and stopped to look at it:
                # it is planned again at once, with the entry in hand, in the same pass (one
                # decision, whose inputs hold the entry) instead of in a pass of its own.
                given, observed, recorded = self._observe(key, now)
                carrier = trace_carrier(span) if span is not None else None
                if carrier and reconciler.with_trace_context is not None:
                    observed = reconciler.with_trace_context(observed, carrier)
                plan, again, panicked = await self._plan_and_carry_out(
                    key, observed, given, now, started, span
                )
                execution = Execution(
                    outcomes=(*execution.outcomes, *again.outcomes),
                    error=again.error,
                    stale=again.stale,
                )
                triggers = (*triggers, *taken)
            else:
                for token in taken:
                    self._wake_for_message(key, token)
            # By reference, not content: the same objects at the same resourceVersions make the
            # same inputs, and a pool's pass reads every member and its Pod.
            digest = inputs_digest({"inputs": recorded, "now": now})
            write_passes = self._memory.passed(
                key, wrote=bool(execution.outcomes), error=execution.error, now=now
            )
            failed = failed_write(execution.error)
            requeue_after, note = schedule(
                self.queue,
                key,
                failed=execution.error is not None,
                refused_write=failed is not None and failed.refused,
                refused_backoff=self.settings.refused_backoff,
                stale=execution.stale,
                refused=plan.error is not None,
                requeue_after=plan.requeue_after,
                write_passes=write_passes,
                max_write_passes=self.settings.max_write_passes,
            )
            decision = decision_of(
                name,
                key,
                triggers=triggers,
                digest=digest,
                inputs=recorded,
                plan=plan,
                execution=execution,
                requeue_after=requeue_after,
                note=note,
            )
            if span is not None and decision.error is not None:
                span.set_status(Status(StatusCode.ERROR, decision.error))
            await self._recorder.record(decision, now, trace_headers(span))
        labels = {"worker": name, "kind": key.kind}
        took = time.perf_counter() - started
        self.metrics.record(RECONCILE_SECONDS, labels, took)
        result = "ok" if decision.error is None else "error"
        self.metrics.record(RECONCILES, {**labels, "result": result})
        self.series.passed(
            key.kind,
            result_of(
                error=decision.error is not None,
                requeue_after=requeue_after,
                backed_off=bool(note),
            ),
            took,
            panicked=panicked,
        )
        return decision

    # -- for tests and tools ----------------------------------------------------------------

    async def settled(self) -> None:
        """Wait until no key is queued or being reconciled (keys scheduled for later may
        remain); bound it with ``asyncio.timeout``."""
        await self.queue.join()
