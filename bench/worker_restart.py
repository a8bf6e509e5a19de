"""Benchmark: a worker restarted with ``--objects`` (10,000) Sandboxes in the state table: how long
until it has loaded them, and how long until it reconciles a Sandbox created right after it
started; and the resident memory of each service per 10,000 objects.

Run on purpose (it is not a test)::

    .venv/bin/python bench/worker_restart.py [--objects 10000]

Setup: an embedded nats-server, ``sandbus devcluster``, ``sandbus run watcher`` and ``sandbus run
sandbox`` as processes. ``--objects`` Sandboxes with ``operatingMode: Suspended`` (no Pods, so the
cluster's own work stays small) are created and reconciled once. Then the sandbox worker is
killed (SIGKILL), started again, and one new Sandbox is created as soon as the new process
exists. Measured from the start of the new process:

- **leading**: the new process has the killed one's identity, as a container restarted in its
  Pod keeps the Pod's name, so it takes its own Lease back at once (a replacement Pod, with a
  new name, would wait for the Lease to run out: a SIGKILL releases nothing); the worker's own
  work is timed from its "leading" log line;
- **loaded**: the worker's "loaded N objects from the state table" log line;
- **new object reconciled**: the ``time`` of the worker's first decision about the new Sandbox
  (read from the event log), which is when its planner ran.

The baseline, from the same run: how long a bare ``sandbus`` process takes to start (import and
connect) — the part of a restart that is not sandbus's work on the objects. Resident memory is
read from /proc for each process once the worker has settled. Compare figures from the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import nats
from sandbox_ready import cluster_url, progress
from sandbus_processes import start_sandbus, stop

from events.codec import decode_event
from events.subjects import decision_filter, state_filter
from events.types import DecisionMade
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.natsd import NatsServer
from services.runtime.streams import read_to_end

NAMESPACE = "default"
SANDBOXES = f"/apis/agents.x-k8s.io/v1beta1/namespaces/{NAMESPACE}/sandboxes"
LOADED = re.compile(r"^(\S+ \S+) INFO \S+ sandbox: loaded (\d+) objects from the state table")
LEADING = re.compile(r"^(\S+ \S+) INFO \S+ \S+: leading on Lease")


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


def resident_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def create_all(http: aiohttp.ClientSession, names: list[str], concurrency: int = 32) -> None:
    pending = iter(names)

    async def one() -> None:
        for name in pending:
            async with http.post(SANDBOXES, json=suspended(name)) as response:
                if response.status != 201:
                    raise RuntimeError(f"create {name}: {response.status}")

    await asyncio.gather(*(one() for _ in range(concurrency)))


async def decided(js: object, count: int, limit: float) -> None:
    """Wait until the sandbox worker has decided about ``count`` Sandboxes at least once."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        seen: set[str] = set()
        async for msg in read_to_end(js, "SANDBUS_EVENTS", [decision_filter("sandbox", "Sandbox")]):  # type: ignore[arg-type]
            seen.add(msg.subject)
        if len(seen) >= count:
            return
        await asyncio.sleep(2.0)
    raise RuntimeError("the worker did not reconcile every Sandbox in time")


async def first_decision(js: object, name: str, limit: float) -> datetime:
    deadline = time.monotonic() + limit
    subject = decision_filter("sandbox", "Sandbox", NAMESPACE, name)
    while time.monotonic() < deadline:
        async for msg in read_to_end(js, "SANDBUS_EVENTS", [subject]):  # type: ignore[arg-type]
            event = decode_event(msg.data)
            if isinstance(event, DecisionMade):
                return event.time
        await asyncio.sleep(0.05)
    raise RuntimeError(f"no decision about {name} within {limit} s")


