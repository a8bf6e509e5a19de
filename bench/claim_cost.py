"""Benchmark: what one claim costs the whole stack, with the refill it causes: API writes,
messages on each stream by subject, and CPU milliseconds of each process.

Run on purpose (it is not a test)::

    .venv/bin/python bench/claim_cost.py [--claims 200] [--write-latency-ms 0]

The stack of ``bench/claim_latency.py`` (an embedded nats-server, ``sandbus devcluster``, the
watcher, sandbox, pool and claim workers, each its own process), a warm pool of ``--claims``
plus 20, filled and quiet first. Then ``--claims`` claims at once, and the stack is left to
quiet down again, so that the refill the claims caused is counted too. Every figure is per
claim, over that whole stretch:

- API writes: the development cluster's resourceVersion advances once per write;
- the messages each stream gained, by the subject's first tokens (events by kind, decisions by
  worker and kind, state and memos), and their bytes (the state table and the memos keep one
  message per subject, so theirs count the objects that were new);
- the CPU each process spent.

This is where bench/analysis.md's table of CPU per claim comes from: the figures a change
to the claim path should move. ``--profile DIR`` also samples every Python process's CPU
(``bench/cpu_profile.py``) over the claims and prints where each millisecond went.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import cpu_profile
import nats.js.errors
from claim_latency import claims_to_ready, fill_pool
from common import Stack, progress

from services.runtime.bus import BusConfig
from services.runtime.reconcile.feeding import durable_name


def subject_class(subject: str) -> str:
    """``sandbus.events.pod.ns.name`` → ``sandbus.events.pod``; a decision or memo keeps its
    worker too (``sandbus.decisions.claim.sandboxclaim``)."""
    tokens = subject.split(".")
    return ".".join(tokens[:3] if tokens[1] in ("events", "state") else tokens[:4])


async def stream_counts(js: Any) -> dict[str, tuple[int, int, collections.Counter[str]]]:
    """Each stream of the bus: messages, bytes, and messages by subject class."""
    config = BusConfig()
    counts = {}
    for stream in (
        config.event_log_stream,
        config.state_stream,
        config.warm_stream,
        config.memo_stream,
        config.dead_letter_stream,
    ):
        info = await js.stream_info(stream, subjects_filter=">")
        classes: collections.Counter[str] = collections.Counter()
        for subject, messages in (info.state.subjects or {}).items():
            classes[subject_class(subject)] += messages
        counts[stream] = (info.state.messages, info.state.bytes, classes)
    return counts


@dataclasses.dataclass
class LogContents:
    """What the event log gained over the claims: bytes by subject class, and the operations
    its decisions and changes stand for (for the floor of ``--floor``)."""

    sizes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    changes: int = 0
    """Observed changes: each one a watch event the watcher read and a publish it made."""
    decisions: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    api_calls: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """Each worker's actions that are calls to the Kubernetes API."""
    bus_calls: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """Each worker's actions on a warm queue (enqueue, take, ack, purge...)."""
    sample: dict[str, Any] | None = None
    """The last Pod change, its data and headers: the message the floor is measured with."""


API_VERBS = frozenset({"create", "update", "delete", "patch", "patch status", "read", "exec"})
BUS_VERBS = frozenset({"enqueue", "purge", "take", "ack", "release", "drop queue"})
"""Actions on a warm queue, each a request to JetStream (a ``record`` is a metric, no I/O)."""


async def event_log_contents(js: Any, first: int) -> LogContents:
    """The event log from sequence ``first`` on: its bytes (data and headers) by subject class,
    which the stream's total does not say, and the operations it records."""
    stream = BusConfig().event_log_stream
    last = (await js.stream_info(stream)).state.last_seq
    contents = LogContents()
    for seq in range(first, last + 1):
        try:
            message = await js.get_msg(stream, seq)
        except nats.js.errors.NotFoundError:
            continue
        headers = sum(len(k) + len(v) + 4 for k, v in (message.headers or {}).items())
        contents.sizes[subject_class(message.subject)] += len(message.data or b"") + headers
        if message.subject.startswith("sandbus.events."):
            contents.changes += 1
            if message.subject.startswith("sandbus.events.pod."):
                contents.sample = {
                    "data": message.data.decode(),
                    "headers": dict(message.headers or {}),
                }
            continue
        decision = json.loads(message.data)["data"]
        worker = decision["worker"]
        contents.decisions[worker] += 1
        for action in decision.get("actions") or ():
            if action["verb"] in API_VERBS:
                contents.api_calls[worker] += 1
            elif action["verb"] in BUS_VERBS:
                contents.bus_calls[worker] += 1
    return contents


