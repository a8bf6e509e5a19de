"""Benchmark: a worker restarted with ``--objects`` (10,000) Sandboxes in the state table: how long
until it has loaded them, and how long until it serves again (a new object reconciled, a new
claim Ready); and the resident memory of each service per 10,000 objects.

Run on purpose (it is not a test)::

    .venv/bin/python bench/worker_restart.py [--objects 10000] [--workers sandbox pool claim]

Setup: an embedded nats-server, ``sandbus devcluster`` (``--write-latency-ms`` per write),
``sandbus run watcher`` and ``sandbus run sandbox`` as processes, and ``sandbus run pool`` and
``sandbus run claim`` when those workers are measured (with a SandboxWarmPool ``bench`` of
``--pool`` (2) Ready members, for the claim worker's new claim). ``--objects`` Sandboxes with
``operatingMode: Suspended`` (no Pods, so the cluster's own work stays small) are created and
reconciled once. Then each worker of ``--workers`` (default: the sandbox worker) in turn is
killed (SIGKILL), started again, and a new object is created as soon as the new process exists.
Measured from the start of the new process:

- **leading**: the new process has the killed one's identity, as a container restarted in its
  Pod keeps the Pod's name, so it takes its own Lease back at once (a replacement Pod, with a
  new name, would wait for the Lease to run out: a SIGKILL releases nothing); the worker's own
  work is timed from its "leading" log line (the claim worker, active on every replica, has no
  Lease: its "sharing the keys" line once it has joined the replicas stands in for it);
- **loaded**: the worker's "loaded N objects from the state table" log line;
- **serving**: the sandbox worker: the ``time`` of its first decision about a Sandbox created
  right after the restart (read from the event log), which is when its planner ran; the pool
  worker: the same for a SandboxWarmPool created right after the restart; the claim worker: a
  SandboxClaim created right after the restart, Ready with its Sandbox (adopted warm from
  ``bench``), as the client's watch sees it.

The baseline, from the same run: how long a bare ``sandbus`` process takes to start (import and
connect) — the part of a restart that is not sandbus's work on the objects. Resident memory is
read from /proc for each process once the worker has settled, and again for each restarted
worker once it has rested (it packs the objects it loaded only then). Every service runs from
compiled bytecode, as installed. Compare figures from the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from claim_latency import CLAIMS, claim_ready, create_pool, wait_pool_full
from common import Stack, progress

from events.codec import decode_event
from events.subjects import decision_filter, state_filter
from events.types import DecisionMade
from services.runtime.streams import read_to_end

NAMESPACE = "default"
SANDBOXES = f"/apis/agents.x-k8s.io/v1beta1/namespaces/{NAMESPACE}/sandboxes"
EXTENSIONS = f"/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{NAMESPACE}"
WORKERS = ("sandbox", "pool", "claim")
LEADING = re.compile(r"^(\S+ \S+) INFO \S+ \S+: (?:leading on Lease|sharing the keys with)")
SERVING = {
    "sandbox": "a new Sandbox reconciled",
    "pool": "a new SandboxWarmPool reconciled",
    "claim": "a new claim Ready, adopted warm",
}


def loaded_pattern(worker: str) -> re.Pattern[str]:
    return re.compile(rf"^(\S+ \S+) INFO \S+ {worker}: loaded (\d+) objects from the state table")


LOADED = loaded_pattern("sandbox")


def suspended(name: str) -> dict[str, object]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {
            "operatingMode": "Suspended",
            "podTemplate": {"spec": {"containers": [{"name": "app", "image": "python:3.12"}]}},
        },
    }


async def create_all(http: aiohttp.ClientSession, names: list[str], concurrency: int = 32) -> None:
    pending = iter(names)

    async def one() -> None:
        for name in pending:
            async with http.post(SANDBOXES, json=suspended(name)) as response:
                if response.status != 201:
                    raise RuntimeError(f"create {name}: {response.status}")

    await asyncio.gather(*(one() for _ in range(concurrency)))


async def decided(js: Any, count: int, limit: float) -> None:
    """Wait until the sandbox worker has decided about ``count`` Sandboxes at least once."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        seen: set[str] = set()
        subjects = [decision_filter("sandbox", "Sandbox")]
        async for msg in read_to_end(js, "SANDBUS_EVENTS", subjects):
            seen.add(msg.subject)
        if len(seen) >= count:
            return
        await asyncio.sleep(2.0)
    raise RuntimeError("the worker did not reconcile every Sandbox in time")


