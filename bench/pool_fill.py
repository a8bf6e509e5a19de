"""Benchmark: a SandboxWarmPool filled from 0 to ``--size`` Ready members through sandbus, beside
the same number of bare Pods from create to Ready on the same development cluster in the same
run, and beside the fill's floor.

Run on purpose (it is not a test)::

    .venv/bin/python bench/pool_fill.py [--size 300] [--write-latency-ms 5] [--pod-ready-delay 0.2]

Setup, as in production but on one machine: an embedded nats-server, ``sandbus devcluster``
(every write takes ``--write-latency-ms`` on average, like a real API server; its kubelet readies
a started Pod after ``--pod-ready-delay`` seconds) and ``sandbus run watcher``, ``sandbox`` and
``pool``, each its own process.

- **bare Pods** (the baseline): ``--size`` Pods created straight through the API, ``--concurrency``
  requests at a time, from the first create to the last Ready.
- **pool fill**: one SandboxWarmPool of ``--size`` replicas is created; timed from that create to
  the moment every member is Ready (the pool's members, seen through one watch). The path is the
  product's: the pool worker creates the Sandboxes in slow-start batches (1, 2, 4, … at the same
  time), the sandbox worker creates each one's Pod, the kubelet starts it, the sandbox worker
  writes its Ready condition.
- **the floor**: what the writes on the critical path cost at the configured latency if nothing
  else took time: every member needs its Sandbox and its Pod created (``2 x size`` creates), and
  the sandbox worker makes ``SANDBUS_SANDBOX_CONCURRENCY`` (16) of them at a time, so
  ``2 x size x latency / 16``, plus one kubelet ready delay.

Also printed: how many Sandboxes the pool created (it must be exactly ``--size``), and the CPU
seconds of each process during each path. Compare figures from the same run only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

import aiohttp
from common import POD_SPEC, SANDBOX_CONCURRENCY, Stack, is_ready, pod, progress, to_ready

from api.keys import LABEL_WARM_POOL_SANDBOX, name_hash

NAMESPACE = "default"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
EXTENSIONS = f"/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{NAMESPACE}"
SANDBOXES = f"/apis/agents.x-k8s.io/v1beta1/namespaces/{NAMESPACE}/sandboxes"


async def fill(http: aiohttp.ClientSession, size: int, limit: float) -> tuple[float, int]:
    """Create a template and a pool of ``size``; seconds until every member is Ready, and how
    many members were created."""
    selector = f"{LABEL_WARM_POOL_SANDBOX}={name_hash('bench')}"
    async with http.get(SANDBOXES, params={"labelSelector": selector}) as response:
        response.raise_for_status()
        resource_version = (await response.json())["metadata"]["resourceVersion"]
    template = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": "bench"},
        "spec": {"podTemplate": {"spec": POD_SPEC}},
    }
    async with http.post(f"{EXTENSIONS}/sandboxtemplates", json=template) as response:
        response.raise_for_status()
    ready: set[str] = set()
    created: set[str] = set()
    done = asyncio.Event()

    async def follow() -> None:
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "labelSelector": selector,
            "timeoutSeconds": "900",
        }
        async with http.get(SANDBOXES, params=params) as stream:
            stream.raise_for_status()
            async for line in stream.content:
                event = json.loads(line)
                name = event["object"]["metadata"]["name"]
                if event["type"] == "ADDED":
                    created.add(name)
                if is_ready(event["object"]):
                    ready.add(name)
                elif event["type"] == "DELETED":
                    ready.discard(name)
                if len(ready) >= size:
                    done.set()

    watching = asyncio.create_task(follow())
    try:
        await asyncio.sleep(0.1)
        started = time.perf_counter()
        pool = {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxWarmPool",
            "metadata": {"name": "bench"},
            "spec": {"replicas": size, "sandboxTemplateRef": {"name": "bench"}},
        }
        async with http.post(f"{EXTENSIONS}/sandboxwarmpools", json=pool) as response:
            response.raise_for_status()
        async with asyncio.timeout(limit):
            await done.wait()
        wall = time.perf_counter() - started
        await asyncio.sleep(2.0)  # an over-create would show by now
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
    return wall, len(created)


async def main(args: argparse.Namespace) -> None:
    results: dict[str, tuple[float, dict[str, float]]] = {}
    stack = Stack(
        "bench-pool-",
        services=("watcher", "sandbox", "pool"),
        write_latency_ms=args.write_latency_ms,
        pod_ready_delay=args.pod_ready_delay,
        pods=2 * args.size + 2,
    )
    async with stack, aiohttp.ClientSession(base_url=stack.url) as http:
        await warm_up(http)
        names = [f"pod-{index}" for index in range(args.size)]
        before = stack.cpu()
        _, wall = await to_ready(http, PODS, pod, names, args.concurrency, args.limit)
        results["bare Pods (baseline)"] = (wall, stack.spent(before))
        progress(f"bare Pods: {args.size} Ready in {wall:.2f} s")
        before = stack.cpu()
        wall, created = await fill(http, args.size, args.limit)
        results["pool fill through sandbus"] = (wall, stack.spent(before))
        progress(f"pool fill: {args.size} Ready in {wall:.2f} s ({created} created)")

    latency = args.write_latency_ms / 1000
    floor = 2 * args.size * latency / SANDBOX_CONCURRENCY + args.pod_ready_delay
    baseline = results["bare Pods (baseline)"][0]
    print(
        f"\n{args.size} members, write latency {args.write_latency_ms} ms, kubelet ready delay "
        f"{args.pod_ready_delay} s, {args.concurrency} bare creates in flight, Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} CPUs\n"
    )
    print("| path | wall s | x baseline | x floor |")
    print("|---|---:|---:|---:|")
    for label, (wall, _) in results.items():
        print(f"| {label} | {wall:.2f} | {wall / baseline:.2f} | {wall / floor:.1f} |")
    print(
        f"| floor: 2 x {args.size} creates x {args.write_latency_ms} ms / 16 + ready delay "
        f"| {floor:.2f} | {floor / baseline:.2f} | 1.0 |"
    )
    print(f"\nSandboxes the pool created: {created} (wanted exactly {args.size})")
    names = list(next(iter(results.values()))[1])
    print("\nCPU seconds each process spent while a path was measured\n")
    print(f"| path | {' | '.join(names)} |")
    print(f"|---|{'---:|' * len(names)}")
    for label, (_, cpu) in results.items():
        print(f"| {label} | {' | '.join(f'{cpu[n]:.2f}' for n in names)} |")


async def warm_up(http: aiohttp.ClientSession) -> None:
    """One Pod and one pool member Ready first: every process is up and elected."""
    await to_ready(http, PODS, pod, ["pod-warmup"], 1, 120)
    await _warm_up_pool(http)


async def _warm_up_pool(http: aiohttp.ClientSession) -> None:
    template = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": "warmup"},
        "spec": {"podTemplate": {"spec": POD_SPEC}},
    }
    pool = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": "warmup"},
        "spec": {"replicas": 1, "sandboxTemplateRef": {"name": "warmup"}},
    }
    for collection, body in (("sandboxtemplates", template), ("sandboxwarmpools", pool)):
        async with http.post(f"{EXTENSIONS}/{collection}", json=body) as response:
            response.raise_for_status()
    deadline = time.monotonic() + 120
    selector = f"{LABEL_WARM_POOL_SANDBOX}={name_hash('warmup')}"
    while time.monotonic() < deadline:
        async with http.get(SANDBOXES, params={"labelSelector": selector}) as response:
            items: list[dict[str, Any]] = (await response.json())["items"]
        if any(is_ready(item) for item in items):
            return
        await asyncio.sleep(0.2)
    raise RuntimeError("the warm-up pool never had a Ready member")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=300, help="pool members (and bare Pods)")
    parser.add_argument("--concurrency", type=int, default=16, help="bare-Pod creates in flight")
    parser.add_argument("--write-latency-ms", type=float, default=5.0, help="API write latency")
    parser.add_argument(
        "--pod-ready-delay", type=float, default=0.2, help="the simulated kubelet's ready delay"
    )
    parser.add_argument("--limit", type=float, default=600.0, help="seconds before giving up")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