WORKERS = ("sandbox", "pool", "claim")


async def deliveries(js: Any) -> dict[str, int]:
    """How many messages each worker's durable consumers of the event log (one, or one a
    replica when it is sharded) have delivered."""
    delivered = dict.fromkeys(WORKERS, 0)
    for info in await js.consumers_info(BusConfig().event_log_stream):
        for worker in WORKERS:
            if info.name == durable_name(worker) or info.name.startswith(
                f"{durable_name(worker)}-"
            ):
                delivered[worker] += info.delivered.consumer_seq
    return delivered


async def op_floor(stack: Stack, sample: dict[str, Any]) -> dict[str, float]:
    """``op_floor.py`` in a process of its own against ``stack``: µs of CPU per operation."""
    path = stack.workdir / "floor-sample.json"
    path.write_text(json.dumps(sample))
    bench = Path(__file__).resolve().parent
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(bench / "op_floor.py"),
        "--nats",
        stack.nats_url,
        "--kubeconfig",
        str(stack.kubeconfig),
        "--sample",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(bench.parent)},
    )
    out, _ = await process.communicate()
    if process.returncode:
        raise RuntimeError(f"op_floor.py failed ({process.returncode})")
    floors: dict[str, float] = json.loads(out)
    return floors


def floor_table(
    n: int,
    contents: LogContents,
    delivered: dict[str, int],
    memos: int,
    floors: dict[str, float],
    cpu: dict[str, float],
) -> str:
    """Per service: the operations of a claim, and what they cost at the least (each count
    times its floor) beside what the service spent."""
    ops = ", ".join(f"{name} {value:.0f} µs" for name, value in floors.items())
    rows = [
        f"Floor per operation (op_floor.py, same stack): {ops}\n",
        "| service | deliveries | publishes | API calls | watch events | floor, ms | spent, ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    total_floor = 0.0
    watcher = contents.changes * (floors["published"] + floors["watched"]) / 1000
    rows.append(
        f"| watcher | | {contents.changes / n:.1f} | | {contents.changes / n:.1f} "
        f"| {watcher / n:.2f} | {cpu['watcher'] / n * 1000:.2f} |"
    )
    total_floor += watcher
    for worker in WORKERS:
        publishes = contents.decisions[worker] + contents.bus_calls[worker]
        floor = (
            delivered[worker] * floors["delivered"]
            + publishes * floors["published"]
            + contents.api_calls[worker] * floors["written"]
        ) / 1000
        total_floor += floor
        rows.append(
            f"| {worker} | {delivered[worker] / n:.1f} | {publishes / n:.1f} "
            f"| {contents.api_calls[worker] / n:.1f} | | {floor / n:.2f} "
            f"| {cpu[worker] / n * 1000:.2f} |"
        )
    memo_floor = memos * floors["published"] / 1000
    total_floor += memo_floor
    rows.append(f"| memos (the workers') | | {memos / n:.1f} | | | {memo_floor / n:.2f} | |")
    spent = sum(cpu[s] for s in ("watcher", *WORKERS))
    rows.append(
        f"| **four services** | | | | | **{total_floor / n:.2f}** | **{spent / n * 1000:.2f}** |"
    )
    return "\n".join(rows)


async def resource_version(http: aiohttp.ClientSession) -> int:
    async with http.get("/_devcluster/state") as response:
        return int((await response.json())["resourceVersion"])


async def main(args: argparse.Namespace) -> None:
    if args.profile:
        # Every process the stack starts inherits this one's environment.
        os.environ.update(cpu_profile.sampling_environment(args.profile))
    stack = Stack(
        "bench-claim-cost-",
        services=("watcher", "sandbox", "pool", "claim"),
        write_latency_ms=args.write_latency_ms,
        pods=3 * args.claims + 50,
        # The claim's Event, as upstream writes it; the Sandbox's lifecycle Events only with
        # --sandbox-events (upstream's default), which the claim cost of issue #28 leaves out.
        env={
            "SANDBUS_CLAIM_EVENTS": "true",
            "SANDBUS_SANDBOX_EVENTS": "true" if args.sandbox_events else "false",
        },
    )
    async with stack, aiohttp.ClientSession(base_url=stack.url) as http:
        progress(f"filling a pool of {args.claims + 20}")
        await fill_pool(http, stack.js, args.claims + 20, args.limit)
        await stack.quiet()
        writes_before = await resource_version(http)
        streams_before = await stream_counts(stack.js)
        log_first = (await stack.js.stream_info(BusConfig().event_log_stream)).state.last_seq + 1
        delivered_before = await deliveries(stack.js)
        memo_before = (await stack.js.stream_info(BusConfig().memo_stream)).state.last_seq
        cpu_before = stack.cpu()
        sampled = {name: pid for name, pid in stack.pids().items() if name != "nats-server"}
        if args.profile:
            cpu_profile.reset(sampled.values())
        progress(f"{args.claims} claims at once, then until the stack is quiet")
        await claims_to_ready(http, [0.0] * args.claims, 64, args.limit)
        await stack.quiet(limit=args.limit)
        cpu = stack.spent(cpu_before)
        profiles = cpu_profile.collect(sampled, args.profile) if args.profile else {}
        writes = await resource_version(http) - writes_before
        streams = await stream_counts(stack.js)
        contents = await event_log_contents(stack.js, log_first)
        log_bytes = contents.sizes
        floor = ""
        if args.floor and contents.sample is not None:
            progress("the floor of each operation, in a process of its own")
            after = await deliveries(stack.js)
            delivered = {w: after[w] - delivered_before[w] for w in WORKERS}
            memo_info = await stack.js.stream_info(BusConfig().memo_stream)
            memo_writes = memo_info.state.last_seq - memo_before
            floors = await op_floor(stack, contents.sample)
            floor = floor_table(args.claims, contents, delivered, memo_writes, floors, cpu)

    n = args.claims
    print(
        f"\n{n} claims at once from a pool of {n + 20}, with the refill they cause, write "
        f"latency {args.write_latency_ms:g} ms, the Sandbox's lifecycle Events "
        f"{'on' if args.sandbox_events else 'off'}, Python {sys.version.split()[0]}\n"
    )
    print(f"API writes per claim: {writes / n:.1f}\n")
    print("| stream | subject | messages per claim | bytes per claim |")
    print("|---|---|---:|---:|")
    for stream, (messages, size, classes) in streams.items():
        messages_before, size_before, classes_before = streams_before[stream]
        print(
            f"| {stream} | (all) | {(messages - messages_before) / n:.2f} "
            f"| {(size - size_before) / n:,.0f} |"
        )
        for subject, count in (classes - classes_before).most_common():
            size = f"{log_bytes[subject] / n:,.0f}" if subject in log_bytes else ""
            print(f"| | {subject} | {count / n:.2f} | {size} |")
    print("\nCPU ms per claim\n")
    print(f"| {' | '.join(cpu)} | total |")
    print(f"|{'---:|' * (len(cpu) + 1)}")
    cells = " | ".join(f"{seconds / n * 1000:.1f}" for seconds in cpu.values())
    print(f"| {cells} | {sum(cpu.values()) / n * 1000:.1f} |")
    services = ("watcher", "sandbox", "pool", "claim")
    print(f"\nsandbus's four services: {sum(cpu[s] for s in services) / n * 1000:.1f} ms")
    if floor:
        print(f"\n{floor}")
    if profiles:
        print(f"\n{cpu_profile.report(profiles, n)}")
        print(f"\n(samples in {args.profile}; again: python bench/cpu_profile.py DIR --per {n})")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=200, help="claims at once (200)")
    parser.add_argument("--write-latency-ms", type=float, default=0.0, help="API write latency")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds before giving up")
    parser.add_argument(
        "--sandbox-events",
        action="store_true",
        help="the sandbox worker's lifecycle Events on, as upstream's default (off: the cost "
        "issue #28 measures)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="sample each Python process's CPU (bench/cpu_profile.py) into DIR, and print where "
        "each millisecond went",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also measure the least CPU each kind of operation costs (bench/op_floor.py) and "
        "print each service's operations per claim times those floors",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
