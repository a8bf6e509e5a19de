"""The decisions of ``sandbus demo``, without I/O (functional core; :mod:`services.cli.demo` is
the shell): the objects it applies, when a claim counts as Ready, how its latencies are summed
up, and the plain text it prints where there is no terminal.

Names. Everything the demo applies is called ``sandbus-demo`` (the claims ``sandbus-demo-NNN``)
and carries :data:`MANAGED_BY`, so that it clashes with nothing a person made, a leftover of
``--keep`` is found by a label selector, and cleaning up deletes nothing else.

The template's Pod runs the ``pause`` image: the smallest container that stays up on a real
cluster (on the development cluster every image is simulated), because the demo measures how
fast a running sandbox is handed out, not what runs in it.

Latency. A claim's latency is from its create request to the watch event that shows it Ready
with ``status.sandbox.name`` set (what an SDK waits for, as ``bench/claim_latency.py``
measures it). Percentiles are nearest-rank, as upstream's stress tool reports them, and are
split by the launch type of the Sandbox that served the claim (its label
``agents.x-k8s.io/launch-type``: ``warm`` when adopted from the pool, ``cold`` when made for the
claim), because a warm pool's whole point is the difference between the two.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api.keys import LABEL_LAUNCH_TYPE, LAUNCH_TYPE_COLD, LAUNCH_TYPE_WARM
from api.objects import Json, is_ready

__all__ = [
    "DEMO_NAME",
    "HEADER",
    "MANAGED_BY",
    "PODS_PER_NODE",
    "Row",
    "Sample",
    "claim",
    "claim_name",
    "claim_ready",
    "claimed_sandbox",
    "latency_rows",
    "launch_type",
    "nodes_needed",
    "percentile",
    "plot_series",
    "progress_line",
    "row_cells",
    "table_lines",
    "template",
    "warm_pool",
]


DEMO_NAME = "sandbus-demo"
MANAGED_BY = ("app.kubernetes.io/managed-by", "sandbus-demo")
_EXTENSIONS = "extensions.agents.x-k8s.io/v1beta1"
_POD_SPEC: Json = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}
PODS_PER_NODE = 110
"""Pods one simulated node of the development cluster takes (``sandbus devcluster --nodes``)."""

HEADER = ("launch", "claims", "p50 ms", "p90 ms", "p99 ms", "max ms")
ALL = "all"
UNKNOWN = "unknown"
"""The launch type of a claim whose Sandbox had no label (or was gone when it was read)."""


# --- the objects -------------------------------------------------------------------------------


def _metadata(name: str, namespace: str) -> Json:
    key, value = MANAGED_BY
    return {"name": name, "namespace": namespace, "labels": {key: value}}


def template(namespace: str) -> Json:
    return {
        "apiVersion": _EXTENSIONS,
        "kind": "SandboxTemplate",
        "metadata": _metadata(DEMO_NAME, namespace),
        "spec": {"podTemplate": {"spec": _POD_SPEC}},
    }


def warm_pool(namespace: str, replicas: int) -> Json:
    return {
        "apiVersion": _EXTENSIONS,
        "kind": "SandboxWarmPool",
        "metadata": _metadata(DEMO_NAME, namespace),
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": DEMO_NAME}},
    }


def claim_name(index: int, total: int) -> str:
    """``sandbus-demo-007``: zero-padded to the width of ``total``, so names sort in order."""
    return f"{DEMO_NAME}-{index:0{max(3, len(str(total)))}d}"


def claim(namespace: str, name: str) -> Json:
    return {
        "apiVersion": _EXTENSIONS,
        "kind": "SandboxClaim",
        "metadata": _metadata(name, namespace),
        "spec": {"warmPoolRef": {"name": DEMO_NAME}},
    }


def nodes_needed(pool: int, claims: int) -> int:
    """Simulated nodes for every Pod the demo can have at once: the pool refills behind the
    claims, so at the end there are a full pool and one Sandbox per claim."""
    return max(1, math.ceil((pool + claims) / PODS_PER_NODE))


# --- readiness ---------------------------------------------------------------------------------


def claimed_sandbox(obj: Mapping[str, Any]) -> str | None:
    """The name of the Sandbox bound to the claim ``obj``, once there is one."""
    name = ((obj.get("status") or {}).get("sandbox") or {}).get("name")
    return str(name) if name else None


def claim_ready(obj: Mapping[str, Any]) -> bool:
    """Ready as a client sees it: the claim's Ready condition True and its Sandbox named."""
    return is_ready(obj) and claimed_sandbox(obj) is not None


def launch_type(sandbox: Mapping[str, Any] | None) -> str:
    labels = ((sandbox or {}).get("metadata") or {}).get("labels") or {}
    return str(labels.get(LABEL_LAUNCH_TYPE) or UNKNOWN)


# --- the summary -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One claim's latency: ``index`` is its place in creation order."""

    index: int
    claim: str
    seconds: float
    launch: str


@dataclass(frozen=True)
class Row:
    label: str
    count: int
    p50: float
    p90: float
    p99: float
    max: float


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank: the smallest value with at least ``q`` percent of them at or below it."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _row(label: str, values: Sequence[float]) -> Row:
    return Row(
        label,
        len(values),
        percentile(values, 50),
        percentile(values, 90),
        percentile(values, 99),
        max(values),
    )


def latency_rows(samples: Iterable[Sample]) -> list[Row]:
    """One row per launch type (warm, cold, then any other), then one for all of them; a type
    no claim had has no row, so the counts of the rows above ``all`` add up to it."""
    by_launch: dict[str, list[float]] = {}
    every: list[float] = []
    for sample in samples:
        by_launch.setdefault(sample.launch, []).append(sample.seconds)
        every.append(sample.seconds)
    if not every:
        return []
    order = [
        LAUNCH_TYPE_WARM,
        LAUNCH_TYPE_COLD,
        *sorted(by_launch.keys() - {LAUNCH_TYPE_WARM, LAUNCH_TYPE_COLD}),
    ]
    rows = [_row(launch, by_launch[launch]) for launch in order if launch in by_launch]
    return [*rows, _row(ALL, every)]


def row_cells(row: Row) -> tuple[str, ...]:
    """A row as the table's cells: milliseconds with one decimal."""
    figures = (row.p50, row.p90, row.p99, row.max)
    return (row.label, str(row.count), *(f"{seconds * 1000:.1f}" for seconds in figures))


def table_lines(rows: Sequence[Row]) -> list[str]:
    """The table as plain text: the label left-aligned, the figures right-aligned."""
    cells = [HEADER, *(row_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(HEADER))]

    def line(values: Sequence[str]) -> str:
        first, *rest = values
        parts = [
            first.ljust(widths[0]),
            *(v.rjust(w) for v, w in zip(rest, widths[1:], strict=True)),
        ]
        return "  ".join(parts).rstrip()

    return [line(values) for values in cells]


def plot_series(samples: Iterable[Sample]) -> dict[str, tuple[list[int], list[float]]]:
    """Per launch type, the claims' places in creation order and their latencies in ms."""
    series: dict[str, tuple[list[int], list[float]]] = {}
    for sample in sorted(samples, key=lambda s: s.index):
        xs, ys = series.setdefault(sample.launch, ([], []))
        xs.append(sample.index)
        ys.append(sample.seconds * 1000)
    return series


def progress_line(what: str, done: int, total: int, elapsed: float, note: str = "") -> str:
    """What a progress bar shows, as one line for a log: ``warming the pool  7/10  1.2 s``."""
    tail = f"  ({note})" if note else ""
    return f"{what}  {done}/{total}  {elapsed:.1f} s{tail}"
