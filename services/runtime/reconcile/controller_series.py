"""controller-runtime's and client-go's standard series, which agent-sandbox's dashboards and
alerts select by name, recorded for every reconciler of every worker beside sandbus's own.

agent-sandbox v1.0.2 runs on controller-runtime v0.25, whose controllers expose
``controller_runtime_reconcile_total{controller,result}`` (``success``, ``error``, ``requeue``,
``requeue_after``), ``controller_runtime_reconcile_errors_total``,
``controller_runtime_reconcile_panics_total``, ``controller_runtime_reconcile_time_seconds``
(a histogram), ``controller_runtime_active_workers`` and
``controller_runtime_max_concurrent_reconciles`` (label ``controller``), and whose work queue
(the priority queue, its default since v0.23) exposes client-go's ``workqueue_*`` family under
the labels ``name`` and ``controller`` (both the controller's name; ``workqueue_depth`` also
``priority``). Names, help texts, labels and bucket bounds here are upstream's
(``pkg/internal/controller/metrics``, ``pkg/metrics/workqueue.go``).

What a controller is here: one reconciler of one worker (a worker reconciles several kinds off
one queue; upstream has a controller, and a queue, per kind). Its ``controller`` label is
upstream's controller name where upstream has that controller (:data:`CONTROLLERS`:
controller-runtime names a controller after the lower-cased kind it is ``For``, and OpenSandbox
names its own), so a dashboard selecting ``controller="sandboxclaim"`` finds the claim worker's
claim reconciler; a reconciler upstream has no controller for is ``<worker>-<kind>``
(``pool-sandbox``: the pool worker's member reconciler).

How sandbus's passes map onto upstream's results (:func:`result_of`): a pass whose decision
carries an error is ``error`` (and counts in ``reconcile_errors_total``; a planner that raised
is also a panic, upstream's recovered panic), a pass that asks for nothing is ``success``, one
that comes back after a delay ``requeue_after``, and one that comes back at once or by backoff
without an error (the API showed stale state; a planner that writes on every pass slowed down)
``requeue``, upstream's rate-limited ``Requeue``.

The queue's series (:class:`MeteredQueue`) follow the priority queue's bookkeeping:
``workqueue_adds_total`` and ``workqueue_depth`` count a key when it starts waiting for a pass
(an add while it already waits counts nothing; an add while its pass runs counts, as the pass
to come), ``workqueue_queue_duration_seconds`` is from then to the pass taking it, and
``workqueue_work_duration_seconds`` from there to done; ``workqueue_depth{priority}`` is
``0`` for the front lane and ``-100`` (controller-runtime's ``LowPriority``, what it gives the
objects of an informer's initial list) for the background lane of the pass every key gets after
a load. ``workqueue_retries_total`` counts what the priority queue counts as a retry: every
re-add with a delay a pass asks for (after an error, a requeue or a requeue-after), that is
every pass whose result is not ``success``. ``workqueue_unfinished_work_seconds`` and
``workqueue_longest_running_processor_seconds`` are read at each scrape (upstream refreshes them
every 500 ms).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from api.workqueue import WorkQueue
from services.runtime.metrics import Metrics, MetricSpec

__all__ = [
    "CONTROLLERS",
    "CONTROLLER_SERIES",
    "ControllerSeries",
    "MeteredQueue",
    "QueueBook",
    "controller_name",
    "result_of",
]

K = TypeVar("K", bound=Hashable)

RECONCILE_TOTAL: Final = "controller_runtime_reconcile_total"
RECONCILE_ERRORS: Final = "controller_runtime_reconcile_errors_total"
RECONCILE_PANICS: Final = "controller_runtime_reconcile_panics_total"
RECONCILE_TIME: Final = "controller_runtime_reconcile_time_seconds"
ACTIVE_WORKERS: Final = "controller_runtime_active_workers"
MAX_CONCURRENT: Final = "controller_runtime_max_concurrent_reconciles"
QUEUE_DEPTH: Final = "workqueue_depth"
QUEUE_ADDS: Final = "workqueue_adds_total"
QUEUE_DURATION: Final = "workqueue_queue_duration_seconds"
WORK_DURATION: Final = "workqueue_work_duration_seconds"
QUEUE_RETRIES: Final = "workqueue_retries_total"
UNFINISHED_WORK: Final = "workqueue_unfinished_work_seconds"
LONGEST_RUNNING: Final = "workqueue_longest_running_processor_seconds"

SUCCESS: Final = "success"
ERROR: Final = "error"
REQUEUE: Final = "requeue"
REQUEUE_AFTER: Final = "requeue_after"
RESULTS: Final = (ERROR, REQUEUE_AFTER, REQUEUE, SUCCESS)

FRONT_PRIORITY: Final = "0"
BACKGROUND_PRIORITY: Final = "-100"
"""controller-runtime's ``handler.LowPriority``."""

