"""Benchmark: the watcher's throughput (changes/s from the development cluster to the event log),
beside the raw JetStream publish rate measured in the same run.

Run on purpose (it is not a test)::

    .venv/bin/python bench/watcher_throughput.py [--changes 5000] [--objects 200]

Setup: an embedded nats-server, the development cluster in this process (zero latency, no
kubelet, no garbage collector) with ``--objects`` Sandboxes, and ``sandbus run watcher`` as its
own process, as in production. Then:

- **watcher, watch path**: the watcher process is frozen (SIGSTOP), ``--changes`` merge patches
  are committed (they queue in its watch stream, as on a real API server while a watcher is
  slow), and it is thawed (SIGCONT). The figure is the time from the thaw until the event log
  holds every change: decoding the watch stream, deciding, building the CloudEvent, and the
  fenced write per change to the event log (NATS copies it into the state table), 32 objects in
  parallel. Freezing the
  watcher keeps the cost of *making* the changes (the cluster and this process's HTTP client)
  out of the measurement. The lease is long, so the frozen leader is still the leader.
- **watcher, relist path**: the watcher is stopped, every object is patched once more, and a
  new watcher process is started: from its start until the log holds every change (start-up,
  Lease, recovery from the bus, a paginated list of all objects, the diff, the publishes).
- **raw JetStream**: in the same NATS server, a scratch stream with the event log's settings
  gets the same number of messages, of the size of a real event, with a ``Nats-Msg-Id`` each:
  one publish at a time (awaiting each ack), and 32 publishers at a time (the watcher's
  parallelism). The watcher writes once per change, so the concurrent figure is the ceiling
  its design allows on this machine.

Every figure is from one machine, shared and noisy: compare figures from the same run only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import nats
from common import progress, start_sandbus, stop
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from devtools.cluster import DevCluster, LatencyModel
from devtools.natsd import NatsServer
from services.runtime.bus import BusConfig, ensure_bus

SANDBOXES = "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes"
SHARDS = 32
WATCH_PATH = "watcher, watch path (frozen, then thawed)"
RELIST_PATH = "watcher, relist path (process start to last event)"
CEILING = f"raw JetStream publish, {SHARDS} at a time (the watcher's ceiling)"


def sandbox(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": name, "namespace": "default", "labels": {"bench": "watcher"}},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "runtime", "image": "python:3.12"}]}}
        },
    }


async def run_concurrently(count: int, concurrency: int, job: Any) -> float:
    items = iter(range(count))

    async def worker() -> None:
        for index in items:
            await job(index)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def events_on_log(js: JetStreamContext) -> int:
    info = await js.stream_info(BusConfig().event_log_stream, subjects_filter="sandbus.events.>")
    return int(info.state.messages)


async def wait_for_log(js: JetStreamContext, count: int, *, limit: float = 300.0) -> float:
    """Poll until the event log holds ``count`` events; returns when (perf_counter)."""
    deadline = time.perf_counter() + limit
    while await events_on_log(js) < count:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"the event log did not reach {count} events in {limit} s")
        await asyncio.sleep(0.01)
    return time.perf_counter()


def start_watcher(
    identity: str, nats_url: str, kubeconfig: Path, log: Path
) -> subprocess.Popen[bytes]:
    return start_sandbus(
        ["run", "watcher", "--nats", nats_url, "--kubeconfig", str(kubeconfig)],
        log,
        env={
            "SANDBUS_WATCHER_IDENTITY": identity,
            "SANDBUS_WATCHER_LEASE_SECONDS": "120",
            "SANDBUS_WATCHER_SHARDS": str(SHARDS),
        },
    )


async def patch_all(http: aiohttp.ClientSession, names: list[str], count: int, tag: str) -> float:
    async def patch(index: int) -> None:
        name = names[index % len(names)]
        body = json.dumps({"metadata": {"labels": {"n": f"{tag}{index}"}}})
        async with http.patch(
            f"{SANDBOXES}/{name}",
            data=body,
            headers={"Content-Type": "application/merge-patch+json"},
        ) as response:
            response.raise_for_status()
            await response.read()

    return await run_concurrently(count, 16, patch)


async def raw_publish(js: JetStreamContext, payload: bytes, count: int, concurrency: int) -> float:
    stream = f"BENCH_RAW_{concurrency}"
    bus = BusConfig()
    await js.add_stream(
        StreamConfig(
            name=stream,
            subjects=[f"bench.raw{concurrency}.>"],
            duplicate_window=bus.duplicate_window,
            max_age=bus.event_log_max_age,
            max_bytes=bus.event_log_max_bytes,
        )
    )

    async def publish(index: int) -> None:
        await js.publish(
            f"bench.raw{concurrency}.sandbox.default.s{index % 200}",
            payload,
            stream=stream,
            headers={"Nats-Msg-Id": f"raw-{concurrency}-{index}"},
        )

    elapsed = await run_concurrently(count, concurrency, publish)
    await js.delete_stream(stream)
    return elapsed


async def measure(
    js: JetStreamContext,
    url: str,
    kubeconfig: Path,
    nats_url: str,
    workdir: Path,
    changes: int,
    objects: int,
) -> tuple[list[tuple[str, int, float]], bytes]:
    """The watcher's two paths and the raw JetStream rates (module doc) on the cluster at
    ``url`` and the NATS server at ``nats_url``, whose bus ``js`` sees; rows of (measure,
    changes, seconds), and the event payload the raw publishes used."""
    rows: list[tuple[str, int, float]] = []
    processes: list[subprocess.Popen[bytes]] = []
    names = [f"bench-{index}" for index in range(objects)]
    try:
        async with aiohttp.ClientSession(base_url=url) as http:

            async def create(index: int) -> None:
                async with http.post(SANDBOXES, json=sandbox(names[index])) as response:
                    response.raise_for_status()
                    await response.read()

            await run_concurrently(len(names), 16, create)
            progress(f"created {len(names)} Sandboxes")

            first = start_watcher("bench-1", nats_url, kubeconfig, workdir / "w1.log")
            processes.append(first)
            expected = len(names)
            await wait_for_log(js, expected, limit=60)
            progress("the watcher published the initial objects")

            # Watch path: changes queued while the watcher is frozen.
            first.send_signal(signal.SIGSTOP)
            written = await patch_all(http, names, changes, "w")
            progress(f"committed {changes} changes in {written:.2f} s (watcher frozen)")
            expected += changes
            thawed = time.perf_counter()
            first.send_signal(signal.SIGCONT)
            done = await wait_for_log(js, expected)
            rows.append((WATCH_PATH, changes, done - thawed))
            progress(f"watch path: {changes / (done - thawed):.0f} changes/s")

            # Relist path: every object changed while no watcher ran.
            await asyncio.to_thread(stop, first)  # the cluster must answer its release
            await patch_all(http, names, len(names), "r")
            expected += len(names)
            started = time.perf_counter()
            second = start_watcher("bench-2", nats_url, kubeconfig, workdir / "w2.log")
            processes.append(second)
            done = await wait_for_log(js, expected)
            rows.append((RELIST_PATH, len(names), done - started))
            await asyncio.to_thread(stop, second)
    finally:
        for process in processes:
            await asyncio.to_thread(stop, process)

    last = await js.get_last_msg(
        BusConfig().event_log_stream, "sandbus.events.sandbox.default.bench-0"
    )
    payload = last.data or b""
    progress(f"raw JetStream publishes of {len(payload)} bytes")
    rows.append(
        ("raw JetStream publish, 1 at a time", changes, await raw_publish(js, payload, changes, 1))
    )
    rows.append((CEILING, changes, await raw_publish(js, payload, changes, SHARDS)))
    return rows, payload


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-watcher-"))
    with NatsServer(store_dir=workdir / "nats") as natsd:
        cluster = DevCluster(port=0, latency=LatencyModel.zero(), controllers=[])
        await cluster.start()
        nc = await nats.connect(natsd.url)
        js = nc.jetstream()
        try:
            await ensure_bus(js, BusConfig())
            kubeconfig = cluster.write_kubeconfig(workdir / "kubeconfig")
            rows, payload = await measure(
                js, cluster.url, kubeconfig, natsd.url, workdir, args.changes, args.objects
            )
        finally:
            await nc.close()
            await cluster.stop()

    print(
        f"\nwatcher throughput, {args.changes} changes over {args.objects} Sandboxes, "
        f"event payload {len(payload)} bytes, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs\n"
    )
    print("| measure | changes | seconds | changes/s |")
    print("|---|---:|---:|---:|")
    for label, count, seconds in rows:
        print(f"| {label} | {count} | {seconds:.2f} | {count / seconds:,.0f} |")
    with contextlib.suppress(OSError):
        import shutil

        shutil.rmtree(workdir)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=5000, help="changes in the watch burst")
    parser.add_argument("--objects", type=int, default=200, help="Sandboxes to spread them over")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
