"""Benchmark: the development cluster holding 10,000 objects: list, watch and memory.

Run on purpose (it is not a test)::

    .venv/bin/python bench/devcluster_list_watch.py [--objects N] [--kinds KIND ...]

For each kind (configmaps, sandboxes) a child process starts a fresh in-process
:class:`DevCluster` (zero latency model, no kubelet and no garbage collector, so only the API
server works), creates ``--objects`` objects through the HTTP API and then measures:

- **write rate**: the creates themselves (``--concurrency`` requests in flight);
- **list latency**: one unpaginated LIST of everything, and the whole walk with ``limit=500``
  (time to the last byte of the last page; the client reads only each page's continue token
  and item count, skipping the items, so that the walk measures the server);
- **watch throughput**: a burst of ``--burst`` merge patches against existing objects, timed
  from the first write sent to the last MODIFIED event received, by 1 watcher and by
  ``--watchers`` concurrent watchers (the second figure counts events delivered to all of
  them); plus a watch from resourceVersion 0, which replays every object as ADDED;
- **pods to Ready** (``pods``, its own child): with the simulated kubelet running (default
  settings, as ``sandbus devcluster`` has them), ``--pods`` Pods created at once and the time
  from the first create to the moment a watch has seen every one of them Ready; the write path
  and the kubelet's status writes under load;
- **resident memory**: VmRSS from /proc/self/status after start and after loading, per object.
  One process per kind, because CPython keeps freed memory for reuse: a second cluster in the
  same process would show almost no growth.

Why the baseline: the machine is shared and noisy, so absolute rates mean little from one run
to the next. The parent process therefore measures a trivial aiohttp handler (``GET`` → 200
``{}``, same client settings, client and server on one event loop like the children) before
and after the children run, and every rate is also quoted as a multiple of the first figure;
the second one shows how much the machine drifted meanwhile. A latency is quoted the same way,
as the rate it amounts to (one over the latency) divided by the baseline rate: 0.01 means one
request took as long as a hundred trivial ones. Client and server share one
event loop, so every figure includes the client's share of the CPU: treat them as lower
bounds for the server alone.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import msgspec
from aiohttp import web

from api.objects import Json
from devtools.cluster import DevCluster, LatencyModel, SimulationSettings

# -- measurement helpers --------------------------------------------------------------------


def rss_bytes() -> int:
    """Resident set size of this process (VmRSS, kB in /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def run_concurrently(
    count: int, concurrency: int, job: Callable[[int], Awaitable[None]]
) -> float:
    """Run job(0..count-1) with at most ``concurrency`` in flight; the elapsed seconds."""
    queue = iter(range(count))

    async def worker() -> None:
        for index in queue:
            await job(index)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


@dataclass
class Row:
    section: str
    metric: str
    value: str
    rate: float | None = None  # per second, for rates quoted against the baseline


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)

    def add(self, section: str, metric: str, value: str, rate: float | None = None) -> None:
        self.rows.append(Row(section, metric, value, rate))
        print(f"  {section:<11} {metric:<60} {value:>16}", file=sys.stderr, flush=True)

    def table(self, baseline_rps: float) -> str:
        header = ("section", "metric", "value", "x baseline")
        cells = [header]
        for row in self.rows:
            ratio = ""
            if row.rate is not None:
                multiple = row.rate / baseline_rps
                ratio = f"{multiple:.2f}" if multiple >= 0.1 else f"{multiple:.3g}"
            cells.append((row.section, row.metric, row.value, ratio))
        widths = [max(len(cell[i]) for cell in cells) for i in range(4)]

        def render(cell: tuple[str, str, str, str]) -> str:
            parts = [
                text.ljust(w) if i < 2 else text.rjust(w)
                for i, (text, w) in enumerate(zip(cell, widths, strict=True))
            ]
            return "| " + " | ".join(parts) + " |"

        rule = (
            "|"
            + "|".join(
                "-" * (w + 2) if i < 2 else "-" * (w + 1) + ":" for i, w in enumerate(widths)
            )
            + "|"
        )
        return "\n".join([render(cells[0]), rule, *(render(cell) for cell in cells[1:])])


