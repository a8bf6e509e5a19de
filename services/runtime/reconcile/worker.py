"""The worker shell every reconciler runs in: bus → cache → queue → observe → plan → execute →
decision.

A worker (sandbox, pool, claim, snapshot) is described by a :class:`WorkerDefinition`: its
name, the kinds whose changes it follows, which keys a change of an object wakes, and one
:class:`Reconciler` per kind it reconciles. A reconciler is two functions and no I/O:

``observe(key, cache, last_error) -> inputs``
    Everything the planner may look at, read from the cache into one msgspec-encodable value.
    ``last_error`` is the failure of this key's previous pass (a write the API server refused),
    so a planner can report it, as controller-runtime reconcilers report the error they return.
``plan(inputs, now) -> Plan``
    Pure: the same inputs and time give the same plan.

For each key taken from the queue, :meth:`Worker.reconcile` observes, plans, executes the plan
(:mod:`.executing`), schedules what comes next, and records a ``DecisionMade`` event on the bus:
the events that woke the key, the digest of the inputs and the time (the decision's ``time``
attribute *is* the ``now`` the planner was given, so a replay can re-run the same call), each
action with its outcome, the planner's reason, the error, and when the key comes back.

What comes next, in order of precedence:

1. a write failed → retry with per-key exponential backoff;
2. the API showed the plan was made on stale state (AlreadyExists, NotFound) → again now;
3. the planner reported an error it cannot fix → backoff;
4. otherwise the planner's ``requeue_after`` (0 = now; None = wait for the next event), and the
   key's backoff is reset.

With a tracer (:mod:`.tracing`), a reconciler that asks for it gets a span around observe →
plan → execute → record, child spans for the steps of its plan, and its decision event
carries the span's ``traceparent``.

A planner that writes on every pass would spin on rule 4 with ``requeue_after=0``; after
``max_write_passes`` consecutive writing passes of one key the worker falls back to backoff and
says so in the decision. A planner that raises is a bug, not a reason to stop serving the other
keys: the exception is recorded as a failed decision and the key backs off.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from nats.js import JetStreamContext
from opentelemetry.trace import Status, StatusCode, Tracer

from events.envelope import ObjectRef
from events.ids import inputs_digest
from events.types import (
    Decision,
    DecisionAction,
    ObjectDeleted,
    ObjectEvent,
    ObjectModified,
    Outcome,
    decision_event,
)
from services.runtime.bus import BusConfig, publish_event
from services.runtime.cache import Change, Json, ObjectCache, ObjectKey, metadata_of
from services.runtime.reconcile.actions import Plan
from services.runtime.reconcile.executing import Execution, execute, verb_of
from services.runtime.reconcile.feeding import BusFeed
from services.runtime.reconcile.kube import KubeApi
from services.runtime.reconcile.queueing import QueueShutDown, WorkQueue
from services.runtime.reconcile.tracing import trace_headers, traced_reconcile

__all__ = [
    "Reconciler",
    "Wakes",
    "Worker",
    "WorkerDefinition",
    "WorkerSettings",
]

log = logging.getLogger(__name__)

_MAX_RECORDED_ERROR: Final = 4000


class Reconciler(Protocol):
    """The reconcile of one kind: an observation of the cache and a pure planner."""

    @property
    def kind(self) -> str: ...

    def observe(self, key: ObjectKey, cache: ObjectCache, last_error: str | None) -> Any: ...

    def plan(self, inputs: Any, now: datetime) -> Plan: ...


Wakes = Callable[[str, Json, ObjectCache], Iterable[ObjectKey]]
"""``(kind, object, cache) -> keys``: the keys a change of ``object`` wakes."""


@dataclass(frozen=True)
class WorkerDefinition:
    name: str
    """The worker's name: the ``worker`` of its decisions and the name of its durable."""
    reconcilers: tuple[Reconciler, ...]
    watched_kinds: tuple[str, ...]
    wakes: Wakes
    label_indexes: tuple[tuple[str, str], ...] = ()


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

    def __post_init__(self) -> None:
        self.cache = ObjectCache(
            label_indexes=self.definition.label_indexes, written_ttl=self.settings.written_ttl
        )
        self.queue: WorkQueue[ObjectKey] = WorkQueue(
            base_delay=self.settings.base_delay, max_delay=self.settings.max_delay
        )
        self._reconcilers = {r.kind: r for r in self.definition.reconcilers}
        self._memory: dict[ObjectKey, _KeyMemory] = {}
        self.feed = BusFeed(
            self.js,
            worker=self.definition.name,
            kinds=self.definition.watched_kinds,
            deliver=self.take_event,
            bus=self.bus,
            start_margin=self.settings.start_margin,
            batch=self.settings.fetch_batch,
        )
        self.decisions_published = 0

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Load the state table, then reconcile and follow the bus until cancelled."""
        tasks = [
            asyncio.create_task(self._work(), name=f"{self.definition.name}-{i}")
            for i in range(self.settings.concurrency)
        ]
        try:
            await self.feed.run(on_loaded=self._enqueue_everything)
        finally:
            self.queue.shutdown()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _enqueue_everything(self) -> None:
        # After a (re)load every object of a reconciled kind gets one pass, as an informer's
        # initial list does: changes made while the worker was away are acted on now.
        for kind in self._reconcilers:
            for key in self.cache.keys(kind):
                self.queue.add(key)

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
        self.cache.observe(change, obj, kind=event.kind)
        for key in self.definition.wakes(event.kind, obj, self.cache):
            if key.kind in self._reconcilers:
                self.queue.add(key, trigger=event.id)

    async def _work(self) -> None:
        while True:
            try:
                key, triggers = await self.queue.get()
            except QueueShutDown:
                return
            try:
                await self.reconcile(key, triggers)
            except Exception:
                log.exception("%s: reconcile of %s failed", self.definition.name, key)
                self.queue.backoff(key)
            finally:
                self.queue.done(key)

    # -- one key ----------------------------------------------------------------------------

    async def reconcile(self, key: ObjectKey, triggers: tuple[str, ...] = ()) -> Decision:
        reconciler = self._reconcilers[key.kind]
        memory = self._memory.setdefault(key, _KeyMemory())
        self.cache.expire()
        now = self.clock()
        observed = reconciler.observe(key, self.cache, memory.last_error)
        with traced_reconcile(self.tracer, reconciler, observed) as (span, inputs):
            digest = inputs_digest({"inputs": inputs, "now": now})
            try:
                plan = reconciler.plan(inputs, now)
            except Exception as error:
                log.exception("%s: planner failed for %s", self.definition.name, key)
                plan = Plan(reason="the planner raised", error=f"planner bug: {error!r}")
                execution = Execution()
            else:
                steps_tracer = self.tracer if span is not None else None
                execution = await execute(plan, self.api, self.cache, tracer=steps_tracer)
            requeue_after, note = self._schedule(key, memory, plan, execution)
            decision = self._decision(key, triggers, digest, plan, execution, requeue_after, note)
            if self._memory.get(key) == _KeyMemory():
                self._memory.pop(key, None)
            if span is not None and decision.error is not None:
                span.set_status(Status(StatusCode.ERROR, decision.error))
            await self._record(decision, now, trace_headers(span))
        return decision

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
                verb=verb_of(done.action),
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


def _ref(key: ObjectKey, action: Any = None) -> ObjectRef:
    name = key.name
    if not name and action is not None:
        body = getattr(action, "body", None)
        name = str(metadata_of(body).get("generateName") or "") if body else ""
    return ObjectRef(kind=key.kind, namespace=key.namespace or None, name=name or "-")