async def first_decision(
    js: Any, name: str, limit: float, worker: str = "sandbox", kind: str = "Sandbox"
) -> datetime:
    """When ``worker`` first decided about the ``kind`` ``name`` (its decision's ``time``).

    The decisions are listened to as they are published, and those already on the log read
    once. Polling the log instead, with a consumer every 50 ms, kept nats-server about a core
    busy scanning the event log beside the worker being timed."""
    subject = decision_filter(worker, kind, NAMESPACE, name)
    decided: asyncio.Future[datetime] = asyncio.get_running_loop().create_future()

    async def published(msg: Any) -> None:
        event = decode_event(msg.data)
        if isinstance(event, DecisionMade) and not decided.done():
            decided.set_result(event.time)

    subscription = await js._nc.subscribe(subject, cb=published)
    try:
        async for msg in read_to_end(js, "SANDBUS_EVENTS", [subject]):
            event = decode_event(msg.data)
            if isinstance(event, DecisionMade):
                return event.time
        try:
            return await asyncio.wait_for(decided, limit)
        except TimeoutError:
            raise RuntimeError(
                f"no decision of the {worker} worker about {name} within {limit} s"
            ) from None
    finally:
        await subscription.unsubscribe()


def logged_at(log: Path, pattern: re.Pattern[str]) -> tuple[datetime, str] | None:
    """When ``pattern`` first matched a line of ``log`` (its first group is the timestamp), and
    the line's second group ("" without one)."""
    for line in log.read_text(errors="replace").splitlines():
        found = pattern.match(line)
        if found:
            stamp = datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f").astimezone()
            return stamp.astimezone(UTC), (found[2] if pattern.groups > 1 else "")
    return None


async def bare_start() -> float:
    """Seconds a bare process takes to import the runtime and its clients: the baseline."""
    started = time.perf_counter()
    await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-c",
            "import services.runtime.reconcile.serving, services.runtime.kube, nats",
        ],
        check=True,
    )
    return time.perf_counter() - started


def services_for(workers: tuple[str, ...] | list[str]) -> list[str]:
    """The services a restart of ``workers`` needs running."""
    services = ["watcher", "sandbox"]
    if "pool" in workers or "claim" in workers:
        services.append("pool")
    if "claim" in workers:
        services.append("claim")
    return services


def identities(services: list[str]) -> dict[str, dict[str, str]]:
    """One identity for both processes of a worker, as a container restarted in its Pod keeps
    the Pod's name: the new process takes its own Lease (or its replica's place) back at once."""
    return {name: {"SANDBUS_IDENTITY": f"{name}-0"} for name in services if name != "watcher"}


async def populate(http: aiohttp.ClientSession, js: Any, objects: int, limit: float) -> int:
    """``objects`` Suspended Sandboxes, each reconciled once; how many Sandboxes the state
    table then holds."""
    names = [f"sb-{index:05d}" for index in range(objects)]
    started = time.perf_counter()
    await create_all(http, names)
    progress(f"created {objects} Sandboxes in {time.perf_counter() - started:.1f} s")
    await decided(js, objects, limit)
    progress("every Sandbox reconciled once")
    state = 0
    async for _ in read_to_end(js, "SANDBUS_STATE", [state_filter("Sandbox")]):
        state += 1
    return state


@dataclass
class Restart:
    """One worker killed and started again; seconds from the new process's start."""

    worker: str
    loaded_objects: int
    to_leading: float
    to_loaded: float
    to_serving: float
    serving: str

    @property
    def leading_to_loaded(self) -> float:
        return self.to_loaded - self.to_leading

    @property
    def leading_to_serving(self) -> float:
        return self.to_serving - self.to_leading


async def restart(
    stack: Stack, http: aiohttp.ClientSession, worker: str, limit: float, *, round_: int = 2
) -> Restart:
    """SIGKILL ``worker``, start it again and time it until it serves again (module doc)."""
    log = stack.workdir / f"{worker}-{round_}.log"
    stack.kill(worker)
    restart_at = datetime.now(UTC)
    restarted = time.perf_counter()
    stack.start(worker, log=log)
    # A name of its own for each worker's new object: a claim's Sandbox is named after the claim,
    # so a claim named like the sandbox worker's new Sandbox would find that one in its way.
    name = f"after-restart-{worker}-{round_}"
    if worker == "sandbox":
        async with http.post(SANDBOXES, json=suspended(name)) as response:
            response.raise_for_status()
        decided_at = await first_decision(stack.js, name, limit)
        to_serving = (decided_at - restart_at).total_seconds()
    elif worker == "pool":
        pool = {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxWarmPool",
            "metadata": {"name": name},
            "spec": {"replicas": 1, "sandboxTemplateRef": {"name": "bench"}},
        }
        async with http.post(f"{EXTENSIONS}/sandboxwarmpools", json=pool) as response:
            response.raise_for_status()
        decided_at = await first_decision(stack.js, name, limit, "pool", "SandboxWarmPool")
        to_serving = (decided_at - restart_at).total_seconds()
    elif worker == "claim":
        to_serving = await claim_ready_after(http, name, limit) - restarted
    else:
        raise ValueError(f"no restart measured for {worker!r}")
    leading = logged_at(log, LEADING)
    loaded = logged_at(log, loaded_pattern(worker))
    assert leading is not None and loaded is not None, log.read_text()
    return Restart(
        worker=worker,
        loaded_objects=int(loaded[1]),
        to_leading=(leading[0] - restart_at).total_seconds(),
        to_loaded=(loaded[0] - restart_at).total_seconds(),
        to_serving=to_serving,
        serving=SERVING[worker],
    )


