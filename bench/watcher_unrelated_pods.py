"""Benchmark: the watcher's CPU and memory while sandbox Pods change, with and without 20,000
unrelated Pods in the cluster (issue "Workers at scale": within 10 % of each other).

Run on purpose (it is not a test)::

    .venv/bin/python bench/watcher_unrelated_pods.py [--pods 500] [--unrelated 20000] [--churn 2000]

Each run starts from nothing: an embedded nats-server, ``sandbus devcluster`` (its simulated
kubelet runs the sandbox Pods; no write latency) and ``sandbus run watcher``, each its own
process. The two runs differ in one thing:

- **without**: the cluster holds only what the workload creates;
- **with unrelated Pods**: before the watcher starts, ``--unrelated`` Pods that are not ours (no
  label of sandbus) are created in ``--namespaces`` namespaces of their own, bound to nodes the
  simulated kubelet does not run (``spec.nodeName``), so that the kubelet leaves them alone and
  the devcluster only stores and serves them. During the workload, ``--churn`` writes change
  them (a patch of an annotation on a random one, and every tenth a delete and a re-create).

The workload, the same in both runs: ``--pods`` Pods labelled as a Sandbox's
(``agents.x-k8s.io/sandbox-name-hash``) are created in ``default``, 16 requests at a time, and
run by the kubelet until Ready; then each is patched once, then each is deleted; it ends when the
event log holds the deletion of every one of them (the watcher published all of it).

Measured from ``/proc`` for the watcher process: CPU seconds (user + system) from its start until
it logs that it is in sync with the cluster (the first list of every selection), and during the
workload; resident memory (VmRSS) at the end and its peak (VmHWM). The last row divides the run
with unrelated Pods by the run without. The machine is shared and noisy, and one run of each is
one sample: compare the two runs of the same invocation only.

To measure another tree (the watcher before a change, say), run this script with
``PYTHONPATH`` pointing at it: the processes it starts inherit it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import nats
from sandbox_ready import POD_SPEC, cluster_url, cpu_seconds, progress, to_ready
from sandbus_processes import start_sandbus, stop

from api.keys import LABEL_SANDBOX_NAME_HASH, name_hash
from devtools.natsd import NatsServer
from events.subjects import event_subject
from services.runtime.bus import BusConfig, ensure_bus

NAMESPACE = "default"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
MERGE = {"Content-Type": "application/merge-patch+json"}
IN_SYNC = "is in sync with the cluster"


def sandbox_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {LABEL_SANDBOX_NAME_HASH: name_hash(name)}},
        "spec": POD_SPEC,
    }


def unrelated_pod(name: str, index: int) -> dict[str, Any]:
    """A Pod of somebody else's workload, about the size of a real one (2 kB or so)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": f"app-{index % 50}", "tier": "web", "pod-template-hash": "5d8f7c9b6"},
            "annotations": {"owner": "someone-else"},
        },
        "spec": {
            "nodeName": f"elsewhere-{index % 200}",  # not a node of the simulated kubelet
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example.com/team/app:1.2.3",
                    "env": [{"name": f"SETTING_{k}", "value": "v" * 24} for k in range(12)],
                    "ports": [{"containerPort": 8080, "name": "http"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }
            ],
        },
    }


