"""Benchmark: SandboxClaim create to claim Ready through sandbus, against a Ready warm pool, beside
the floor and a baseline of plain API writes measured on the same development cluster in the
same run.

Run on purpose (it is not a test)::

    .venv/bin/python bench/claim_latency.py sustained [--rate 45] [--duration 60] [--pool 150]
    .venv/bin/python bench/claim_latency.py burst [--claims 1000] [--pool 1050]

Setup, as in production but on one machine: an embedded nats-server, ``sandbus devcluster``
(every write takes ``--write-latency-ms`` on average, like a real API server; its kubelet readies
a started Pod after ``--pod-ready-delay`` seconds) and ``sandbus run watcher``, ``sandbox``,
``pool`` and ``claim``, each its own process. A pool of ``--pool`` is filled and its queue full
before the clock starts.

- **sustained**: claims arrive as a Poisson process at ``--rate`` a second for ``--duration``
  seconds; the pool replenishes behind them. upstream (agent-sandbox, KWOK, 45 claims/s):
  p50 92 ms, p90 182 ms, p99 376 ms; its gate at 75/s: p99 <= 500 ms.
- **burst**: ``--claims`` created at once (``--concurrency`` requests in flight) against the pool.
  upstream: controller p99 851 ms for 3,600 claims (#1454).

A claim's latency is from its create request to the watch event that shows it Ready with
``status.sandbox`` (what the SDK waits for). Baseline: ``WRITES`` sequential writes (a create and
patches of one object) timed on the same cluster, as many times as there are claims to a
maximum; the floor is ``WRITES x --write-latency-ms``: the client's create plus the warm path's
three writes (the claim's annotation, the Sandbox's adoption patch, the claim's status).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import nats
from sandbox_ready import POD_SPEC, cluster_url, cpu_seconds, is_ready, progress, sequential_writes
from sandbus_processes import start_devcluster, start_sandbus, stop

from api.keys import LABEL_LAUNCH_TYPE, LABEL_WARM_POOL_SANDBOX, name_hash
from events.subjects import warm_queue_filter
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.natsd import NatsServer

NAMESPACE = "default"
EXTENSIONS = f"/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{NAMESPACE}"
CLAIMS = f"{EXTENSIONS}/sandboxclaims"
SANDBOXES = f"/apis/agents.x-k8s.io/v1beta1/namespaces/{NAMESPACE}/sandboxes"
WRITES = 4
UPSTREAM = {
    "sustained": "agent-sandbox at 45/s: p50 92 ms, p90 182 ms, p99 376 ms (KWOK gate at 75/s: "
    "p99 <= 500 ms)",
    "burst": "agent-sandbox: controller p99 851 ms at 3,600 claims (#1454)",
}


def percentile(values: list[float], q: float) -> float:
    """Nearest rank, as upstream's stress tool reports them."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def claim_ready(obj: dict[str, Any]) -> bool:
    return is_ready(obj) and bool(((obj.get("status") or {}).get("sandbox") or {}).get("name"))


async def fill_pool(
    http: aiohttp.ClientSession,
    js: Any,
    size: int,
    limit: float,
    *,
    template_spec: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> None:
    """The SandboxTemplate ``bench`` (``template_spec``, else one Pod of ``POD_SPEC``) and its
    SandboxWarmPool of ``size``, once every member is Ready and queued."""
    template: dict[str, Any] = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": "bench", "annotations": dict(annotations or {})},
        "spec": template_spec or {"podTemplate": {"spec": POD_SPEC}},
    }
    pool = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": "bench"},
        "spec": {"replicas": size, "sandboxTemplateRef": {"name": "bench"}},
    }
    for collection, body in (("sandboxtemplates", template), ("sandboxwarmpools", pool)):
        async with http.post(f"{EXTENSIONS}/{collection}", json=body) as response:
            response.raise_for_status()
    selector = f"{LABEL_WARM_POOL_SANDBOX}={name_hash('bench')}"
    queue = warm_queue_filter(NAMESPACE, name_hash("bench"), "bench")
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        async with http.get(SANDBOXES, params={"labelSelector": selector}) as response:
            items: list[dict[str, Any]] = (await response.json())["items"]
        info = await js.stream_info("SANDBUS_WARM", subjects_filter=queue)
        queued = sum((info.state.subjects or {}).values())
        ready = sum(1 for item in items if is_ready(item))
        if ready >= size and queued >= size:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the pool did not fill within {limit} s")


async def claims_to_ready(
    http: aiohttp.ClientSession, schedule: list[float], concurrency: int, limit: float
) -> tuple[dict[str, float], float]:
    """Create a claim at each offset of ``schedule`` (seconds from the start); each claim's
    seconds from create request to Ready, and the wall time to the last Ready."""
    async with http.get(CLAIMS) as response:
        resource_version = (await response.json())["metadata"]["resourceVersion"]
    sent: dict[str, float] = {}
    ready: dict[str, float] = {}
    done = asyncio.Event()
    total = len(schedule)

    async def follow() -> None:
        params = {"watch": "1", "resourceVersion": resource_version, "timeoutSeconds": "3600"}
        async with http.get(CLAIMS, params=params) as stream:
            async for line in stream.content:
                obj = json.loads(line)["object"]
                name = obj["metadata"]["name"]
                if name not in ready and claim_ready(obj):
                    ready[name] = time.perf_counter()
                    if len(ready) >= total:
                        done.set()

    watching = asyncio.create_task(follow())
    gate = asyncio.Semaphore(concurrency)
    await asyncio.sleep(0.2)
    started = time.perf_counter()

    async def create(index: int, at: float) -> None:
        await asyncio.sleep(max(0.0, started + at - time.perf_counter()))
        name = f"claim-{index:05d}"
        body = {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxClaim",
            "metadata": {"name": name},
            "spec": {"warmPoolRef": {"name": "bench"}},
        }
        async with gate:
            sent[name] = time.perf_counter()
            async with http.post(CLAIMS, json=body) as response:
                response.raise_for_status()

    try:
        await asyncio.gather(*(create(i, at) for i, at in enumerate(schedule)))
        async with asyncio.timeout(limit):
            await done.wait()
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
    wall = max(ready.values()) - started
    return {name: ready[name] - sent[name] for name in sent}, wall