# -- baseline -------------------------------------------------------------------------------


async def measure_baseline(report: Report, label: str, requests: int, concurrency: int) -> float:
    """Request rate of a trivial aiohttp handler, same loop, same client: the yardstick."""

    async def trivial(_: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/", trivial)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:

            async def get(_: int) -> None:
                async with http.get("/") as response:
                    await response.read()

            await run_concurrently(200, 1, get)  # warm up connections
            sequential = await run_concurrently(requests, 1, get)
            parallel = await run_concurrently(requests, concurrency, get)
    finally:
        await runner.cleanup()
    rate = requests / parallel
    report.add(label, "trivial aiohttp GET, one at a time", f"{requests / sequential:,.0f} req/s")
    report.add(label, f"trivial aiohttp GET, {concurrency} in flight", f"{rate:,.0f} req/s", rate)
    return rate


# -- the cluster under load -----------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    name: str
    path: str  # the namespaced collection
    make: Callable[[int], Json]
    patch: Callable[[int], Json]


def _configmap(index: int) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"cm-{index:05d}",
            "labels": {"bench": "list-watch", "shard": str(index % 16)},
        },
        "data": {"key": f"value-{index}", "payload": "x" * 200},
    }


def _sandbox(index: int) -> Json:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {
            "name": f"sb-{index:05d}",
            "labels": {"bench": "list-watch", "shard": str(index % 16)},
        },
        "spec": {
            "podTemplate": {
                "metadata": {"labels": {"app": "bench"}},
                "spec": {
                    "containers": [
                        {
                            "name": "runtime",
                            "image": "registry.example.com/sandboxes/python-runtime:3.12",
                            "ports": [{"containerPort": 8888}],
                            "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                        }
                    ]
                },
            },
            "operatingMode": "Running",
        },
    }


KINDS = {
    "configmaps": Kind(
        "configmaps",
        "/api/v1/namespaces/default/configmaps",
        _configmap,
        lambda n: {"data": {"key": f"burst-{n}"}},
    ),
    "sandboxes": Kind(
        "sandboxes",
        "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes",
        _sandbox,
        lambda n: {"metadata": {"annotations": {"bench/burst": str(n)}}},
    ),
}
MERGE = {"Content-Type": "application/merge-patch+json"}


async def load(http: aiohttp.ClientSession, kind: Kind, count: int, concurrency: int) -> float:
    async def create(index: int) -> None:
        async with http.post(kind.path, json=kind.make(index)) as response:
            body = await response.read()
            if response.status != 201:
                raise RuntimeError(f"create {index}: {response.status} {body[:300]!r}")

    return await run_concurrently(count, concurrency, create)


class _PageMeta(msgspec.Struct):
    """Just what a paginating client needs from a page; the items are skipped, not decoded."""

    class Metadata(msgspec.Struct):
        continue_: str = msgspec.field(default="", name="continue")

    metadata: Metadata
    items: list[msgspec.Raw]


_page_meta = msgspec.json.Decoder(_PageMeta)


