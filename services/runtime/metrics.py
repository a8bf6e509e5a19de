"""Prometheus metrics of a service: what a worker declares, how a plan records one, and the
``/metrics`` endpoint.

A worker declares its metrics as :class:`MetricSpec` values (the claim worker declares
agent-sandbox's, so existing dashboards and alerts keep working) and its planners record
them with :class:`~services.runtime.reconcile.actions.Record` actions. A planner stays pure, and
a ``Record`` placed after the writes it reports runs only when they are committed: the shell
stops a plan at its first failed or conflicting write, which is upstream's rule of counting an
adoption or a first Ready only after the status write that says so was accepted.

Every worker also counts its reconcile passes, by kind and outcome, and times them
(:data:`RUNTIME_METRICS`), and records controller-runtime's and client-go's standard series
under upstream's names, which agent-sandbox's dashboards select
(:mod:`services.runtime.reconcile.controller_series`). Every registry carries
``agent_sandbox_build_info`` (:class:`BuildInfo`), so each service's ``/metrics`` says which
sandbus it is.

Three ways a value gets into the registry, by where it lives: a declared counter or histogram
that a ``Record`` (or the worker) adds to; a value a service keeps itself, read at each scrape
(:meth:`Metrics.read_from`: the watcher's publishing counters, a worker's consumer lag); and a
gauge that takes I/O to read (:meth:`Metrics.sample_from`: the depth of each warm queue, from
the warm stream's info), which the endpoint samples before each scrape, bounded in time
(:func:`services.runtime.endpoint.sample`; this module stays free of asyncio, since the pure
planners import its vocabulary), so that it costs nothing while nobody scrapes and is never
older than the scrape. A sample that fails or times out leaves the gauge without samples until
one succeeds: an absent series says "unknown", where a stale one would lie.

prometheus-client, not OpenTelemetry's Prometheus exporter: agent-sandbox's dashboards select
series by exact name and bucket bounds (``agent_sandbox_claim_startup_latency_ms_bucket``), and
the exporter derives names from an instrument's name and unit, so it would not reproduce them.
A service records into its process's registry (:func:`process_metrics`); a worker made
without one gets its own (:class:`Metrics`), so tests can run several workers in one process.
``SANDBUS_METRICS_ADDRESS`` (``host:port``, ``:8080`` for every interface) turns the endpoint
on (:mod:`services.runtime.endpoint`).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = [
    "BUILD_INFO",
    "RECONCILES",
    "RECONCILE_SECONDS",
    "BuildInfo",
    "MetricSpec",
    "Metrics",
    "MetricsError",
    "SampledGauge",
    "build_labels",
    "metrics_address",
    "process_metrics",
]

METRICS_ADDRESS_ENV: Final = "SANDBUS_METRICS_ADDRESS"
BUILD_INFO: Final = "agent_sandbox_build_info"
GIT_COMMIT_ENV: Final = "SANDBUS_GIT_COMMIT"
BUILD_DATE_ENV: Final = "SANDBUS_BUILD_DATE"

C = TypeVar("C", bound=Collector)

Sampler = Callable[[], Awaitable[Mapping[tuple[str, ...], float]]]
"""Reads a gauge's samples: label values (in the gauge's label order) → value."""

# The `_created` series doubles every counter and histogram and no dashboard reads it.
prometheus_client.disable_created_metrics()


class MetricsError(ValueError):
    """A metric recorded under a name or labels its worker did not declare."""


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: Literal["counter", "histogram"]
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    """A histogram's upper bounds (``+Inf`` is added)."""
    per_second: float = 1.0
    """The metric's units in a second (1000 for milliseconds): how a ``Record`` with
    ``since`` turns the time passed into a value."""


RECONCILES: Final = "sandbus_reconcile_total"
RECONCILE_SECONDS: Final = "sandbus_reconcile_duration_seconds"