CONTROLLERS: Final[Mapping[tuple[str, str], str]] = {
    # agent-sandbox: ctrl.NewControllerManagedBy(mgr).For(&Kind{}) names it the lower-cased kind.
    ("sandbox", "Sandbox"): "sandbox",
    ("sandbox", "SandboxTemplate"): "sandboxtemplate",
    ("claim", "SandboxClaim"): "sandboxclaim",
    ("pool", "SandboxWarmPool"): "sandboxwarmpool",
    # OpenSandbox's controllers: Named("batchsandbox"), Named("pool"), Named("sandboxsnapshot").
    ("claim", "BatchSandbox"): "batchsandbox",
    ("pool", "Pool"): "pool",
    ("snapshot", "SandboxSnapshot"): "sandboxsnapshot",
}
"""(worker, kind) → the name of the upstream controller that reconciler stands for."""


def controller_name(worker: str, kind: str) -> str:
    """The ``controller`` (and work queue ``name``) label of ``worker``'s reconciler of
    ``kind``: upstream's controller name, else ``<worker>-<kind, lower-cased>``."""
    return CONTROLLERS.get((worker, kind)) or f"{worker}-{kind.lower()}"


def _exponential(start: float, factor: float, count: int) -> tuple[float, ...]:
    """prometheus.ExponentialBuckets, computed the same way (so the bounds print the same)."""
    bounds = []
    for _ in range(count):
        bounds.append(start)
        start *= factor
    return tuple(bounds)


_QUEUE_BUCKETS: Final = _exponential(10e-9, 10, 12)
_RECONCILE_BUCKETS: Final = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7),
    *(0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15),
    *(20, 25, 30, 40, 50, 60),
)

CONTROLLER_SERIES: Final = (
    MetricSpec(
        RECONCILE_TOTAL,
        "counter",
        "Total number of reconciliations per controller",
        ("controller", "result"),
    ),
    MetricSpec(
        RECONCILE_ERRORS,
        "counter",
        "Total number of reconciliation errors per controller",
        ("controller",),
    ),
    MetricSpec(
        RECONCILE_PANICS,
        "counter",
        "Total number of reconciliation panics per controller",
        ("controller",),
    ),
    MetricSpec(
        RECONCILE_TIME,
        "histogram",
        "Length of time per reconciliation per controller",
        ("controller",),
        _RECONCILE_BUCKETS,
    ),
    MetricSpec(
        QUEUE_ADDS,
        "counter",
        "Total number of adds handled by workqueue",
        ("name", "controller"),
    ),
    MetricSpec(
        QUEUE_RETRIES,
        "counter",
        "Total number of retries handled by workqueue",
        ("name", "controller"),
    ),
    MetricSpec(
        QUEUE_DURATION,
        "histogram",
        "How long in seconds an item stays in workqueue before being requested",
        ("name", "controller"),
        _QUEUE_BUCKETS,
    ),
    MetricSpec(
        WORK_DURATION,
        "histogram",
        "How long in seconds processing an item from workqueue takes.",
        ("name", "controller"),
        _QUEUE_BUCKETS,
    ),
)


def result_of(*, error: bool, requeue_after: float | None, backed_off: bool) -> str:
    """controller-runtime's ``result`` of a pass: ``error`` (the decision has an error),
    ``success`` (nothing scheduled), ``requeue`` (again at once, or by backoff without an
    error) or ``requeue_after``."""
    if error:
        return ERROR
    if requeue_after is None:
        return SUCCESS
    if requeue_after <= 0 or backed_off:
        return REQUEUE
    return REQUEUE_AFTER


Sample = tuple[str, tuple[str, ...], float]
"""One gauge sample read at a scrape: its family, its label values, its value."""