async def claim_ready_after(http: aiohttp.ClientSession, name: str, limit: float) -> float:
    """Create the claim ``name`` on the pool ``bench``; when (perf_counter) it is Ready."""
    async with http.get(CLAIMS) as response:
        resource_version = (await response.json())["metadata"]["resourceVersion"]
    params = {"watch": "1", "resourceVersion": resource_version, "timeoutSeconds": "600"}
    body = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": "bench"}},
    }
    async with asyncio.timeout(limit), http.get(CLAIMS, params=params) as stream:
        async with http.post(CLAIMS, json=body) as response:
            response.raise_for_status()
        async for line in stream.content:
            obj = json.loads(line)["object"]
            if obj["metadata"]["name"] == name and claim_ready(obj):
                return time.perf_counter()
    raise RuntimeError(f"the claim {name} was not Ready")


async def main(args: argparse.Namespace) -> None:
    services = services_for(args.workers)
    stack = Stack(
        "bench-restart-",
        services=services,
        write_latency_ms=args.write_latency_ms,
        pods=args.pool + 10,
        service_env=identities(services),
    )
    async with stack, aiohttp.ClientSession(base_url=stack.url) as http:
        if "claim" in args.workers or "pool" in args.workers:
            await create_pool(http, args.pool)
            await wait_pool_full(http, stack.js, args.pool, args.limit)
        state = await populate(http, stack.js, args.objects, args.limit)
        await asyncio.sleep(3.0)
        memory = stack.memory(name for name in services)
        baseline = await bare_start()
        restarts = []
        for worker in args.workers:
            await stack.quiet()  # each restart alone, not beside the previous one's resync
            restarts.append(await restart(stack, http, worker, args.limit, round_=2))
        await stack.quiet()
        await asyncio.sleep(3.0)  # rested: what their reads of the state table loaded is packed
        restarted = stack.memory(args.workers)
    rows = [
        ("objects in the state table (Sandboxes)", f"{state:,}"),
        ("a bare process: import the runtime and its clients (baseline)", f"{baseline:.2f} s"),
    ]
    for done in restarts:
        lead = "leading (its own Lease, taken back)" if done.worker != "claim" else "sharing"
        rows += [
            (f"{done.worker}: process start to {lead}", f"{done.to_leading:.2f} s"),
            (
                f"{done.worker}: leading to loaded ({done.loaded_objects:,} objects)",
                f"{done.leading_to_loaded:.2f} s ({done.leading_to_loaded / baseline:.1f}x "
                "baseline)",
            ),
            (
                f"{done.worker}: leading to serving ({done.serving})",
                f"{done.leading_to_serving:.2f} s ({done.leading_to_serving / baseline:.1f}x "
                "baseline)",
            ),
            (f"{done.worker}: process start to serving", f"{done.to_serving:.2f} s"),
        ]
    rows += [
        (
            f"resident memory, {name} (per 10,000 objects)",
            f"{mib:.0f} MiB ({mib * 10_000 / max(args.objects, 1):.0f} MiB)",
        )
        for name, mib in memory.items()
    ]
    rows += [
        (f"resident memory, {name} restarted, once it rests", f"{mib:.0f} MiB")
        for name, mib in restarted.items()
    ]
    python = sys.version.split()[0]
    workers = ", ".join(args.workers)
    print(f"\n{workers} restarted with {args.objects:,} Sandboxes, Python {python}\n")
    print("| measurement | value |")
    print("|---|---:|")
    for label, value in rows:
        print(f"| {label} | {value} |")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000, help="Sandboxes in the cluster")
    parser.add_argument(
        "--workers",
        nargs="+",
        choices=WORKERS,
        default=["sandbox"],
        help="the workers to kill and restart, in turn (default: sandbox)",
    )
    parser.add_argument("--pool", type=int, default=2, help="warm pool for the claim's restart")
    parser.add_argument("--write-latency-ms", type=float, default=5.0, help="API write latency")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds before giving up")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