async def launch_types(http: aiohttp.ClientSession) -> dict[str, int]:
    async with http.get(SANDBOXES) as response:
        items: list[dict[str, Any]] = (await response.json())["items"]
    counts: dict[str, int] = {}
    for item in items:
        owners = item["metadata"].get("ownerReferences") or ()
        if any(o.get("kind") == "SandboxClaim" for o in owners):
            kind = (item["metadata"].get("labels") or {}).get(LABEL_LAUNCH_TYPE, "?")
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def schedule_of(args: argparse.Namespace) -> list[float]:
    if args.scenario == "burst":
        return [0.0] * args.claims
    rng = random.Random(args.seed)
    at, out = 0.0, []
    while True:
        at += rng.expovariate(args.rate)
        if at >= args.duration:
            return out
        out.append(at)


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-claim-"))
    kubeconfig = workdir / "kubeconfig"
    processes: dict[str, subprocess.Popen[bytes]] = {}
    schedule = schedule_of(args)
    finished = False
    try:
        with NatsServer(store_dir=workdir / "nats") as natsd:
            connection = await nats.connect(natsd.url)
            js = connection.jetstream()
            await ensure_bus(js, BusConfig())
            pods = args.pool + 2 * len(schedule) + 10
            processes["devcluster"] = start_devcluster(
                kubeconfig,
                workdir / "devcluster.log",
                pod_ready_delay=args.pod_ready_delay,
                write_latency_ms=args.write_latency_ms,
                pods=pods,
            )
            url = await cluster_url(kubeconfig, processes["devcluster"])
            for service in ("watcher", "sandbox", "pool", "claim"):
                processes[service] = start_sandbus(
                    ["run", service, "--nats", natsd.url, "--kubeconfig", str(kubeconfig)],
                    workdir / f"{service}.log",
                    env={"SANDBUS_CLAIM_EVENTS": "true"},
                )
            assert natsd.pid is not None
            pids = {"nats-server": natsd.pid, **{n: p.pid for n, p in processes.items()}}
            async with aiohttp.ClientSession(base_url=url) as http:
                progress(f"filling a pool of {args.pool}")
                await fill_pool(http, js, args.pool, args.limit)
                base = await sequential_writes(http, min(len(schedule), 200), WRITES)
                progress(f"{len(schedule)} claims ({args.scenario})")
                before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                latencies, wall = await claims_to_ready(
                    http, schedule, args.concurrency, args.limit
                )
                cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
                kinds = await launch_types(http)
            await connection.close()
            finished = True
    finally:
        for process in reversed(processes.values()):
            await asyncio.to_thread(stop, process)
        if finished:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            progress(f"logs kept in {workdir}")

    values = list(latencies.values())
    base_p50 = statistics.median(base)
    floor = WRITES * args.write_latency_ms / 1000
    load = (
        f"{args.rate}/s for {args.duration} s (Poisson)"
        if args.scenario == "sustained"
        else f"{args.claims} at once, {args.concurrency} in flight"
    )
    print(
        f"\n{args.scenario}: {len(values)} claims, {load}, pool {args.pool}, write latency "
        f"{args.write_latency_ms} ms, kubelet ready delay {args.pod_ready_delay} s, Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} CPUs\n"
    )
    print("| figure | ms | x baseline p50 | x floor |")
    print("|---|---:|---:|---:|")
    for label, value in (
        ("claim p50", percentile(values, 50)),
        ("claim p90", percentile(values, 90)),
        ("claim p99", percentile(values, 99)),
        ("claim max", max(values)),
        (f"baseline: {WRITES} sequential writes, p50", base_p50),
        (f"floor: {WRITES} writes x {args.write_latency_ms} ms", floor),
    ):
        print(f"| {label} | {value * 1000:.1f} | {value / base_p50:.2f} | {value / floor:.1f} |")
    print(f"\nfirst create to last Ready: {wall:.2f} s; launch types: {kinds}")
    print(f"upstream: {UPSTREAM[args.scenario]}")
    print("\nCPU seconds each process spent while the claims were served\n")
    print(f"| {' | '.join(cpu)} |")
    print(f"|{'---:|' * len(cpu)}")
    print(f"| {' | '.join(f'{v:.2f}' for v in cpu.values())} |")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=("sustained", "burst"))
    parser.add_argument("--rate", type=float, default=45.0, help="sustained: claims per second")
    parser.add_argument("--duration", type=float, default=60.0, help="sustained: seconds")
    parser.add_argument("--claims", type=int, default=1000, help="burst: claims at once")
    parser.add_argument("--pool", type=int, default=None, help="warm pool size")
    parser.add_argument("--concurrency", type=int, default=64, help="creates in flight")
    parser.add_argument("--write-latency-ms", type=float, default=5.0, help="API write latency")
    parser.add_argument(
        "--pod-ready-delay", type=float, default=0.2, help="the simulated kubelet's ready delay"
    )
    parser.add_argument("--seed", type=int, default=1, help="sustained: arrival times")
    parser.add_argument("--limit", type=float, default=900.0, help="seconds before giving up")
    args = parser.parse_args(argv)
    if args.pool is None:
        args.pool = 150 if args.scenario == "sustained" else args.claims + 50
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