async def timed_get(http: aiohttp.ClientSession, url: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    async with http.get(url) as response:
        body = await response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {url}: {response.status} {body[:300]!r}")
    return time.perf_counter() - started, body


async def measure_lists(
    report: Report, http: aiohttp.ClientSession, kind: Kind, count: int, repeat: int
) -> str:
    """Full and paginated list latency; returns the list's resourceVersion."""
    full: list[float] = []
    size = 0
    rv = ""
    for _ in range(repeat):
        elapsed, body = await timed_get(http, kind.path)
        full.append(elapsed)
        size = len(body)
    listed = json.loads(body)
    rv = listed["metadata"]["resourceVersion"]
    if len(listed["items"]) != count:
        raise RuntimeError(f"listed {len(listed['items'])} of {count}")
    report.add(
        kind.name,
        f"LIST all {count:,} (one request, {size / 1e6:.1f} MB), median of {repeat}",
        f"{statistics.median(full) * 1000:,.0f} ms",
        1 / statistics.median(full),
    )
    report.add(kind.name, "LIST all, best", f"{min(full) * 1000:,.0f} ms", 1 / min(full))

    walks: list[float] = []
    pages: list[float] = []
    for _ in range(repeat):
        started = time.perf_counter()
        token = ""
        seen = 0
        while True:
            url = f"{kind.path}?limit=500" + (f"&continue={token}" if token else "")
            elapsed, body = await timed_get(http, url)
            pages.append(elapsed)
            page = _page_meta.decode(body)  # needed for the token; outside the per-page timing
            seen += len(page.items)
            token = page.metadata.continue_
            if not token:
                break
        walks.append(time.perf_counter() - started)
        if seen != count:
            raise RuntimeError(f"paginated walk saw {seen} of {count}")
    report.add(
        kind.name,
        f"LIST limit=500: whole walk ({count // 500} pages), median of {repeat}",
        f"{statistics.median(walks) * 1000:,.0f} ms",
        1 / statistics.median(walks),
    )
    report.add(
        kind.name,
        "LIST limit=500: one page, median",
        f"{statistics.median(pages) * 1000:,.1f} ms",
        1 / statistics.median(pages),
    )
    return rv


async def watch_until(
    http: aiohttp.ClientSession, url: str, expected: int, event_type: bytes, opened: asyncio.Event
) -> float:
    """Open a watch, signal ``opened`` on the 200, and return the perf_counter of the moment
    the ``expected``-th event of ``event_type`` arrived."""
    received = 0
    async with http.get(url, timeout=aiohttp.ClientTimeout(total=None, sock_read=120)) as response:
        if response.status != 200:
            raise RuntimeError(f"watch: {response.status}")
        opened.set()
        async for line in response.content:
            if event_type in line[:24]:
                received += 1
                if received == expected:
                    return time.perf_counter()
    raise RuntimeError(f"watch ended after {received} of {expected} events")


async def wait_registered(cluster: DevCluster, watchers: int) -> None:
    """The 200 is written before the watch joins the fan-out; wait until the server holds them."""
    deadline = time.monotonic() + 10
    while len(cluster.watches.active()) < watchers:
        if time.monotonic() > deadline:
            raise RuntimeError("watches did not register")
        await asyncio.sleep(0.005)


def patcher(
    http: aiohttp.ClientSession, kind: Kind, count: int, round_: int
) -> Callable[[int], Awaitable[None]]:
    """Merge patches that each change one object (spread over all of them), so each one is a
    real write and a MODIFIED event."""
    names = [kind.make(i)["metadata"]["name"] for i in range(count)]

    async def patch(n: int) -> None:
        name = names[(n * 7919 + round_) % count]
        body = kind.patch(round_ * 1_000_000 + n)
        async with http.patch(f"{kind.path}/{name}", json=body, headers=MERGE) as response:
            text = await response.read()
            if response.status != 200:
                raise RuntimeError(f"patch {name}: {response.status} {text[:300]!r}")

    return patch


async def measure_burst(
    http: aiohttp.ClientSession,
    cluster: DevCluster,
    kind: Kind,
    count: int,
    burst: int,
    concurrency: int,
    watchers: int,
    round_: int,
) -> tuple[float, float]:
    """``burst`` patches while ``watchers`` watch from the current resourceVersion; returns
    (seconds to finish the writes, seconds from the first write to the moment the slowest
    watcher had every event)."""
    async with http.get(kind.path + "?limit=1") as response:
        rv = (await response.json())["metadata"]["resourceVersion"]
    url = f"{kind.path}?watch=true&resourceVersion={rv}"
    opened = [asyncio.Event() for _ in range(watchers)]
    tasks = [
        asyncio.create_task(watch_until(http, url, burst, b'"MODIFIED"', event)) for event in opened
    ]
    for event in opened:
        await event.wait()
    await wait_registered(cluster, watchers)

    started = time.perf_counter()
    writes = await run_concurrently(burst, concurrency, patcher(http, kind, count, round_))
    finished = await asyncio.gather(*tasks)
    return writes, (max(finished) if finished else time.perf_counter()) - started


async def measure_watches(
    report: Report,
    http: aiohttp.ClientSession,
    cluster: DevCluster,
    kind: Kind,
    count: int,
    burst: int,
    concurrency: int,
    watchers: int,
) -> None:
    writes, _ = await measure_burst(http, cluster, kind, count, burst, concurrency, 0, 1)
    report.add(
        kind.name,
        f"PATCH burst of {burst:,}, no watcher ({concurrency} in flight)",
        f"{burst / writes:,.0f} writes/s",
        burst / writes,
    )
    _, one = await measure_burst(http, cluster, kind, count, burst, concurrency, 1, 2)
    report.add(
        kind.name,
        f"watch, 1 watcher: {burst:,} events, first write → last event",
        f"{burst / one:,.0f} events/s",
        burst / one,
    )
    _, many = await measure_burst(http, cluster, kind, count, burst, concurrency, watchers, 3)
    report.add(
        kind.name,
        f"watch, {watchers} watchers: per watcher",
        f"{burst / many:,.0f} events/s",
        burst / many,
    )
    report.add(
        kind.name,
        f"watch, {watchers} watchers: delivered in total",
        f"{burst * watchers / many:,.0f} events/s",
        burst * watchers / many,
    )

    # A watch without a resourceVersion first replays the current state as ADDED events.
    opened = asyncio.Event()
    started = time.perf_counter()
    done = await watch_until(
        http, f"{kind.path}?watch=true&resourceVersion=0", count, b'"ADDED"', opened
    )
    report.add(
        kind.name,
        f"watch from RV 0: {count:,} initial ADDED events",
        f"{count / (done - started):,.0f} events/s",
        count / (done - started),
    )


async def bench_kind(report: Report, kind: Kind, args: argparse.Namespace) -> None:
    gc.collect()
    before_start = rss_bytes()
    async with DevCluster(port=0, latency=LatencyModel.zero(), controllers=[]) as cluster:
        gc.collect()
        before = rss_bytes()
        connector = aiohttp.TCPConnector(limit=args.concurrency + args.watchers + 4)
        async with aiohttp.ClientSession(cluster.url, connector=connector) as http:
            seconds = await load(http, kind, args.objects, args.concurrency)
            report.add(
                kind.name,
                f"CREATE {args.objects:,} ({args.concurrency} in flight)",
                f"{args.objects / seconds:,.0f} writes/s",
                args.objects / seconds,
            )
            gc.collect()
            after = rss_bytes()
            report.add(
                kind.name, "RSS: process with an empty cluster", f"{before / 2**20:,.0f} MiB"
            )
            report.add(
                kind.name,
                "RSS: cluster start (store, CRDs, server)",
                f"{(before - before_start) / 2**20:,.1f} MiB",
            )
            report.add(
                kind.name,
                f"RSS: after loading {args.objects:,} ({(after - before) / 2**20:,.1f} MiB)",
                f"{(after - before) / args.objects / 1024:,.2f} KiB/object",
            )
            await measure_lists(report, http, kind, args.objects, args.repeat)
            await measure_watches(
                report,
                http,
                cluster,
                kind,
                args.objects,
                args.burst,
                args.concurrency,
                args.watchers,
            )
            gc.collect()
            report.add(
                kind.name,
                "RSS: at the end (after the lists and watches)",
                f"{rss_bytes() / 2**20:,.0f} MiB",
            )


def _pod(index: int) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{index:05d}", "labels": {"bench": "pods"}},
        "spec": {
            "containers": [
                {
                    "name": "runtime",
                    "image": "registry.example.com/sandboxes/python-runtime:3.12",
                    "ports": [{"containerPort": 8888}],
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                }
            ]
        },
    }