def memory_kib(pid: int) -> tuple[int, int]:
    """VmRSS and VmHWM of process ``pid`` (kB in /proc/PID/status)."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0])
    return values["VmRSS"], values["VmHWM"]


async def run_concurrently(count: int, concurrency: int, job: Any) -> None:
    items = iter(range(count))

    async def worker() -> None:
        for index in items:
            await job(index)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def expect(response: aiohttp.ClientResponse, *statuses: int) -> None:
    if response.status not in statuses:
        raise RuntimeError(
            f"{response.method} {response.url}: {response.status} {await response.text()}"
        )
    await response.read()


@dataclass
class Figures:
    label: str
    unrelated: int
    startup_wall: float
    startup_cpu: float
    workload_wall: float
    workload_cpu: float
    rss_kib: int
    peak_kib: int

    @property
    def total_cpu(self) -> float:
        return self.startup_cpu + self.workload_cpu


class Unrelated:
    """The unrelated Pods: where they are, and the churn among them."""

    def __init__(self, count: int, namespaces: int) -> None:
        self.names = [(f"team-{index % namespaces}", f"web-{index}") for index in range(count)]

    @staticmethod
    def path(namespace: str, name: str | None = None) -> str:
        base = f"/api/v1/namespaces/{namespace}/pods"
        return f"{base}/{name}" if name else base

    async def create(self, http: aiohttp.ClientSession) -> None:
        for namespace in sorted({namespace for namespace, _ in self.names}):
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            async with http.post("/api/v1/namespaces", json=body) as response:
                await expect(response, 201, 409)

        async def one(index: int) -> None:
            namespace, name = self.names[index]
            async with http.post(self.path(namespace), json=unrelated_pod(name, index)) as response:
                await expect(response, 201)

        await run_concurrently(len(self.names), 32, one)

    async def churn(self, http: aiohttp.ClientSession, writes: int, seed: int = 7) -> None:
        rng = random.Random(seed)

        async def one(step: int) -> None:
            index = rng.randrange(len(self.names))
            namespace, name = self.names[index]
            if step % 10 == 9:
                async with http.delete(
                    self.path(namespace, name), params={"gracePeriodSeconds": "0"}
                ) as response:
                    await expect(response, 200, 404)
                async with http.post(
                    self.path(namespace), json=unrelated_pod(name, index)
                ) as response:
                    await expect(response, 201, 409)
                return
            patch = json.dumps({"metadata": {"annotations": {"churn": str(step)}}})
            async with http.patch(
                self.path(namespace, name), data=patch, headers=MERGE
            ) as response:
                await expect(response, 200, 404)

        await run_concurrently(writes, 4, one)


async def wait_in_sync(log: Path, process: subprocess.Popen[bytes], limit: float = 600.0) -> None:
    deadline = time.monotonic() + limit
    while not (log.is_file() and IN_SYNC in log.read_text(errors="replace")):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the watcher did not get in sync (see {log})")
        await asyncio.sleep(0.05)


class Deletions:
    """The deletions of sandbox Pods that reach the event log, counted as they are published."""

    def __init__(self, expected: int) -> None:
        self.names: set[str] = set()
        self.expected = expected
        self.complete = asyncio.Event()

    async def subscribe(self, nc: Any) -> None:
        subject = event_subject("Pod", NAMESPACE, "x").rsplit(".", 1)[0] + ".*"
        await nc.subscribe(subject, cb=self._on_event)

    async def _on_event(self, msg: Any) -> None:
        event = json.loads(msg.data)
        if str(event.get("type", "")).startswith("io.sandbus.object.deleted"):
            self.names.add(str(event.get("name")))
            if len(self.names) >= self.expected:
                self.complete.set()


async def workload(http: aiohttp.ClientSession, names: list[str], limit: float) -> None:
    """Create the sandbox Pods and wait until they are Ready; patch each; delete each."""
    await to_ready(http, PODS, sandbox_pod, names, 16, limit)

    async def patch(index: int) -> None:
        body = json.dumps({"metadata": {"annotations": {"bench": "patched"}}})
        async with http.patch(f"{PODS}/{names[index]}", data=body, headers=MERGE) as response:
            await expect(response, 200)

    async def delete(index: int) -> None:
        params = {"gracePeriodSeconds": "0"}
        async with http.delete(f"{PODS}/{names[index]}", params=params) as response:
            await expect(response, 200)

    await run_concurrently(len(names), 16, patch)
    await run_concurrently(len(names), 16, delete)


def start_cluster(workdir: Path, pods: int) -> subprocess.Popen[bytes]:
    return start_sandbus(
        [
            "devcluster",
            "--port",
            "0",
            "--kubeconfig",
            str(workdir / "kubeconfig"),
            "--write-latency-ms",
            "0",
            "--pod-ready-delay",
            "0.2",
            "--nodes",
            str(math.ceil(pods / 110) + 1),
        ],
        workdir / "devcluster.log",
    )


async def one_run(args: argparse.Namespace, unrelated: int, label: str) -> Figures:
    workdir = Path(tempfile.mkdtemp(prefix="bench-unrelated-"))
    kubeconfig = workdir / "kubeconfig"
    processes: list[subprocess.Popen[bytes]] = []
    names = [f"sb-{index}" for index in range(args.pods)]
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    try:
        with NatsServer(store_dir=workdir / "nats") as natsd:
            nc = await nats.connect(natsd.url)
            await ensure_bus(nc.jetstream(), BusConfig())
            processes.append(start_cluster(workdir, args.pods))
            url = await cluster_url(kubeconfig, processes[-1])
            async with aiohttp.ClientSession(base_url=url, timeout=timeout) as http:
                others = Unrelated(unrelated, args.namespaces)
                if unrelated:
                    started = time.perf_counter()
                    await others.create(http)
                    took = time.perf_counter() - started
                    progress(f"{label}: {unrelated} unrelated Pods in {took:.1f} s")
                deletions = Deletions(len(names))
                await deletions.subscribe(nc)

                log = workdir / "watcher.log"
                env = {"SANDBUS_WATCHER_IDENTITY": "bench", "SANDBUS_WATCHER_LEASE_SECONDS": "60"}
                command = ["run", "watcher", "--nats", natsd.url, "--kubeconfig", str(kubeconfig)]
                watcher = start_sandbus(command, log, env=env)
                processes.append(watcher)
                started = time.perf_counter()
                await wait_in_sync(log, watcher)
                startup_wall = time.perf_counter() - started
                startup_cpu = cpu_seconds(watcher.pid)
                progress(f"{label}: in sync after {startup_wall:.1f} s, {startup_cpu:.2f} CPU s")

                started = time.perf_counter()
                churn = asyncio.create_task(others.churn(http, args.churn if unrelated else 0))
                await workload(http, names, args.limit)
                async with asyncio.timeout(args.limit):
                    await deletions.complete.wait()
                    await churn
                workload_wall = time.perf_counter() - started
                workload_cpu = cpu_seconds(watcher.pid) - startup_cpu
                rss, peak = memory_kib(watcher.pid)
                progress(f"{label}: workload in {workload_wall:.1f} s, {workload_cpu:.2f} CPU s")
            await nc.close()
    finally:
        for process in reversed(processes):
            await asyncio.to_thread(stop, process)
    shutil.rmtree(workdir, ignore_errors=True)
    return Figures(
        label, unrelated, startup_wall, startup_cpu, workload_wall, workload_cpu, rss, peak
    )


async def main(args: argparse.Namespace) -> None:
    runs = [
        await one_run(args, 0, "without unrelated Pods"),
        await one_run(args, args.unrelated, "with unrelated Pods"),
    ]
    print(
        f"\nthe watcher with {args.pods} sandbox Pods created, run to Ready, patched and deleted; "
        f"{args.unrelated} unrelated Pods in {args.namespaces} namespaces and {args.churn} writes "
        f"among them in the second run; Python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
        f"{', PYTHONPATH=' + os.environ['PYTHONPATH'] if os.environ.get('PYTHONPATH') else ''}\n"
    )
    print(
        "| run | unrelated Pods | start-up s | start-up CPU s | workload s | workload CPU s "
        "| total CPU s | RSS MiB | peak RSS MiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for f in runs:
        print(
            f"| {f.label} | {f.unrelated:,} | {f.startup_wall:.1f} | {f.startup_cpu:.2f} "
            f"| {f.workload_wall:.1f} | {f.workload_cpu:.2f} | {f.total_cpu:.2f} "
            f"| {f.rss_kib / 1024:.0f} | {f.peak_kib / 1024:.0f} |"
        )
    base, other = runs
    ratios = [
        other.startup_wall / base.startup_wall,
        other.startup_cpu / base.startup_cpu,
        other.workload_wall / base.workload_wall,
        other.workload_cpu / base.workload_cpu,
        other.total_cpu / base.total_cpu,
        other.rss_kib / base.rss_kib,
        other.peak_kib / base.peak_kib,
    ]
    print(f"| with / without | | {' | '.join(f'{ratio:.2f}' for ratio in ratios)} |")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=500, help="sandbox Pods in the workload")
    parser.add_argument("--unrelated", type=int, default=20000, help="unrelated Pods")
    parser.add_argument("--namespaces", type=int, default=20, help="namespaces they are in")
    parser.add_argument("--churn", type=int, default=2000, help="writes among them meanwhile")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds before giving up")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