_GAUGES: Final = {
    ACTIVE_WORKERS: ("Number of currently used workers per controller", ("controller",)),
    MAX_CONCURRENT: ("Maximum number of concurrent reconciles per controller", ("controller",)),
    QUEUE_DEPTH: (
        "Current depth of workqueue by workqueue and priority",
        ("name", "controller", "priority"),
    ),
    UNFINISHED_WORK: (
        "How many seconds of work has been done that is in progress and hasn't been observed "
        "by work_duration. Large values indicate stuck threads. One can deduce the number of "
        "stuck threads by observing the rate at which this increases.",
        ("name", "controller"),
    ),
    LONGEST_RUNNING: (
        "How many seconds has the longest running processor for workqueue been running.",
        ("name", "controller"),
    ),
}


class ControllerGauges(Collector):
    """The gauges of every worker of a process, read at each scrape: one family each, a
    sample per controller (one per registry: :meth:`Metrics.collector`)."""

    def __init__(self) -> None:
        self.readers: dict[str, Callable[[], list[Sample]]] = {}
        """By worker: a worker started again replaces its reader."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = {
            name: GaugeMetricFamily(name, help, labels=labels)
            for name, (help, labels) in _GAUGES.items()
        }
        for _, read in sorted(self.readers.items()):
            for name, labels, value in read():
                families[name].add_metric(list(labels), value)
        yield from families.values()


@dataclass
class QueueBook(Generic[K]):
    """What the work queue's series need of its keys: since when each waits (and in which
    lane), since when each is being processed; a key's controller is ``name_of(key)``."""

    metrics: Metrics
    name_of: Callable[[K], str]
    clock: Callable[[], float] = time.monotonic
    waiting: dict[K, tuple[float, bool]] = field(default_factory=dict)
    """Key → (since, in the background lane)."""
    running: dict[K, float] = field(default_factory=dict)
    """Key → since."""
    _labels: dict[str, dict[str, str]] = field(default_factory=dict)

    def labels(self, controller: str) -> dict[str, str]:
        labels = self._labels.get(controller)
        if labels is None:
            labels = self._labels[controller] = {"name": controller, "controller": controller}
        return labels

    def added(self, key: K, background: bool) -> None:
        """An add of ``key``: counted when it starts waiting; a key that waits already only
        moves to the front lane when asked for without ``background``."""
        known = self.waiting.get(key)
        if known is not None:
            if known[1] and not background:
                self.waiting[key] = (known[0], False)
            return
        self.waiting[key] = (self.clock(), background)
        self.metrics.record(QUEUE_ADDS, self.labels(self.name_of(key)))

    def taken(self, key: K) -> None:
        now = self.clock()
        since = self.waiting.pop(key, None)
        if since is not None:
            self.metrics.record(QUEUE_DURATION, self.labels(self.name_of(key)), now - since[0])
        self.running[key] = now

    def done(self, key: K) -> None:
        since = self.running.pop(key, None)
        if since is not None:
            labels = self.labels(self.name_of(key))
            self.metrics.record(WORK_DURATION, labels, self.clock() - since)

    def samples(self, controllers: list[str]) -> list[Sample]:
        """``workqueue_depth`` by priority and the two gauges of work in progress, for each of
        ``controllers`` (zeros for one with nothing waiting or running)."""
        now = self.clock()
        depth = {(c, p): 0 for c in controllers for p in (FRONT_PRIORITY, BACKGROUND_PRIORITY)}
        for key, (_, background) in self.waiting.items():
            lane = BACKGROUND_PRIORITY if background else FRONT_PRIORITY
            depth[self.name_of(key), lane] = depth.get((self.name_of(key), lane), 0) + 1
        unfinished = dict.fromkeys(controllers, 0.0)
        longest = dict.fromkeys(controllers, 0.0)
        for key, since in self.running.items():
            controller, age = self.name_of(key), now - since
            unfinished[controller] = unfinished.get(controller, 0.0) + age
            longest[controller] = max(longest.get(controller, 0.0), age)
        samples: list[Sample] = [
            (QUEUE_DEPTH, (c, c, p), float(n)) for (c, p), n in sorted(depth.items())
        ]
        samples += [(UNFINISHED_WORK, (c, c), v) for c, v in sorted(unfinished.items())]
        samples += [(LONGEST_RUNNING, (c, c), v) for c, v in sorted(longest.items())]
        return samples