def _is_ready(pod: Json) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def bench_pods(report: Report, args: argparse.Namespace) -> None:
    """``--pods`` Pods at once, with the kubelet moving each to Ready: creates, then time to
    the last Ready as a watch sees it."""
    count = args.pods
    path = "/api/v1/namespaces/default/pods"
    settings = SimulationSettings(nodes=3, garbage_collector=False)
    async with DevCluster(
        port=0, crd_dirs=None, latency=LatencyModel.zero(), simulation=settings
    ) as cluster:
        connector = aiohttp.TCPConnector(limit=args.concurrency + 4)
        async with aiohttp.ClientSession(cluster.url, connector=connector) as http:
            async with http.get(path) as response:
                rv = (await response.json())["metadata"]["resourceVersion"]
            ready: set[str] = set()
            all_ready = asyncio.Event()

            async def watch() -> None:
                url = f"{path}?watch=true&resourceVersion={rv}"
                timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
                async with http.get(url, timeout=timeout) as response:
                    async for line in response.content:
                        pod = json.loads(line)["object"]
                        if _is_ready(pod):
                            ready.add(pod["metadata"]["name"])
                            if len(ready) == count:
                                all_ready.set()
                                return

            watcher = asyncio.create_task(watch())
            await wait_registered(cluster, 1)

            async def create(index: int) -> None:
                async with http.post(path, json=_pod(index)) as response:
                    body = await response.read()
                    if response.status != 201:
                        raise RuntimeError(f"create pod {index}: {response.status} {body[:300]!r}")

            started = time.perf_counter()
            creates = await run_concurrently(count, args.concurrency, create)
            await asyncio.wait_for(all_ready.wait(), 300)
            elapsed = time.perf_counter() - started
            watcher.cancel()
    report.add(
        "pods",
        f"CREATE {count:,} Pods, kubelet running ({args.concurrency} in flight)",
        f"{count / creates:,.0f} writes/s",
        count / creates,
    )
    report.add(
        "pods",
        f"{count:,} Pods: first create → all Ready (3 nodes, default kubelet)",
        f"{elapsed * 1000:,.0f} ms",
        1 / elapsed,
    )


