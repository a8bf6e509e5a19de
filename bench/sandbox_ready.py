"""Benchmark: Sandboxes from create to Ready through sandbus, beside bare Pods from create to
Ready on the same development cluster in the same run.

Run on purpose (it is not a test)::

    .venv/bin/python bench/sandbox_ready.py [--count 100] [--rounds 3] [--concurrency 10]

Setup, as in production but on one machine: an embedded nats-server, ``sandbus devcluster`` (its
simulated kubelet readies a started Pod after ``--pod-ready-delay`` seconds) and ``sandbus run
watcher`` and ``sandbus run sandbox``, each its own process. This process creates objects and
follows one watch (and, for the floor, runs the floor controller), so its own work is small
beside what it measures.

- **bare Pod** (the baseline): ``--count`` Pods are created, ``--concurrency`` requests at a time,
  straight through the API; each is timed from its create request to the first watch event that
  shows it Ready. This is what a cold Pod costs on this cluster, with nothing of sandbus in it.
- **Sandbox through sandbus**: the same for Sandboxes. The path is the product's: the watcher
  publishes the Sandbox to the event log; the sandbox worker plans and creates its Pod; the
  kubelet starts it; the watcher publishes the Pod's change; the worker writes the Sandbox's
  Ready condition. The difference from the baseline is sandbus's own cost per Sandbox.

- **Sandbox by the floor controller**: the same Sandboxes once more, with sandbus stopped and a
  controller of a few lines in this process (:func:`floor_controller`) making the same two
  writes per Sandbox: the Pod sandbus would create, then the status sandbus would write. It
  keeps no log, no cache and no state, so its figure is what a Sandbox costs this cluster
  itself: its own create and status write, its watch events and the kubelet's work on its Pod.
  A controller of Sandboxes can hardly cost less on this machine; sandbus's figure over the
  floor's is sandbus's own share.

The bare Pods and sandbus take turns for ``--rounds`` rounds, then (sandbus stopped) the bare
Pods and the floor controller, each round with objects of its own, and each round's ratio is
its Sandboxes' wall time over its bare Pods': the machine's speed drifts over seconds, so a
ratio of two paths measured side by side is steadier than one of two paths far apart; the
median ratio is the figure.

One object of each kind is made Ready first (not counted), so that every process is up, elected
and subscribed before the clock runs. The CPU seconds each process spent during each path are
printed too: they show where the time goes. Every figure is from one machine, shared and
noisy: compare figures from the same run only.

Last, from the event log of the same run: the sandbox worker's reconcile passes and writes per
Sandbox, and the bytes of its decision events three ways: as recorded (inputs by reference), as
they were before decisions kept their inputs (digest only), and as they would be with every
observed object inline (the alternative to references).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
from sandbus_processes import start_sandbus, stop

from api.agents import Sandbox
from api.keys import LABEL_SANDBOX_NAME_HASH, name_hash
from devtools.natsd import NatsServer
from events.codec import decode_event, encode_event
from events.subjects import decision_filter, event_filter
from events.types import DecisionMade, ObjectAdded, ObjectModified
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.streams import read_to_end
from services.sandbox.core.pods import new_pod

NAMESPACE = "default"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
SANDBOXES = f"/apis/agents.x-k8s.io/v1beta1/namespaces/{NAMESPACE}/sandboxes"
POD_SPEC = {"containers": [{"name": "runtime", "image": "python:3.12"}]}
BARE = "bare Pod (baseline)"
SANDBUS = "Sandbox through sandbus"
FLOOR = "Sandbox by the floor controller"


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": POD_SPEC}


def sandbox(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {"podTemplate": {"spec": POD_SPEC}},
    }


def floor_status(
    written: dict[str, Any], pod_obj: dict[str, Any], generation: int
) -> dict[str, Any]:
    """The status sandbus ``written`` for another Sandbox, made this Sandbox's: its Pod's
    name hash, IPs and node, its generation, the time now."""
    labels = pod_obj["metadata"].get("labels") or {}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        **written,
        "conditions": [
            {**condition, "observedGeneration": generation, "lastTransitionTime": now}
            for condition in written.get("conditions") or ()
        ],
        "selector": f"{LABEL_SANDBOX_NAME_HASH}={labels.get(LABEL_SANDBOX_NAME_HASH)}",
        "podIPs": [ip["ip"] for ip in (pod_obj.get("status") or {}).get("podIPs") or ()],
        "nodeName": pod_obj["spec"].get("nodeName"),
    }


async def floor_controller(
    http: aiohttp.ClientSession, prefix: str, written: dict[str, Any]
) -> None:
    """The least any Sandbox controller does, run in this process: for each Sandbox named
    ``prefix...``, create its Pod (the one sandbus creates, by sandbus's own function) once the
    Sandbox is seen, and write its Ready status (the status sandbus ``written`` for another
    Sandbox, see :func:`floor_status`) once the Pod is seen Ready. Two watches, two writes, no
    event log, no cache, no retries: the API work of a Sandbox and next to nothing else."""
    created: set[str] = set()
    reported: set[str] = set()
    generations: dict[str, int] = {}
    status_path = f"{SANDBOXES}/{{}}/status"
    merge = {"Content-Type": "application/merge-patch+json"}

    writes: set[asyncio.Task[None]] = set()

    async def watch(
        collection: str,
        params: dict[str, str],
        on_event: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        async with http.get(collection, params=params) as listed:
            version = (await listed.json())["metadata"]["resourceVersion"]
        params = {**params, "watch": "1", "resourceVersion": version, "timeoutSeconds": "600"}
        async with http.get(collection, params=params) as stream:
            async for line in stream.content:
                # Each write on its own, as a controller with workers in parallel does: the
                # watch reads on while the API serves it.
                write = asyncio.create_task(on_event(json.loads(line)["object"]))
                writes.add(write)
                write.add_done_callback(writes.discard)

    async def on_sandbox(obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if not name.startswith(prefix) or name in created:
            return
        created.add(name)
        generations[name] = obj["metadata"].get("generation", 1)
        body = new_pod(msgspec.convert(obj, Sandbox), name_hash(name))
        async with http.post(PODS, json=body) as response:
            response.raise_for_status()

    async def on_pod(obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if not name.startswith(prefix) or name in reported or not is_ready(obj):
            return
        reported.add(name)
        patch = {"status": floor_status(written, obj, generations.get(name, 1))}
        async with http.patch(status_path.format(name), json=patch, headers=merge) as response:
            response.raise_for_status()

    await asyncio.gather(
        watch(SANDBOXES, {}, on_sandbox),
        watch(PODS, {"labelSelector": LABEL_SANDBOX_NAME_HASH}, on_pod),
    )


def is_ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Timing:
    label: str
    round: int
    latencies: list[float]
    wall: float
    cpu: dict[str, float]
    """CPU seconds each process spent while this path was measured."""

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.wall

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def sequential_writes(
    http: aiohttp.ClientSession, rounds: int, writes: int, namespace: str = NAMESPACE
) -> list[float]:
    """Seconds for ``writes`` sequential writes (a create and patches of one ConfigMap), each
    of ``rounds`` times: the baseline of a latency figure, on the same cluster in the same run."""
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    out = []
    for index in range(rounds):
        name = f"baseline-{index}"
        started = time.perf_counter()
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {}}
        async with http.post(configmaps, json=body) as response:
            response.raise_for_status()
        for step in range(writes - 1):
            async with http.patch(
                f"{configmaps}/{name}",
                json={"data": {"step": str(step)}},
                headers={"Content-Type": "application/merge-patch+json"},
            ) as response:
                response.raise_for_status()
        out.append(time.perf_counter() - started)
    return out


async def to_ready(
    http: aiohttp.ClientSession,
    collection: str,
    make: Callable[[str], dict[str, Any]],
    names: list[str],
    concurrency: int,
    limit: float,
) -> tuple[list[float], float]:
    """Create ``names`` and return each one's seconds from create request to Ready, and the
    seconds from the first request to the last Ready."""
    sent: dict[str, float] = {}
    ready: dict[str, float] = {}
    all_ready = asyncio.Event()
    async with http.get(collection) as response:
        response.raise_for_status()
        resource_version = (await response.json())["metadata"]["resourceVersion"]

    async def follow() -> None:
        params = {"watch": "1", "resourceVersion": resource_version, "timeoutSeconds": "600"}
        async with http.get(collection, params=params) as stream:
            stream.raise_for_status()
            async for line in stream.content:
                obj = json.loads(line)["object"]
                name = obj.get("metadata", {}).get("name")
                if name in sent and name not in ready and is_ready(obj):
                    ready[name] = time.perf_counter()
                    if len(ready) == len(names):
                        all_ready.set()

    pending = iter(names)

    async def create() -> None:
        for name in pending:
            sent[name] = time.perf_counter()
            async with http.post(collection, json=make(name)) as response:
                if response.status != 201:
                    raise RuntimeError(f"create {name}: {response.status} {await response.text()}")

    watching = asyncio.create_task(follow())
    try:
        await asyncio.sleep(0.1)  # the watch is open before the first create
        started = time.perf_counter()
        await asyncio.gather(*(create() for _ in range(concurrency)))
        async with asyncio.timeout(limit):
            await all_ready.wait()
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    return [ready[name] - sent[name] for name in names], max(ready.values()) - started


async def cluster_url(kubeconfig: Path, process: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 60
    while not kubeconfig.is_file():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("sandbus devcluster did not start")
        await asyncio.sleep(0.05)
    match = re.search(r"server:\s*(\S+)", kubeconfig.read_text())
    if match is None:
        raise RuntimeError(f"no server in {kubeconfig}")
    return match.group(1).strip("'\"")


@dataclass
class DecisionFigures:
    decisions: int
    writes: int
    recorded: int
    digest_only: int
    inline: int
    by_write: collections.Counter[str] = field(default_factory=collections.Counter)


async def decision_figures(js: Any, prefix: str) -> DecisionFigures:
    """The sandbox worker's decisions about the measured Sandboxes, from the event log."""
    stream = BusConfig().event_log_stream
    objects: dict[tuple[str, str, str], Any] = {}
    async for msg in read_to_end(js, stream, [event_filter()]):
        event = decode_event(msg.data)
        if isinstance(event, ObjectAdded | ObjectModified):
            obj = event.data.object
            version = str((obj.get("metadata") or {}).get("resourceVersion"))
            objects[(event.kind, event.name, version)] = obj
    figures = DecisionFigures(0, 0, 0, 0, 0)
    async for msg in read_to_end(js, stream, [decision_filter("sandbox", "Sandbox")]):
        event = decode_event(msg.data)
        if not isinstance(event, DecisionMade) or not event.data.key.name.startswith(prefix):
            continue
        figures.decisions += 1
        for action in event.data.actions:
            if action.error is None:
                figures.writes += 1
                detail = re.sub(rf"{prefix}[\w-]*", "<name>", action.detail)
                figures.by_write[f"{action.verb} {action.target.kind}: {detail}"] += 1
        figures.recorded += len(msg.data)
        bare = msgspec.structs.replace(event.data, inputs=None, plan_digest="")
        figures.digest_only += len(encode_event(msgspec.structs.replace(event, data=bare)))
        inline = [
            objects.get((ref.kind, ref.name, ref.resource_version or ""), {})
            for ref in (event.data.inputs.observed if event.data.inputs else ())
        ]
        figures.inline += len(msg.data) + len(json.dumps(inline, separators=(",", ":")))
    return figures


MeasuredPath = tuple[str, str, str, Callable[[str], dict[str, Any]]]
"""A path measured: its label, the prefix of its objects' names, their collection, a maker."""


async def measure(
    http: aiohttp.ClientSession,
    args: argparse.Namespace,
    pids: dict[str, int],
    paths: tuple[MeasuredPath, ...],
    timings: list[Timing],
    first_round: int,
) -> None:
    """``args.rounds`` rounds of ``paths``, taking turns, after one warm-up object of each."""
    # An object Ready means every process is up, elected and subscribed: none of them
    # starts during a measurement.
    for _, prefix, collection, make in paths:
        await to_ready(http, collection, make, [f"{prefix}-warmup-{first_round}"], 1, 120)
    # The paths take turns, round after round: the machine's speed drifts over seconds, and
    # each round's ratio compares two paths measured side by side.
    for round_ in range(first_round, first_round + args.rounds):
        for label, prefix, collection, make in paths:
            names = [f"{prefix}-r{round_}-{index}" for index in range(args.count)]
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            latencies, wall = await to_ready(
                http, collection, make, names, args.concurrency, args.limit
            )
            cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
            timings.append(Timing(label, round_, latencies, wall, cpu))
            progress(f"round {round_}, {label}: {len(names)} Ready in {wall:.2f} s")


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    kubeconfig = workdir / "kubeconfig"
    processes: dict[str, subprocess.Popen[bytes]] = {}
    timings: list[Timing] = []
    try:
        with NatsServer(store_dir=workdir / "nats") as natsd:
            connection = await nats.connect(natsd.url)
            await ensure_bus(connection.jetstream(), BusConfig())
            await connection.close()
            devcluster = start_sandbus(
                [
                    "devcluster",
                    "--port",
                    "0",
                    "--kubeconfig",
                    str(kubeconfig),
                    "--pod-ready-delay",
                    str(args.pod_ready_delay),
                    "--nodes",  # room for every Pod of every path, 110 a node
                    str(math.ceil((4 * (args.count * args.rounds + 1)) / 110)),
                ],
                workdir / "devcluster.log",
            )
            processes["devcluster"] = devcluster
            url = await cluster_url(kubeconfig, devcluster)
            for service in ("watcher", "sandbox"):
                processes[service] = start_sandbus(
                    ["run", service, "--nats", natsd.url, "--kubeconfig", str(kubeconfig)],
                    workdir / f"{service}.log",
                )
            assert natsd.pid is not None
            pids = {
                "nats-server": natsd.pid,
                **{name: process.pid for name, process in processes.items()},
                "this process": os.getpid(),
            }
            bare = (BARE, "pod", PODS, pod)
            through_sandbus = (SANDBUS, "sandbox", SANDBOXES, sandbox)
            by_floor = (FLOOR, "floor", SANDBOXES, sandbox)
            async with aiohttp.ClientSession(base_url=url) as http:
                await measure(http, args, pids, (bare, through_sandbus), timings, first_round=1)
                # Then sandbus stops and this process's floor controller serves the Sandboxes
                # named floor-...: the same API work with no controller cost to speak of.
                for service in ("watcher", "sandbox"):
                    await asyncio.to_thread(stop, processes[service])
                    del pids[service]
                async with http.get(f"{SANDBOXES}/sandbox-warmup-1") as response:
                    written = (await response.json())["status"]
                floor = asyncio.create_task(floor_controller(http, "floor-", written))
                try:
                    await measure(
                        http, args, pids, (bare, by_floor), timings, first_round=args.rounds + 1
                    )
                finally:
                    floor.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await floor
            await asyncio.sleep(1.0)  # the last decisions and their objects reach the log
            connection = await nats.connect(natsd.url)
            figures = await decision_figures(connection.jetstream(), "sandbox-")
            await connection.close()
    finally:
        for process in reversed(processes.values()):
            await asyncio.to_thread(stop, process)
        if timings:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            progress(f"logs kept in {workdir}")

    baselines = {timing.round: timing for timing in timings if timing.label == BARE}
    print(
        f"\ncreate to Ready, {args.count} objects, {args.rounds} rounds of each pair, "
        f"{args.concurrency} creates in flight, "
        f"kubelet ready delay {args.pod_ready_delay} s, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs\n"
    )
    print(
        "| round | path | wall s | Ready/s | p50 ms | p95 ms | mean ms "
        "| wall x baseline of the round |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for timing in timings:
        print(
            f"| {timing.round} | {timing.label} | {timing.wall:.2f} | {timing.rate:,.1f} "
            f"| {timing.percentile(0.5) * 1000:.0f} | {timing.percentile(0.95) * 1000:.0f} "
            f"| {statistics.fmean(timing.latencies) * 1000:.0f} "
            f"| {timing.wall / baselines[timing.round].wall:.2f} |"
        )
    medians = {}
    for label in (SANDBUS, FLOOR):
        ratios = [t.wall / baselines[t.round].wall for t in timings if t.label == label]
        medians[label] = statistics.median(ratios)
        print(
            f"\n{label} x bare Pods, per round: {', '.join(f'{r:.2f}' for r in ratios)}; "
            f"median {medians[label]:.2f}"
        )
    print(
        f"\nsandbus x the floor controller (the ratio of the two medians): "
        f"{medians[SANDBUS] / medians[FLOOR]:.2f}"
    )
    names = list(timings[0].cpu)
    print("\nCPU seconds each process spent while a path was measured (—: stopped)\n")
    print(f"| round | path | {' | '.join(names)} |")
    print(f"|---:|---|{'---:|' * len(names)}")
    for timing in timings:
        cells = " | ".join(f"{timing.cpu[n]:.2f}" if n in timing.cpu else "—" for n in names)
        print(f"| {timing.round} | {timing.label} | {cells} |")
    count = args.count * args.rounds + 1  # the warm-up Sandbox is in the log too
    per = max(figures.decisions, 1)
    print("\nThe sandbox worker's decisions about these Sandboxes (from the event log)\n")
    print(
        "| passes per Sandbox | writes per Sandbox | bytes per decision: digest only (before) "
        "| inputs by reference (now) | objects inline (the alternative) |"
    )
    print("|---:|---:|---:|---:|---:|")
    print(
        f"| {figures.decisions / count:.1f} | {figures.writes / count:.1f} "
        f"| {figures.digest_only / per:,.0f} | {figures.recorded / per:,.0f} "
        f"({figures.recorded / max(figures.digest_only, 1):.2f}x) "
        f"| {figures.inline / per:,.0f} ({figures.inline / max(figures.digest_only, 1):.2f}x) |"
    )
    print("\nThe writes per Sandbox, by what they did\n")
    print("| write | per Sandbox |")
    print("|---|---:|")
    for write, times in figures.by_write.most_common():
        print(f"| {write} | {times / count:.2f} |")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100, help="objects of each kind")
    parser.add_argument("--concurrency", type=int, default=10, help="creates in flight")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of both paths, taking turns (3)"
    )
    parser.add_argument(
        "--pod-ready-delay", type=float, default=0.2, help="the simulated kubelet's ready delay"
    )
    parser.add_argument("--limit", type=float, default=300.0, help="seconds before giving up")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