RUNTIME_METRICS: Final = (
    MetricSpec(
        RECONCILES,
        "counter",
        "Reconcile passes by worker, kind and result (ok, error).",
        ("worker", "kind", "result"),
    ),
    MetricSpec(
        RECONCILE_SECONDS,
        "histogram",
        "Seconds a reconcile pass took, from observe to its decision recorded.",
        ("worker", "kind"),
        (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    ),
)


class Metrics:
    """The metrics of one process, in their own registry."""

    def __init__(self, specs: Iterable[MetricSpec] = ()) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._specs: dict[str, MetricSpec] = {}
        self._metrics: dict[str, Counter | Histogram] = {}
        self._children: dict[tuple[Any, ...], Counter | Histogram] = {}
        self._readers: dict[tuple[str, str], _Readers] = {}
        self._sampled: dict[str, SampledGauge] = {}
        self._collectors: dict[type[Collector], Collector] = {}
        self.registry.register(BuildInfo())
        self.declare(RUNTIME_METRICS)
        self.declare(specs)

    def declare(self, specs: Iterable[MetricSpec]) -> None:
        """Add metrics; declaring one again with the same spec is a no-op."""
        for spec in specs:
            known = self._specs.get(spec.name)
            if known is not None:
                if known != spec:
                    raise MetricsError(f"metric {spec.name} declared twice, differently")
                continue
            metric: Counter | Histogram
            if spec.kind == "counter":
                metric = Counter(spec.name, spec.help, spec.labels, registry=self.registry)
            else:
                metric = Histogram(
                    spec.name,
                    spec.help,
                    spec.labels,
                    registry=self.registry,
                    buckets=(*spec.buckets, float("inf")),
                )
            self._specs[spec.name] = spec
            self._metrics[spec.name] = metric

    def spec(self, name: str) -> MetricSpec:
        spec = self._specs.get(name)
        if spec is None:
            raise MetricsError(f"no metric {name} is declared")
        return spec

    def _child(self, name: str, labels: Mapping[str, str]) -> Counter | Histogram:
        # Every pass records a few metrics, and prometheus_client's labels() checks, sorts and
        # locks on every call: the child found once is kept, by the labels' values as given.
        found = (name, *labels.items())
        child = self._children.get(found)
        if child is None:
            spec = self.spec(name)
            if set(labels) != set(spec.labels):
                raise MetricsError(
                    f"metric {name} takes the labels {sorted(spec.labels)}, not {sorted(labels)}"
                )
            child = self._children[found] = self._metrics[name].labels(**labels)
        return child

    def ensure(self, name: str, labels: Mapping[str, str]) -> None:
        """Show the series of ``name`` under ``labels`` before anything is recorded (a
        histogram at zero), as upstream's controllers do when they start."""
        self._child(name, labels)

    def record(self, name: str, labels: Mapping[str, str], value: float = 1.0) -> None:
        """Count ``value`` on a counter, or observe it on a histogram."""
        child = self._child(name, labels)
        if isinstance(child, Counter):
            if value < 0:
                raise MetricsError(f"counter {name} cannot go down ({value})")
            child.inc(value)
        else:
            child.observe(value)

    def read_from(
        self,
        name: str,
        help: str,
        read: Callable[[], Mapping[str, float]],
        *,
        labels: Mapping[str, str] | None = None,
        kind: Literal["counter", "gauge"] = "counter",
    ) -> None:
        """Values a service keeps itself (its own statistics), read at every scrape: ``read``
        gives each value by the name it adds to ``name`` (``{"published": 3}`` under
        ``sandbus_watcher`` is the counter ``sandbus_watcher_published_total``), under
        ``labels``. Several services may read into one name with different labels (the
        workers of ``sandbus up``); reading again under the same labels replaces the reader
        (a service started again)."""
        collector = self._readers.get((name, kind))
        if collector is None:
            collector = _Readers(name, help, kind, tuple(sorted(labels or {})))
            self.registry.register(collector)
            self._readers[(name, kind)] = collector
        collector.readers[tuple(v for _, v in sorted((labels or {}).items()))] = read

    def sample_from(self, name: str, help: str, labels: tuple[str, ...], sample: Sampler) -> None:
        """A gauge whose samples ``sample`` reads by I/O, before each scrape (the endpoint asks).
        Sampling again under the same name replaces the sampler (a worker started again)."""
        gauge = self._sampled.get(name)
        if gauge is None:
            gauge = SampledGauge(name, help, labels)
            self.registry.register(gauge)
            self._sampled[name] = gauge
        elif gauge.label_names != labels:
            raise MetricsError(f"gauge {name} sampled with the labels {sorted(gauge.label_names)}")
        gauge.sampler = sample
        gauge.last = {}

    def stop_sampling(self, name: str, sample: Sampler) -> None:
        """Stop sampling ``name`` with ``sample`` (if it still is the sampler): its series go
        (a standby does not report what only the leader reads)."""
        gauge = self._sampled.get(name)
        if gauge is not None and gauge.sampler is sample:
            gauge.sampler = None
            gauge.last = {}

    def collector(self, make: type[C]) -> C:
        """The registry's one collector of the type ``make``, made and registered on first ask
        (the gauges every worker of a process reads into, e.g.
        :mod:`services.runtime.reconcile.controller_series`)."""
        found = self._collectors.get(make)
        if found is None:
            found = self._collectors[make] = make()
            self.registry.register(found)
        assert isinstance(found, make)
        return found

    def sampled(self) -> list[SampledGauge]:
        """The gauges read by I/O that have a sampler now (what a scrape samples)."""
        return [gauge for gauge in self._sampled.values() if gauge.sampler is not None]

    def value(self, name: str, labels: Mapping[str, str], suffix: str = "") -> float | None:
        """One sample as the endpoint would show it (``suffix``: ``_total``, ``_count``, ...)."""
        return self.registry.get_sample_value(name.removesuffix("_total") + suffix, dict(labels))

    def exposition(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)


class _Readers(Collector):
    """One metric family per value name, a sample per reader."""

    def __init__(
        self, name: str, help: str, kind: Literal["counter", "gauge"], label_names: tuple[str, ...]
    ) -> None:
        self.name = name
        self.help = help
        self.kind = kind
        self.label_names = label_names
        self.readers: dict[tuple[str, ...], Callable[[], Mapping[str, float]]] = {}

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        family_type = CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily
        for labels, read in sorted(self.readers.items()):
            for value_name, value in sorted(read().items()):
                family = families.get(value_name)
                if family is None:
                    family = family_type(
                        f"{self.name}_{value_name}", self.help, labels=self.label_names
                    )
                    families[value_name] = family
                family.add_metric(list(labels), value)
        yield from families.values()


class SampledGauge(Collector):
    """One gauge family read by I/O: its samples are those its sampler gave last."""

    def __init__(self, name: str, help: str, label_names: tuple[str, ...]) -> None:
        self.name = name
        self.help = help
        self.label_names = label_names
        self.sampler: Sampler | None = None
        self.last: Mapping[tuple[str, ...], float] = {}

    def keep(self, sampler: Sampler, samples: Mapping[tuple[str, ...], float]) -> None:
        """What ``sampler`` read ({} when it failed), unless it was stopped or replaced while
        it read."""
        if self.sampler is sampler:
            self.last = dict(samples)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.help, labels=self.label_names)
        for labels, value in sorted(self.last.items()):
            family.add_metric(list(labels), value)
        yield family