async def run_child(kind: str, args: argparse.Namespace) -> list[Row]:
    """One kind in a fresh interpreter; its rows come back as JSON on stdout."""
    argv = [
        sys.executable,
        __file__,
        f"--child={kind}",
        f"--objects={args.objects}",
        f"--burst={args.burst}",
        f"--watchers={args.watchers}",
        f"--concurrency={args.concurrency}",
        f"--repeat={args.repeat}",
        f"--pods={args.pods}",
    ]
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"the {kind} run failed with exit code {process.returncode}")
    return [Row(**row) for row in json.loads(out.decode().splitlines()[-1])]


async def main(args: argparse.Namespace) -> None:
    if args.child:
        report = Report()
        if args.child == "pods":
            await bench_pods(report, args)
        else:
            await bench_kind(report, KINDS[args.child], args)
        print(json.dumps([row.__dict__ for row in report.rows]))
        return
    load1, load5, _ = os.getloadavg()
    print(
        f"devcluster list/watch benchmark: python {platform.python_version()}, "
        f"aiohttp {aiohttp.__version__}, {os.cpu_count()} CPUs, "
        f"load average {load1:.2f} (1 min) / {load5:.2f} (5 min)",
        file=sys.stderr,
        flush=True,
    )
    report = Report()
    baseline = await measure_baseline(report, "baseline", args.baseline_requests, args.concurrency)
    for kind in args.kinds:
        report.rows.extend(await run_child(kind, args))
    await measure_baseline(report, "baseline/end", args.baseline_requests, args.concurrency)
    load1, load5, _ = os.getloadavg()
    print(
        f"\nload average at the end {load1:.2f} (1 min) / {load5:.2f} (5 min); "
        f"'x baseline' = rate / {baseline:,.0f} req/s (trivial GET, {args.concurrency} in "
        "flight, measured first)\n"
    )
    print(report.table(baseline))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000, help="objects per kind")
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=[*sorted(KINDS), "pods"],
        default=["configmaps", "sandboxes", "pods"],
    )
    parser.add_argument("--burst", type=int, default=2_000, help="updates per watch burst")
    parser.add_argument("--watchers", type=int, default=10, help="concurrent watchers")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of each list")
    parser.add_argument("--baseline-requests", type=int, default=5_000)
    parser.add_argument("--pods", type=int, default=200, help="Pods created for 'pods'")
    parser.add_argument("--child", choices=[*sorted(KINDS), "pods"], help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
