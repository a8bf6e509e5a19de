"""A benchmark's figures as rows (result, floor, the published figure it answers, the target and
whether it was met), as the JSON a run writes and as the Markdown tables it prints; and the
machine, date and commit a run is from.

No third-party import: ``python -m bench --help`` and ``python -m bench report`` use it without
starting anything.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RATES = ("changes/s", "/s")
"""Units of a rate: higher is better, and the floor column holds the ceiling."""


@dataclass
class Row:
    """One figure of a run."""

    figure: str
    value: float | None
    unit: str
    """``s``, ``ms``, ``MiB``, ``changes/s``, ``x`` (a ratio) or ``count``."""
    floor: float | None = None
    """The least the figure can be (a time) or the most (a rate: its ceiling), in ``unit``."""
    floor_note: str = ""
    """How the floor is made up."""
    published: str = ""
    """The published figure this one answers, with who published it."""
    target: str = ""
    met: bool | None = None
    """None: no target, or not at this run's write latency."""

    @property
    def over_floor(self) -> float | None:
        if self.value is None or not self.floor:
            return None
        return self.value / self.floor


@dataclass
class Run:
    """A scenario at one write latency."""

    write_latency_ms: float
    rows: list[Row] = field(default_factory=list)
    baseline: dict[str, Any] = field(default_factory=dict)
    """The same run's baseline (sequential writes, the cluster's CPU per write, ...)."""
    details: dict[str, Any] = field(default_factory=dict)
    """Everything else worth keeping: CPU seconds per process, launch types, latencies."""


def machine() -> dict[str, Any]:
    """This machine, interpreter and checkout, for the record of a run."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = 0.0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) / 1024 / 1024
    root = Path(__file__).resolve().parent.parent
    commit = _git(root, "rev-parse", "--short", "HEAD")
    dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": f"{commit}{' (with local changes)' if dirty else ''}" if commit else "unknown",
        "cpu": model or platform.processor() or "unknown",
        "cpus": os.cpu_count(),
        "memory_gib": round(memory, 1),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "load_average": list(os.getloadavg()),
    }


def _git(root: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def fmt(value: float | None, unit: str) -> str:
    """A figure as the tables show it."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "s":
        return f"{value:.2f} s" if value >= 10 else f"{value:.3f} s"
    if unit == "ms":
        return f"{value:,.1f} ms"
    if unit == "MiB":
        return f"{value:,.0f} MiB"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "count":
        return f"{value:,.0f}"
    if unit in RATES:
        return f"{value:,.0f} {unit}"
    return f"{value:g} {unit}"


def met_text(met: bool | None) -> str:
    return {True: "yes", False: "**no**", None: ""}[met]


def run_table(scenario: str, runs: Iterable[Run]) -> str:
    """The Markdown table of a scenario's runs, one row per figure."""
    lines = [
        "| write latency | figure | result | floor (a rate: ceiling) | x floor "
        "| published figure it answers | target | met? |",
        "|---:|---|---:|---:|---:|---|---|---|",
    ]
    for run in runs:
        for row in run.rows:
            over = row.over_floor
            lines.append(
                f"| {run.write_latency_ms:g} ms | {row.figure} | {fmt(row.value, row.unit)} "
                f"| {fmt(row.floor, row.unit) if row.floor is not None else '-'} "
                f"| {f'{over:.2f}' if over is not None else '-'} | {row.published or '-'} "
                f"| {row.target or '-'} | {met_text(row.met)} |"
            )
    return "\n".join(lines)


def floor_notes(runs: Iterable[Run]) -> list[str]:
    """How each distinct floor of a scenario's rows is made up, with the figures it is of."""
    seen: dict[tuple[float, str], list[str]] = {}
    for run in runs:
        for row in run.rows:
            if row.floor_note:
                seen.setdefault((run.write_latency_ms, row.floor_note), []).append(row.figure)
    return [
        f"{latency:g} ms, {'; '.join(figures)}: {note}" for (latency, note), figures in seen.items()
    ]


def document(
    scenario: str, summary: str, parameters: Mapping[str, Any], runs: Iterable[Run]
) -> dict[str, Any]:
    """The JSON a scenario's run writes."""
    return {
        "scenario": scenario,
        "summary": summary,
        "machine": machine(),
        "parameters": dict(parameters),
        "runs": [asdict(run) for run in runs],
    }


def runs_of(data: Mapping[str, Any]) -> list[Run]:
    """The runs of a document read back from JSON."""
    return [
        Run(
            write_latency_ms=run["write_latency_ms"],
            rows=[Row(**row) for row in run.get("rows", ())],
            baseline=dict(run.get("baseline") or {}),
            details=dict(run.get("details") or {}),
        )
        for run in data.get("runs", ())
    ]