_BUILD_INFO_HELP: Final = (
    "Agent sandbox controller build metadata exposed as labels with a constant value of 1."
)
_ARCHITECTURES: Final = {"x86_64": "amd64", "aarch64": "arm64"}


def build_labels(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The labels of ``agent_sandbox_build_info``: upstream's six, with sandbus's values.

    ``git_version`` is the installed sandbus package's version (``v0.1.0``), ``git_commit``
    and ``build_date`` what an image build sets in ``SANDBUS_GIT_COMMIT`` and
    ``SANDBUS_BUILD_DATE`` ("unknown" otherwise, as upstream's unset build flags), and, as
    sandbus is not Go, ``go_version`` names the Python that runs it (``python3.11.9``) and
    ``compiler`` its implementation (``cpython``); ``platform`` is upstream's ``os/arch``."""
    try:
        version = "v" + importlib.metadata.version("sandbus")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    machine = platform.machine().lower()
    return {
        "git_version": version,
        "git_commit": environ.get(GIT_COMMIT_ENV, "").strip() or "unknown",
        "build_date": environ.get(BUILD_DATE_ENV, "").strip() or "unknown",
        "go_version": f"python{platform.python_version()}",
        "compiler": sys.implementation.name,
        "platform": f"{sys.platform}/{_ARCHITECTURES.get(machine, machine)}",
    }


class BuildInfo(Collector):
    """``agent_sandbox_build_info``: a constant 1 whose labels say which build this is, as
    upstream's controller exposes it (its dashboards show the version from it)."""

    def __init__(self, labels: Mapping[str, str] | None = None) -> None:
        self.labels = dict(build_labels() if labels is None else labels)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            BUILD_INFO,
            _BUILD_INFO_HELP,
            labels=list(self.labels),
        )
        family.add_metric(list(self.labels.values()), 1.0)
        yield family


_PROCESS: list[Metrics] = []


def process_metrics() -> Metrics:
    """The metrics every service of this process records into and its endpoint serves
    (``sandbus up --one-process`` runs every worker in one process, behind one ``/metrics``)."""
    if not _PROCESS:
        _PROCESS.append(Metrics())
    return _PROCESS[0]


def metrics_address(environ: Mapping[str, str] = os.environ) -> tuple[str, int] | None:
    """``SANDBUS_METRICS_ADDRESS`` as (host, port); None when unset (no endpoint)."""
    text = environ.get(METRICS_ADDRESS_ENV, "").strip()
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise MetricsError(f"{METRICS_ADDRESS_ENV}={text!r} is not host:port (e.g. :8080)")
    return host.strip("[]") or "0.0.0.0", int(port)
