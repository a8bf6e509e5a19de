"""Benchmark: OpenSandbox's headline scenario through sandbus: one BatchSandbox of 100 replicas
from a Pool of 100 Ready Pods; time to allocated=100 and to the endpoints written, beside the
floor and a baseline of plain API writes measured on the same development cluster in the same
run.

Run on purpose (it is not a test)::

    .venv/bin/python bench/batch_allocation.py [--replicas 100] [--write-latency-ms 5]

Setup, as in production but on one machine: an embedded nats-server, ``sandbus devcluster``
(every write takes ``--write-latency-ms`` on average) and ``sandbus run watcher``, ``pool`` and
``claim``, each its own process. The Pool (buffer ``--replicas`` to ``--replicas``) is full of
Ready idle Pods before the clock starts.

Clock: from the BatchSandbox's create request to the watch event that shows (1) its
``alloc-status`` naming every replica (allocated), (2) its ``endpoints`` annotation with an IP
per replica, (3) its status ``ready`` at the replicas and phase ``Succeed``. The floor is the
critical path's writes times the write latency: the create, the Pool's one ``alloc-status``
patch (the ledger is on the bus before it), the claim worker's endpoints patch and its status
patch. OpenSandbox published 0.92 s for this scenario (with 0.5 s polling and a Pool-annotation
store, docs/opensandbox.md §6 and §9.31).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any

import aiohttp
from common import POD_SPEC, Stack, progress, sequential_writes

NAMESPACE = "default"
OPENSANDBOX = f"/apis/sandbox.opensandbox.io/v1alpha1/namespaces/{NAMESPACE}"
WRITES = 4
PUBLISHED = 0.92


async def fill_pool(http: aiohttp.ClientSession, size: int, limit: float) -> None:
    pool = {
        "apiVersion": "sandbox.opensandbox.io/v1alpha1",
        "kind": "Pool",
        "metadata": {"name": "bench"},
        "spec": {
            "template": {"spec": POD_SPEC},
            "capacitySpec": {
                "bufferMin": size,
                "bufferMax": size,
                "poolMin": 0,
                "poolMax": 3 * size,
            },
            "scaleStrategy": {"maxUnavailable": "100%"},
        },
    }
    async with http.post(f"{OPENSANDBOX}/pools", json=pool) as response:
        response.raise_for_status()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        async with http.get(f"{OPENSANDBOX}/pools/bench") as response:
            status = (await response.json()).get("status") or {}
        if status.get("available", 0) >= size:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the pool did not fill within {limit} s")


def _listed(obj: dict[str, Any], key: str) -> list[Any]:
    text = (obj["metadata"].get("annotations") or {}).get(key)
    if not text:
        return []
    data = json.loads(text)
    return list(data["pods"] if isinstance(data, dict) else data)


async def allocate(http: aiohttp.ClientSession, replicas: int, limit: float) -> dict[str, float]:
    """Create the BatchSandbox; seconds from the create request to each milestone."""
    async with http.get(f"{OPENSANDBOX}/batchsandboxes") as response:
        resource_version = (await response.json())["metadata"]["resourceVersion"]
    seen: dict[str, float] = {}
    done = asyncio.Event()

    async def follow() -> None:
        params = {"watch": "1", "resourceVersion": resource_version, "timeoutSeconds": "3600"}
        async with http.get(f"{OPENSANDBOX}/batchsandboxes", params=params) as stream:
            async for line in stream.content:
                obj = json.loads(line)["object"]
                now = time.perf_counter()
                status = obj.get("status") or {}
                if len(_listed(obj, "sandbox.opensandbox.io/alloc-status")) >= replicas:
                    seen.setdefault("allocated", now)
                endpoints = _listed(obj, "sandbox.opensandbox.io/endpoints")
                if len(endpoints) >= replicas and all(endpoints):
                    seen.setdefault("endpoints", now)
                if status.get("ready") == replicas and status.get("phase") == "Succeed":
                    seen.setdefault("ready", now)
                if len(seen) == 3:
                    done.set()

    watching = asyncio.create_task(follow())
    await asyncio.sleep(0.2)
    body = {
        "apiVersion": "sandbox.opensandbox.io/v1alpha1",
        "kind": "BatchSandbox",
        "metadata": {"name": "bench"},
        "spec": {"replicas": replicas, "poolRef": "bench"},
    }
    started = time.perf_counter()
    try:
        async with http.post(f"{OPENSANDBOX}/batchsandboxes", json=body) as response:
            response.raise_for_status()
        async with asyncio.timeout(limit):
            await done.wait()
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
    return {name: moment - started for name, moment in seen.items()}


async def main(args: argparse.Namespace) -> None:
    stack = Stack(
        "bench-batch-",
        services=("watcher", "pool", "claim"),
        write_latency_ms=args.write_latency_ms,
        pod_ready_delay=args.pod_ready_delay,
        pods=3 * args.replicas,
    )
    async with stack, aiohttp.ClientSession(base_url=stack.url) as http:
        progress(f"filling a Pool of {args.replicas}")
        await fill_pool(http, args.replicas, args.limit)
        base = await sequential_writes(http, 50, WRITES)
        progress(f"one BatchSandbox of {args.replicas}")
        before = stack.cpu()
        milestones = await allocate(http, args.replicas, args.limit)
        cpu = stack.spent(before)

    base_p50 = statistics.median(base)
    floor = WRITES * args.write_latency_ms / 1000
    print(
        f"\nbatch: one BatchSandbox of {args.replicas} from a Pool of {args.replicas} Ready, "
        f"write latency {args.write_latency_ms} ms, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs\n"
    )
    print("| milestone | ms | x baseline p50 | x floor | x published 0.92 s |")
    print("|---|---:|---:|---:|---:|")
    rows = [(f"to {name}", milestones[name]) for name in ("allocated", "endpoints", "ready")]
    rows += [
        (f"baseline: {WRITES} sequential writes, p50", base_p50),
        (f"floor: {WRITES} writes x {args.write_latency_ms} ms", floor),
    ]
    for label, value in rows:
        over_floor = f"{value / floor:.1f}" if floor else "-"
        print(
            f"| {label} | {value * 1000:.1f} | {value / base_p50:.2f} | {over_floor} | "
            f"{value / PUBLISHED:.2f} |"
        )
    print("\nCPU seconds each process spent while the sandbox was served\n")
    print(f"| {' | '.join(cpu)} |")
    print(f"|{'---:|' * len(cpu)}")
    print(f"| {' | '.join(f'{v:.2f}' for v in cpu.values())} |")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=100)
    parser.add_argument("--write-latency-ms", type=float, default=5.0, help="API write latency")
    parser.add_argument(
        "--pod-ready-delay", type=float, default=0.2, help="the simulated kubelet's ready delay"
    )
    parser.add_argument("--limit", type=float, default=300.0, help="seconds before giving up")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
