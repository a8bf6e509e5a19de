"""What the benchmarks share: the stack they run on, the baseline they are read against, and the
helpers every script needs.

Imported by the scripts next to it as a top-level module (``python bench/<script>.py`` puts this
folder on the path, and so does ``python -m bench``). The first helpers live where they were
first written (:mod:`sandbox_ready`, :mod:`sandbus_processes`) and are re-exported here, so a new
script imports everything it needs from this one module.

- :class:`Stack`: sandbus on its embedded default, each part its own process, as in production
  but on one machine: an embedded nats-server (:class:`~devtools.natsd.NatsServer`),
  ``sandbus devcluster`` with its latency model (``--write-latency-ms``) and enough simulated
  nodes for the Pods to come (110 a node), and ``sandbus run SERVICE`` for each service asked
  for; a temporary directory that goes with it, or stays with the logs when the run failed.
- :func:`write_cost`: the baseline of every latency figure, on the same cluster in the same run:
  rounds of sequential API writes, and the development cluster's own CPU seconds per write over
  them (it shares the machine's cores with everything it serves, so its CPU is part of what a
  write costs here).
- :func:`floor`: the least time the API writes on a critical path can take: ``writes x latency /
  concurrency`` for each stage of the path, plus every write's share of the cluster's CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import nats
from sandbox_ready import (
    POD_SPEC,
    cluster_url,
    cpu_seconds,
    is_ready,
    pod,
    progress,
    sequential_writes,
    to_ready,
)
from sandbus_processes import start_devcluster, start_sandbus, stop

from devtools.natsd import NatsServer
from services.runtime.bus import BusConfig, ensure_bus

__all__ = [
    "CLAIM_CONCURRENCY",
    "POD_SPEC",
    "SANDBOX_CONCURRENCY",
    "Stack",
    "WriteCost",
    "cluster_url",
    "cpu_seconds",
    "floor",
    "is_ready",
    "percentile",
    "pod",
    "progress",
    "resident_mib",
    "sequential_writes",
    "start_devcluster",
    "start_sandbus",
    "stop",
    "to_ready",
    "worker_concurrency",
    "write_cost",
]

SANDBOX_CONCURRENCY = 16
"""Keys the sandbox worker reconciles at once by default (services/runtime/reconcile/worker.py)."""
CLAIM_CONCURRENCY = 32
"""Keys the claim worker reconciles at once by default (services/claim/service.py)."""


def worker_concurrency(worker: str, default: int) -> int:
    """A worker's keys at once as the services of this run get it (``SANDBUS_<W>_CONCURRENCY``
    from this environment, which they inherit, else the service's default)."""
    text = os.environ.get(f"SANDBUS_{worker.upper()}_CONCURRENCY", "").strip()
    return int(float(text)) if text else default


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank, as upstream's stress tool reports them."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def resident_mib(pid: int) -> float:
    """Resident memory (VmRSS) of process ``pid`` in MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def floor(stages: Iterable[tuple[float, float]], latency: float, cpu_per_write: float) -> float:
    """Seconds the API writes of a critical path take at the least: for each stage ``(writes,
    concurrency)``, ``writes x latency / concurrency``, plus every write's CPU in the cluster
    (``cpu_per_write`` seconds each; the cluster is one process, so its CPU does not overlap)."""
    total = 0.0
    writes = 0.0
    for count, concurrency in stages:
        total += count * latency / max(concurrency, 1)
        writes += count
    return total + writes * cpu_per_write


@dataclass
class WriteCost:
    """Sequential API writes on the cluster of a run, and the cluster's CPU over them."""

    writes: int
    """Writes per round (a create and patches of one ConfigMap)."""
    rounds: list[float]
    """Seconds of each round."""
    cpu_per_write: float
    """The cluster process's CPU seconds over the rounds, per write."""
    idle_cpu_per_second: float
    """The cluster process's CPU seconds per second just before, while nothing was asked of it:
    its background share (kubelet, garbage collector), included in ``cpu_per_write``."""

    @property
    def p50(self) -> float:
        return statistics.median(self.rounds)

    @property
    def per_write(self) -> float:
        """Median seconds of one write as a client sees it."""
        return self.p50 / self.writes

    def to_json(self) -> dict[str, Any]:
        return {
            "writes_per_round": self.writes,
            "rounds": len(self.rounds),
            "round_p50_s": self.p50,
            "write_p50_s": self.per_write,
            "devcluster_cpu_per_write_s": self.cpu_per_write,
            "devcluster_idle_cpu_per_s": self.idle_cpu_per_second,
        }


