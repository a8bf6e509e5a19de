"""What a worker declares: its reconcilers, what it follows and what wakes what, and its settings.

A worker (sandbox, pool, claim, snapshot) is a :class:`WorkerDefinition`: its name, the kinds
whose changes it follows, which keys a change wakes (:mod:`.wakes`), one :class:`Reconciler` per
kind it reconciles, the executors of its own action kinds (:mod:`.executing`), and further input
sources (:mod:`.sources`). A reconciler is two functions and no I/O:

``observe(key, observed) -> inputs``
    Everything the planner may look at, read from :class:`Observed` into one msgspec-encodable
    value: the cache, the key's memo and expectations, the messages of further sources held for
    the key, and the failure of the key's previous pass (a write the API server refused) and
    whether its passes have kept failing for a while, so a planner can report it, as
    controller-runtime reconcilers report the error they return.
``plan(inputs, now) -> Plan``
    Pure: the same inputs and time give the same plan.

Everything else the worker does differently for a kind is a field of the same record, with its
default: the type the memo converts back to, whether to keep expectations, and tracing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

import msgspec
from nats.js import JetStreamContext

from api.objects import Json
from events.envelope import ObjectKey
from services.runtime.bus import BusConfig
from services.runtime.cache import ObjectCache
from services.runtime.metrics import MetricSpec
from services.runtime.reconcile.actions import Plan
from services.runtime.reconcile.executing import Executor
from services.runtime.reconcile.expectations import DEFAULT_TTL, Expectations
from services.runtime.reconcile.sources import Source, SourceMessage
from services.runtime.reconcile.tracing import ReconcileSpan

__all__ = ["Gauge", "Observed", "Reconciler", "WorkerDefinition", "WorkerSettings"]

Inputs = TypeVar("Inputs")


@dataclass(frozen=True)
class Observed:
    """What a reconciler's ``observe`` reads its inputs from."""

    cache: ObjectCache
    last_error: str | None = None
    """The failure of this key's previous pass."""
    failure_persists: bool = False
    """This key's passes have failed in a row for at least
    ``WorkerSettings.report_failures_after``: a failure that passes (a Conflict, throttling, a
    timeout, a 5xx) but persists is reported as a refusal is (:func:`.failures.reportable`)."""
    memo: Any = None
    """What the previous plan of this key asked to keep (converted to ``memo_type``)."""
    expectations: Expectations | None = None
    """This key's creates and deletes that the bus has not shown yet."""
    messages: tuple[SourceMessage, ...] = ()
    """Messages of further sources held for this key, oldest first."""


@dataclass(frozen=True)
class Reconciler(Generic[Inputs]):
    """The reconcile of one kind: an observation, a pure planner, and how the worker treats
    them. Every field the worker reads is here; a worker builds one with the functions of its
    core (``Reconciler("SandboxSnapshot", observe, plan_snapshot)``)."""

    kind: str
    observe: Callable[[ObjectKey, Observed], Inputs]
    plan: Callable[[Inputs, datetime], Plan]
    memo_type: type | None = None
    """The type the key's memo is converted back to before ``observe`` gets it (None: the JSON
    builtins it was kept as)."""
    expects: bool = False
    """Keep expectations of this kind's creates and deletes (:mod:`.expectations`). The echo of
    the key's own write then wakes it too: for expectations the bus showing it is the news."""
    span: Callable[[Inputs], ReconcileSpan | None] | None = None
    """With a tracer, the span of a reconcile of these inputs (None from it: not traced, e.g.
    the object is gone). None: this kind is never traced (:mod:`.tracing`)."""
    with_trace_context: Callable[[Inputs, str], Inputs] | None = None
    """With a span, the inputs completed with the running span's carrier (JSON) for the planner,
    which may write it onto an object that has none. None: the inputs as they are."""

    def memo_of(self, kept: Any) -> Any:
        """The memo ``observe`` gets, from the JSON builtins it is kept as."""
        if kept is None or self.memo_type is None:
            return kept
        return msgspec.convert(kept, self.memo_type)


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
    reconcilers: tuple[Reconciler[Any], ...]
    watched_kinds: tuple[str, ...]
    wakes: Callable[[str, Json, ObjectCache], Iterable[ObjectKey]]
    """``(kind, object, cache) -> keys``: the keys a change of ``object`` wakes; usually a
    :class:`~.wakes.Wakes` of rules."""
    label_indexes: tuple[tuple[str, str], ...] = ()
    executors: Mapping[type, Executor] = field(default_factory=dict)
    """Executors of the worker's own action kinds, by action type."""
    sources: tuple[Source, ...] = ()
    """Further inputs: each message is joined to a key and acked by that key's plan."""
    coalesce: Mapping[str, float] = field(default_factory=dict)
    """Kind → seconds: a key of that kind woken by an event waits up to that long, so that the
    events of a burst (a pool's members) are served by one pass instead of one each; longer
    when its passes plan long, shorter when the event echoes the key's own write
    (:mod:`.waking`)."""
    metrics: tuple[MetricSpec, ...] = ()
    """The metrics its planners record (``Record`` actions), besides the runtime's own."""
    follows: Mapping[str, Callable[[Json], bool]] = field(default_factory=dict)
    """Kind → the objects of that kind the worker follows, when not all of them: the others
    are neither cached nor wake anything (an object that stops matching leaves the cache). It
    is given only the object's ``metadata.labels`` and ``metadata.ownerReferences``: it runs
    before an event is decoded (:meth:`.waking.Waking.wants`)."""
    on_demand: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Watched kind → the kinds that need it: the worker follows that kind only once it holds
    an object of one of them, and their keys wait for it to be loaded (:mod:`.worker`). The
    pool and claim workers follow Pods for OpenSandbox alone: without a Pool or BatchSandbox
    they take none of the Pod changes, six a claim, that they would turn away unread."""
    patience: Mapping[str, Callable[[Json, Json], float]] = field(default_factory=dict)
    """Kind → for a change of an object of that kind (before, after), the seconds it may wait
    for a pass already scheduled of a key it wakes: within them it joins that pass instead of
    waking one of its own (0: it wakes the key as usual). A starting Pod's progress, which only
    a held status would report, waits for the pass that ends its Sandbox's status window."""
    unmoved_by: Mapping[str, Callable[[Json, Json], bool]] = field(default_factory=dict)
    """Kind → whether a change of an object of that kind (before, after) moves nothing this
    worker's planners read: the cache takes it, and it wakes no key. The claim worker is not
    moved by a Sandbox whose conditions only took a new ``observedGeneration`` (its status
    copies the Sandbox's Ready without it): one pass in three of a warm claim planned nothing."""
    gauges: tuple[Gauge, ...] = ()
    """Gauges read by I/O at each scrape while the worker runs."""


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int = 16
    """Keys reconciled at the same time (each key by one task at a time)."""
    base_delay: float = 0.005
    max_delay: float = 300.0
    refused_backoff: float = 10.0
    """Seconds at least between passes that keep failing on a write the API server refuses for
    a reason retrying cannot fix (:func:`.queueing.schedule`)."""
    report_failures_after: float = 60.0
    """Seconds a key's passes fail in a row before its planner is told the failure persists
    (``Observed.failure_persists``; ``SANDBUS_REPORT_FAILURES_AFTER``)."""
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