def logged_at(log: Path, pattern: re.Pattern[str]) -> tuple[datetime, str] | None:
    """When ``pattern`` first matched a line of ``log`` (its first group is the timestamp), and
    the line's second group ("" without one)."""
    for line in log.read_text(errors="replace").splitlines():
        found = pattern.match(line)
        if found:
            stamp = datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f").astimezone()
            return stamp.astimezone(UTC), (found[2] if pattern.groups > 1 else "")
    return None


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    kubeconfig = workdir / "kubeconfig"
    processes: dict[str, subprocess.Popen[bytes]] = {}
    rows: list[tuple[str, str]] = []
    try:
        with NatsServer(store_dir=workdir / "nats") as natsd:
            connection = await nats.connect(natsd.url)
            js = connection.jetstream()
            await ensure_bus(js, BusConfig())
            processes["devcluster"] = start_sandbus(
                ["devcluster", "--port", "0", "--kubeconfig", str(kubeconfig)],
                workdir / "devcluster.log",
            )
            url = await cluster_url(kubeconfig, processes["devcluster"])
            run = ["--nats", natsd.url, "--kubeconfig", str(kubeconfig)]
            processes["watcher"] = start_sandbus(["run", "watcher", *run], workdir / "watcher.log")
            # One identity for both processes, as a container restarted in its Pod keeps the
            # Pod's name: the new process takes its own Lease back at once.
            identity = {"SANDBUS_IDENTITY": "sandbox-0"}
            processes["sandbox"] = start_sandbus(
                ["run", "sandbox", *run], workdir / "sandbox-1.log", identity
            )
            async with aiohttp.ClientSession(base_url=url) as http:
                names = [f"sb-{index:05d}" for index in range(args.objects)]
                started = time.perf_counter()
                await create_all(http, names)
                progress(
                    f"created {args.objects} Sandboxes in {time.perf_counter() - started:.1f} s"
                )
                await decided(js, args.objects, args.limit)
                progress("every Sandbox reconciled once")
                await asyncio.sleep(3.0)
                memory = {
                    name: resident_mib(process.pid)
                    for name, process in processes.items()
                    if name in ("watcher", "sandbox")
                }
                state = 0
                async for _ in read_to_end(js, "SANDBUS_STATE", [state_filter("Sandbox")]):
                    state += 1

                # The baseline: a sandbus process that only imports and connects.
                baseline_started = time.perf_counter()
                await asyncio.to_thread(
                    subprocess.run,
                    [
                        sys.executable,
                        "-c",
                        "import services.runtime.reconcile.serving, kubernetes_asyncio, nats",
                    ],
                    check=True,
                )
                baseline = time.perf_counter() - baseline_started

                processes["sandbox"].send_signal(signal.SIGKILL)
                processes["sandbox"].wait()
                restart_at = datetime.now(UTC)
                processes["sandbox"] = start_sandbus(
                    ["run", "sandbox", *run], workdir / "sandbox-2.log", identity
                )
                async with http.post(SANDBOXES, json=suspended("the-new-one")) as response:
                    response.raise_for_status()
                new_decided = await first_decision(js, "the-new-one", args.limit)
                log = workdir / "sandbox-2.log"
                leading = logged_at(log, LEADING)
                loaded = logged_at(log, LOADED)
                assert leading is not None and loaded is not None, log.read_text()
                lease_wait = (leading[0] - restart_at).total_seconds()
                load_seconds = (loaded[0] - leading[0]).total_seconds()
                new_seconds = (new_decided - leading[0]).total_seconds()
            await connection.close()
            rows = [
                ("objects in the state table (Sandboxes)", f"{state:,}"),
                (
                    "a bare process: import the runtime and its clients (baseline)",
                    f"{baseline:.2f} s",
                ),
                (
                    "process start to leading (its own Lease, taken back)",
                    f"{lease_wait:.2f} s",
                ),
                (
                    f"leading to loaded ({int(loaded[1]):,} objects)",
                    f"{load_seconds:.2f} s ({load_seconds / baseline:.1f}x baseline)",
                ),
                (
                    "leading to the new Sandbox's first reconcile",
                    f"{new_seconds:.2f} s ({new_seconds / baseline:.1f}x baseline)",
                ),
                *(
                    (
                        f"resident memory, {name} (per 10,000 objects)",
                        f"{mib:.0f} MiB ({mib * 10_000 / args.objects:.0f} MiB)",
                    )
                    for name, mib in memory.items()
                ),
            ]
    finally:
        for process in reversed(processes.values()):
            await asyncio.to_thread(stop, process)
        if rows:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            progress(f"logs kept in {workdir}")
    python = sys.version.split()[0]
    print(f"\nsandbox worker restarted with {args.objects:,} Sandboxes, Python {python}\n")
    print("| measurement | value |")
    print("|---|---:|")
    for label, value in rows:
        print(f"| {label} | {value} |")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000, help="Sandboxes in the cluster")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds before giving up")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
