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
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import cpu_profile
from common import POD_SPEC, Stack, is_ready, percentile, progress, sequential_writes

from api.keys import LABEL_LAUNCH_TYPE, LABEL_WARM_POOL_SANDBOX, name_hash
from events.subjects import warm_queue_filter

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


__all__ = [
    "CLAIMS",
    "claim_ready",
    "claims_to_ready",
    "create_pool",
    "fill_pool",
    "launch_types",
    "percentile",
    "schedule_of",
    "wait_pool_full",
]


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
    await create_pool(http, size, template_spec=template_spec, annotations=annotations)
    await wait_pool_full(http, js, size, limit)


async def create_pool(
    http: aiohttp.ClientSession,
    size: int,
    *,
    template_spec: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> None:
    """Create the SandboxTemplate ``bench`` and its SandboxWarmPool ``bench`` of ``size``."""
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


async def wait_pool_full(
    http: aiohttp.ClientSession, js: Any, size: int, limit: float, pool: str = "bench"
) -> None:
    """Until ``size`` members of the SandboxWarmPool ``pool`` (of the template ``bench``) are
    Ready and queued: after :func:`create_pool`, or while the pool refills behind claims (an
    adopted Sandbox leaves the pool's label behind and its queue entry is acked)."""
    selector = f"{LABEL_WARM_POOL_SANDBOX}={name_hash(pool)}"
    queue = warm_queue_filter(NAMESPACE, name_hash("bench"), pool)
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
    http: aiohttp.ClientSession,
    schedule: list[float],
    concurrency: int,
    limit: float,
    *,
    prefix: str = "claim-",
    hold: bool = False,
    pool: str = "bench",
) -> tuple[dict[str, float], float]:
    """Create a claim ``<prefix><index>`` on the pool ``pool`` at each offset of ``schedule``
    (seconds from the start), at most ``concurrency`` create requests in flight (with ``hold``:
    at most ``concurrency`` claims waiting for Ready, as that many clients that each create a
    claim and wait for it would); each claim's seconds from create request to Ready, and the
    wall time from the start to the last Ready."""
    async with http.get(CLAIMS) as response:
        resource_version = (await response.json())["metadata"]["resourceVersion"]
    sent: dict[str, float] = {}
    ready: dict[str, float] = {}
    names = [f"{prefix}{index:05d}" for index in range(len(schedule))]
    each = {name: asyncio.Event() for name in names}
    done = asyncio.Event()
    total = len(schedule)

    def saw(obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name in each and name not in ready and claim_ready(obj):
            ready[name] = time.perf_counter()
            each[name].set()
            if len(ready) >= total:
                done.set()

    async def follow() -> None:
        version = resource_version
        while not done.is_set():
            params = {"watch": "1", "resourceVersion": version, "timeoutSeconds": "3600"}
            # No client timeout: a run that falls behind watches for longer than aiohttp's
            # default of 5 minutes, and the watch ends at the server's timeout anyway.
            unbounded = aiohttp.ClientTimeout(total=None)
            async with http.get(CLAIMS, params=params, timeout=unbounded) as stream:
                async for line in stream.content:
                    saw(json.loads(line)["object"])
            # The API server closes a watch that falls behind, as Kubernetes does: list what
            # was missed (a claim Ready meanwhile is timed now, a little late) and watch again.
            async with http.get(CLAIMS) as response:
                listed = await response.json()
            for obj in listed["items"]:
                saw(obj)
            version = listed["metadata"]["resourceVersion"]

    watching = asyncio.create_task(follow())
    gate = asyncio.Semaphore(concurrency)
    await asyncio.sleep(0.2)
    started = time.perf_counter()

    async def create(name: str, at: float) -> None:
        await asyncio.sleep(max(0.0, started + at - time.perf_counter()))
        body = {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxClaim",
            "metadata": {"name": name},
            "spec": {"warmPoolRef": {"name": pool}},
        }
        async with gate:
            sent[name] = time.perf_counter()
            async with http.post(CLAIMS, json=body) as response:
                response.raise_for_status()
            if hold:
                await each[name].wait()

    try:
        async with asyncio.timeout(limit):
            await asyncio.gather(*(create(n, at) for n, at in zip(names, schedule, strict=True)))
            finished = asyncio.create_task(done.wait())
            await asyncio.wait({finished, watching}, return_when=asyncio.FIRST_COMPLETED)
            if not finished.done():
                finished.cancel()
                watching.result()  # what the watch died of
                raise RuntimeError("the watch of the claims ended before every claim was Ready")
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
    wall = max(ready.values()) - started
    return {name: ready[name] - sent[name] for name in sent}, wall


async def launch_types(http: aiohttp.ClientSession, prefix: str = "") -> dict[str, int]:
    """How the Sandboxes of the claims (those named ``<prefix>...``) were launched: warm (adopted
    from a pool) or cold, by their launch-type label."""
    async with http.get(SANDBOXES) as response:
        items: list[dict[str, Any]] = (await response.json())["items"]
    counts: dict[str, int] = {}
    for item in items:
        owners = item["metadata"].get("ownerReferences") or ()
        if any(
            o.get("kind") == "SandboxClaim" and str(o.get("name", "")).startswith(prefix)
            for o in owners
        ):
            kind = (item["metadata"].get("labels") or {}).get(LABEL_LAUNCH_TYPE, "?")
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def schedule_of(args: argparse.Namespace) -> list[float]:
    if args.scenario == "burst":
        return [0.0] * args.claims
    rng = random.Random(args.seed)
    at, out = 0.0, list[float]()
    while True:
        at += rng.expovariate(args.rate)
        if at >= args.duration:
            return out
        out.append(at)


async def main(args: argparse.Namespace) -> None:
    if args.profile:
        # Every process the stack starts inherits this one's environment.
        os.environ.update(cpu_profile.sampling_environment(args.profile))
    schedule = schedule_of(args)
    stack = Stack(
        "bench-claim-",
        services=("watcher", "sandbox", "pool", "claim"),
        write_latency_ms=args.write_latency_ms,
        pod_ready_delay=args.pod_ready_delay,
        pods=args.pool + 2 * len(schedule) + 10,
        env={"SANDBUS_CLAIM_EVENTS": "true"},
    )
    async with stack, aiohttp.ClientSession(base_url=stack.url) as http:
        progress(f"filling a pool of {args.pool}")
        await fill_pool(http, stack.js, args.pool, args.limit)
        base = await sequential_writes(http, min(len(schedule), 200), WRITES)
        progress(f"{len(schedule)} claims ({args.scenario})")
        before = stack.cpu()
        sampled = {name: pid for name, pid in stack.pids().items() if name != "nats-server"}
        if args.profile:
            cpu_profile.reset(sampled.values())
        latencies, wall = await claims_to_ready(http, schedule, args.concurrency, args.limit)
        cpu = stack.spent(before)
        profiles = cpu_profile.collect(sampled, args.profile) if args.profile else {}
        kinds = await launch_types(http)

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
        over_floor = f"{value / floor:.1f}" if floor else "-"
        print(f"| {label} | {value * 1000:.1f} | {value / base_p50:.2f} | {over_floor} |")
    print(f"\nfirst create to last Ready: {wall:.2f} s; launch types: {kinds}")
    print(f"upstream: {UPSTREAM[args.scenario]}")
    print("\nCPU seconds each process spent while the claims were served\n")
    print(f"| {' | '.join(cpu)} |")
    print(f"|{'---:|' * len(cpu)}")
    print(f"| {' | '.join(f'{v:.2f}' for v in cpu.values())} |")
    if profiles:
        print(f"\n{cpu_profile.report(profiles, len(values))}")


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
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="sample each Python process's CPU while the claims are served "
        "(bench/cpu_profile.py) into DIR, and print where each millisecond of a claim went",
    )
    args = parser.parse_args(argv)
    if args.pool is None:
        args.pool = 150 if args.scenario == "sustained" else args.claims + 50
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