class MeteredQueue(WorkQueue[K]):
    """The work queue, keeping its :class:`QueueBook` for client-go's ``workqueue_*``
    series; the queue itself (:mod:`api.workqueue`) stays free of metrics, as the development
    cluster's controllers share it."""

    def __init__(self, book: QueueBook[K], *, base_delay: float, max_delay: float) -> None:
        super().__init__(base_delay=base_delay, max_delay=max_delay)
        self.book = book
        self._stopped = False

    def add(self, key: K, trigger: str | None = None, *, background: bool = False) -> None:
        if not self._stopped:
            self.book.added(key, background)
        super().add(key, trigger, background=background)

    async def get(self) -> tuple[K, tuple[str, ...]]:
        key, triggers = await super().get()
        self.book.taken(key)
        return key, triggers

    def done(self, key: K) -> None:
        self.book.done(key)
        super().done(key)

    def shutdown(self) -> None:
        self._stopped = True
        super().shutdown()


class ControllerSeries(Generic[K]):
    """The controller-runtime series of one worker's reconcilers, and the book of its queue.

    ``kind_of`` gives a key's kind; each kind is a controller (:func:`controller_name`)."""

    def __init__(
        self,
        metrics: Metrics,
        worker: str,
        kinds: list[str],
        *,
        concurrency: int,
        kind_of: Callable[[K], str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        metrics.declare(CONTROLLER_SERIES)
        self.metrics = metrics
        self.worker = worker
        self.concurrency = concurrency
        self.controllers = {kind: controller_name(worker, kind) for kind in kinds}
        self.active = dict.fromkeys(self.controllers.values(), 0)
        self.book: QueueBook[K] = QueueBook(
            metrics, lambda key: self.controller(kind_of(key)), clock
        )
        self._labels = {c: {"controller": c} for c in self.controllers.values()}
        self._results = {
            (c, result): {"controller": c, "result": result}
            for c in self.controllers.values()
            for result in RESULTS
        }

    def controller(self, kind: str) -> str:
        found = self.controllers.get(kind)
        return found if found is not None else controller_name(self.worker, kind)

    def start(self) -> None:
        """The worker runs: its controllers' series appear, at zero, as upstream's do when a
        controller starts, and its gauges are read at each scrape until :meth:`stop`."""
        for controller, labels in self._labels.items():
            for result in RESULTS:
                self.metrics.record(RECONCILE_TOTAL, self._results[controller, result], 0)
            self.metrics.record(RECONCILE_ERRORS, labels, 0)
            self.metrics.record(RECONCILE_PANICS, labels, 0)
            queue = self.book.labels(controller)
            self.metrics.record(QUEUE_ADDS, queue, 0)
            self.metrics.record(QUEUE_RETRIES, queue, 0)
            self.metrics.ensure(RECONCILE_TIME, labels)
            self.metrics.ensure(QUEUE_DURATION, queue)
            self.metrics.ensure(WORK_DURATION, queue)
        self.metrics.collector(ControllerGauges).readers[self.worker] = self.samples

    def stop(self) -> None:
        gauges = self.metrics.collector(ControllerGauges)
        if gauges.readers.get(self.worker) == self.samples:
            del gauges.readers[self.worker]

    def samples(self) -> list[Sample]:
        controllers = sorted(self.active)
        samples: list[Sample] = [(ACTIVE_WORKERS, (c,), float(self.active[c])) for c in controllers]
        samples += [(MAX_CONCURRENT, (c,), float(self.concurrency)) for c in controllers]
        return samples + self.book.samples(controllers)

    def begin(self, kind: str) -> None:
        """A pass of a key of ``kind`` starts (an active worker)."""
        controller = self.controller(kind)
        self.active[controller] = self.active.get(controller, 0) + 1

    def end(self, kind: str) -> None:
        controller = self.controller(kind)
        self.active[controller] = self.active.get(controller, 1) - 1

    def passed(self, kind: str, result: str, seconds: float, *, panicked: bool = False) -> None:
        """A pass of a key of ``kind`` ended with ``result`` after ``seconds``."""
        controller = self.controller(kind)
        labels = self._labels.get(controller) or {"controller": controller}
        results = self._results.get((controller, result)) or {**labels, "result": result}
        self.metrics.record(RECONCILE_TOTAL, results)
        self.metrics.record(RECONCILE_TIME, labels, seconds)
        if result == ERROR:
            self.metrics.record(RECONCILE_ERRORS, labels)
        if panicked:
            self.metrics.record(RECONCILE_PANICS, labels)
        if result != SUCCESS:
            self.metrics.record(QUEUE_RETRIES, self.book.labels(controller))