async def write_cost(
    http: aiohttp.ClientSession, devcluster_pid: int, rounds: int, writes: int = 4
) -> WriteCost:
    """``rounds`` of ``writes`` sequential writes (:func:`sandbox_ready.sequential_writes`, once
    per cluster: its objects have fixed names), and the cluster's CPU seconds per write."""
    idle_from = cpu_seconds(devcluster_pid)
    idle_started = time.perf_counter()
    await asyncio.sleep(1.0)
    idle = (cpu_seconds(devcluster_pid) - idle_from) / (time.perf_counter() - idle_started)
    before = cpu_seconds(devcluster_pid)
    times = await sequential_writes(http, rounds, writes)
    spent = cpu_seconds(devcluster_pid) - before
    return WriteCost(writes, times, spent / (rounds * writes), idle)


class Stack:
    """sandbus on its embedded default, each part its own process (see the module doc); an
    async context manager. Inside it: ``url`` (the cluster's), ``kubeconfig``, ``js`` (a
    JetStream context of this process's own connection), ``processes`` and :meth:`pids`."""

    def __init__(
        self,
        prefix: str,
        *,
        services: Sequence[str] = (),
        write_latency_ms: float = 5.0,
        pod_ready_delay: float = 0.2,
        pods: int = 110,
        env: Mapping[str, str] | None = None,
        service_env: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.prefix = prefix
        self.services = tuple(services)
        self.write_latency_ms = write_latency_ms
        self.pod_ready_delay = pod_ready_delay
        self.pods = pods
        self.env = dict(env or {})
        """Environment of every service."""
        self.service_env = {name: dict(values) for name, values in (service_env or {}).items()}
        """Further environment of one service, by name."""
        self.workdir = Path(tempfile.mkdtemp(prefix=prefix))
        self.kubeconfig = self.workdir / "kubeconfig"
        self.natsd = NatsServer(store_dir=self.workdir / "nats")
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.url = ""
        self._nc: Any = None
        self.js: Any = None
        self.keep = False
        """Keep the directory even after a clean exit."""

    @property
    def nats_url(self) -> str:
        return self.natsd.url

    @property
    def run_args(self) -> list[str]:
        """What every ``sandbus run SERVICE`` of this stack is given."""
        return ["--nats", self.natsd.url, "--kubeconfig", str(self.kubeconfig)]

    async def __aenter__(self) -> Stack:
        try:
            await asyncio.to_thread(self.natsd.start)
            self._nc = await nats.connect(self.natsd.url)
            self.js = self._nc.jetstream()
            await ensure_bus(self.js, BusConfig())
            self.processes["devcluster"] = start_devcluster(
                self.kubeconfig,
                self.workdir / "devcluster.log",
                pod_ready_delay=self.pod_ready_delay,
                write_latency_ms=self.write_latency_ms,
                pods=self.pods,
            )
            self.url = await cluster_url(self.kubeconfig, self.processes["devcluster"])
            for service in self.services:
                self.start(service)
        except BaseException as error:
            await self.__aexit__(type(error), error, error.__traceback__)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()
            self._nc = None
        for process in reversed(self.processes.values()):
            await asyncio.to_thread(stop, process)
        await asyncio.to_thread(self.natsd.close)
        if exc_type is None and not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            progress(f"logs kept in {self.workdir}")

    def start(
        self, service: str, *, log: Path | None = None, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """``sandbus run SERVICE`` (again, after :meth:`kill`), its output into ``log``
        (default ``<workdir>/<service>.log``)."""
        process = start_sandbus(
            ["run", service, *self.run_args],
            log or self.workdir / f"{service}.log",
            env={**self.env, **self.service_env.get(service, {}), **(env or {})},
        )
        self.processes[service] = process
        return process

    def kill(self, service: str) -> None:
        """SIGKILL, as a node or the OOM killer does: nothing released, nothing flushed."""
        process = self.processes[service]
        process.send_signal(signal.SIGKILL)
        process.wait()

    def pids(self) -> dict[str, int]:
        """Every process of the stack by name: nats-server, devcluster, the services."""
        assert self.natsd.pid is not None
        return {"nats-server": self.natsd.pid, **{n: p.pid for n, p in self.processes.items()}}

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of each process (pass to :meth:`spent`)."""
        return {name: cpu_seconds(pid) for name, pid in self.pids().items()}

    def spent(self, before: Mapping[str, float]) -> dict[str, float]:
        """CPU seconds of each process since ``before`` (:meth:`cpu`)."""
        now = self.cpu()
        return {name: now[name] - before.get(name, 0.0) for name in now}

    async def quiet(
        self, *, cores: float = 0.1, interval: float = 0.5, limit: float = 60.0
    ) -> float:
        """Wait until the whole stack uses less than ``cores`` of CPU over ``interval`` seconds
        (a worker started again has finished resyncing its keys), at most ``limit`` seconds;
        the seconds waited."""
        started = time.monotonic()
        while time.monotonic() - started < limit:
            before = self.cpu()
            await asyncio.sleep(interval)
            if sum(self.spent(before).values()) < cores * interval:
                break
        return time.monotonic() - started

    def memory(self, names: Iterable[str] | None = None) -> dict[str, float]:
        """Resident MiB of each process named (default: all)."""
        pids = self.pids()
        return {name: resident_mib(pids[name]) for name in (names or pids)}
