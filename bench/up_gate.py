"""Benchmark: agent-sandbox's CI latency gate, run against ``sandbus up`` in its two modes.

Run on purpose (it is not a test)::

    .venv/bin/python bench/up_gate.py [--rate 75] [--duration 2] [--pool 200] [--no-demo]

agent-sandbox's scalability presubmit (dev/ci/presubmits/test-e2e-scalability-kwok) creates
SandboxClaims at a steady rate against a warm pool, then its scraper
(dev/ci/presubmits/shared/scrape_controller_metrics.py) reads the controller's
``agent_sandbox_claim_controller_startup_latency_ms`` histogram from its ``/metrics`` and fails
when p50/p90/p99 exceed 300/300/500 ms. Here, once per mode in the same run (each part its own
process, the default; then ``--one-process``), on a fresh ``sandbus up`` each time:

1. ``sandbus up --dir TMP`` with its own defaults (the development cluster's latency model,
   ``--write-latency-ms`` to change it) and enough simulated nodes for the pool, the claims and
   the refill behind them (110 Pods each);
2. a SandboxWarmPool of ``--pool`` (200), every member Ready and queued;
3. ``--rate`` claims a second for ``--duration`` seconds, evenly spaced as ClusterLoader2's
   steady QPS is, ``--concurrency`` create requests in flight at most, until each is Ready;
4. the claim service's ``/metrics`` URL read from ``TMP/endpoints.json`` (checked to be the one
   the ready banner prints), the histogram's buckets summed over their labels, and p50/p90/p99
   computed as PromQL's ``histogram_quantile(q, sum by (le) (...))`` does
   (:func:`histogram_quantile`), beside the thresholds.

The claims' own create-to-Ready latency as the client sees it (nearest rank) is printed beside
the histogram's figures, and each process's CPU seconds over the claims. ``--scraper FILE``
also runs agent-sandbox's scraper itself, unchanged, against the same URL. With ``--demo`` (the
default), ``sandbus demo``'s warm p50 (its defaults: 20 claims on a pool of 10, 5 at a time) in
each mode too. Progress goes to stderr; the table to stdout at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import nats
from claim_latency import claims_to_ready, fill_pool
from common import cpu_seconds, percentile, progress
from sandbus_processes import start_sandbus, stop

METRIC = "agent_sandbox_claim_controller_startup_latency_ms"
THRESHOLDS_MS = {0.5: 300.0, 0.9: 300.0, 0.99: 500.0}
"""agent-sandbox's gate: CL2_THRESHOLD_50_MS, _90_MS and _99_MS."""
MODES = {"processes": [], "one-process": ["--one-process"]}
"""Each mode of ``sandbus up`` and the arguments that pick it."""
PODS_PER_NODE = 110

_BUCKET = re.compile(rf'^{METRIC}_bucket\{{(?:[^}}]*,)?le="([^"]+)"[^}}]*\}}\s+(\S+)', re.MULTILINE)


def buckets(exposition: str) -> list[tuple[float, float]]:
    """The histogram's cumulative buckets ``(upper bound, count)``, summed over every label set
    (``sum by (le)``), sorted by bound, ``+Inf`` last."""
    summed: dict[float, float] = {}
    for bound, count in _BUCKET.findall(exposition):
        summed[float(bound)] = summed.get(float(bound), 0.0) + float(count)
    return sorted(summed.items())


def histogram_quantile(q: float, cumulative: Sequence[tuple[float, float]]) -> float:
    """PromQL's ``histogram_quantile``: the rank ``q x count`` located in the first bucket whose
    count reaches it, interpolated linearly between that bucket's lower bound (the previous
    bound; 0 for the first bucket) and its upper bound; in the ``+Inf`` bucket, the highest
    finite bound (what Prometheus returns: the histogram knows no more). NaN without samples."""
    if len(cumulative) < 2 or not math.isinf(cumulative[-1][0]):
        return math.nan  # Prometheus too needs a +Inf bucket and one finite one
    total = cumulative[-1][1]
    if total == 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in cumulative:
        if count >= rank:
            if math.isinf(bound):
                return cumulative[-2][0]
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return cumulative[-2][0]


@dataclass
class Result:
    mode: str
    claims: int
    histogram: dict[float, float]
    """p50/p90/p99 in ms from the claim service's histogram."""
    samples: int
    """Claims the histogram counted."""
    client: list[float]
    """Each claim's seconds from create request to Ready, as the client saw them."""
    metrics_url: str
    scraper: str | None
    """What agent-sandbox's own scraper (``--scraper``) said, when it was run."""
    cpu: dict[str, float]
    """CPU seconds each process spent from the first claim to the last Ready, by part."""
    demo_warm_p50_ms: float | None = None

    @property
    def passed(self) -> bool:
        return all(self.histogram[q] <= limit for q, limit in THRESHOLDS_MS.items())


def _nodes(args: argparse.Namespace) -> int:
    claims = math.ceil(args.rate * args.duration)
    return max(1, math.ceil((args.pool + 2 * claims + 10) / PODS_PER_NODE))


async def _wait_for(path: Path, process: subprocess.Popen[bytes], limit: float) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        if process.poll() is not None:
            raise RuntimeError(f"sandbus up exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path.name} not written within {limit} s")
        await asyncio.sleep(0.1)


def _claim_metrics_url(state: Path, log: Path) -> str:
    """The claim service's /metrics URL from endpoints.json, which the banner must print too."""
    url = str(json.loads((state / "endpoints.json").read_text())["parts"]["claim"]["metrics"])
    banner = [line for line in log.read_text().splitlines() if line.startswith("  claim ")]
    if not any(url in line for line in banner):
        raise RuntimeError(f"the banner does not name {url}: {banner}")
    return url


def _upstream_verdict(scraper: Path | None, url: str) -> str | None:
    """agent-sandbox's scrape_controller_metrics.py, unchanged (a copy given by ``--scraper``),
    run against ``url``: its P50/P90/P99 lines and its verdict."""
    if scraper is None:
        return None
    ran = subprocess.run(
        [sys.executable, str(scraper), "--metrics-url", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = [line.strip() for line in ran.stdout.splitlines()]
    # The gated section's lines come first; the informational one after repeats "P50:".
    said = [line for line in lines if line.startswith(("P50:", "P90:", "P99:", "Status:"))][:4]
    return f"exit {ran.returncode}: " + "; ".join(said or lines[-1:])


def _pids(state: Path, up_pid: int) -> dict[str, int]:
    """Each process of the run by part: ``sandbus up`` itself, and its children of
    endpoints.json (none more with ``--one-process``)."""
    parts = json.loads((state / "endpoints.json").read_text())["parts"]
    pids = {"up": up_pid}
    pids.update({name: part["pid"] for name, part in parts.items() if part["pid"] != up_pid})
    return pids


def _cluster_url(kubeconfig: Path) -> str:
    match = re.search(r"server:\s*(\S+)", kubeconfig.read_text())
    if match is None:
        raise RuntimeError(f"no server in {kubeconfig}")
    return match.group(1).strip("'\"")


async def _scrape(url: str, claims: int, within: float = 10.0) -> list[tuple[float, float]]:
    """The histogram's buckets once it counts ``claims`` observations (a claim's is recorded
    after the status write that the client saw Ready), or as they are after ``within`` s."""
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as http:
        while True:
            async with http.get(url) as response:
                cumulative = buckets(await response.text())
            counted = cumulative[-1][1] if cumulative else 0
            if counted >= claims or time.monotonic() > deadline:
                return cumulative
            await asyncio.sleep(0.5)


async def gate(mode: str, args: argparse.Namespace, workdir: Path) -> Result:
    """One fresh ``sandbus up`` in ``mode``, the load, and the histogram it recorded."""
    state, log = workdir / f"state-{mode}", workdir / f"up-{mode}.log"
    command = ["up", "--dir", str(state), "--nodes", str(_nodes(args)), *MODES[mode]]
    if args.write_latency_ms is not None:
        command += ["--write-latency-ms", str(args.write_latency_ms)]
    progress(f"{mode}: sandbus {' '.join(command)} (log {log})")
    process = start_sandbus(command, log)
    try:
        await _wait_for(state / "nats-url", process, 120)
        url = _claim_metrics_url(state, log)
        connection = await nats.connect((state / "nats-url").read_text().strip())
        try:
            base = _cluster_url(state / "kubeconfig")
            async with aiohttp.ClientSession(base_url=base) as http:
                progress(f"{mode}: filling a pool of {args.pool}")
                await fill_pool(http, connection.jetstream(), args.pool, args.limit)
                claims = math.ceil(args.rate * args.duration)
                schedule = [i / args.rate for i in range(claims)]
                progress(f"{mode}: {claims} claims at {args.rate:g}/s")
                pids = _pids(state, process.pid)
                before = {part: cpu_seconds(pid) for part, pid in pids.items()}
                latencies, _ = await claims_to_ready(http, schedule, args.concurrency, args.limit)
                cpu = {part: cpu_seconds(pid) - before[part] for part, pid in pids.items()}
        finally:
            await connection.close()
        cumulative = await _scrape(url, len(latencies))
        scraper = await asyncio.to_thread(_upstream_verdict, args.scraper, url)
    finally:
        await asyncio.to_thread(stop, process)
    return Result(
        mode=mode,
        claims=len(latencies),
        histogram={q: histogram_quantile(q, cumulative) for q in THRESHOLDS_MS},
        samples=int(cumulative[-1][1]) if cumulative else 0,
        client=list(latencies.values()),
        metrics_url=url,
        scraper=scraper,
        cpu=cpu,
    )


def demo_warm_p50(mode: str, workdir: Path) -> float | None:
    """``sandbus demo``'s warm p50 in ms in ``mode`` (None when it printed no warm row)."""
    log = workdir / f"demo-{mode}.log"
    progress(f"{mode}: sandbus demo (log {log})")
    process = start_sandbus(["demo", *MODES[mode]], log)
    try:
        if process.wait(timeout=600) != 0:
            progress(f"{mode}: sandbus demo exited with {process.returncode}")
            return None
    finally:
        stop(process)
    for line in log.read_text().splitlines():
        cells = line.split()
        if cells[:1] == ["warm"] and len(cells) >= 3:
            return float(cells[2])
    return None


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f}"


def report(results: Sequence[Result], args: argparse.Namespace) -> None:
    limits = "/".join(f"{v:.0f}" for v in THRESHOLDS_MS.values())
    print(
        f"\nagent-sandbox's claim latency gate on `sandbus up`: {args.rate:g} claims/s for "
        f"{args.duration:g} s on a warm pool of {args.pool}, {_nodes(args)} simulated nodes, "
        f"write latency {args.write_latency_ms if args.write_latency_ms is not None else 'default'}"
        f" ms; Python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n"
    )
    print(
        f"| mode | claims | {METRIC} p50 / p90 / p99 ms | gate {limits} ms "
        "| client create to Ready p50 / p90 / p99 ms | demo warm p50 ms |"
    )
    print("|---|---:|---:|---|---:|---:|")
    for r in results:
        histogram = " / ".join(_ms(r.histogram[q]) for q in THRESHOLDS_MS)
        client = " / ".join(f"{percentile(r.client, q) * 1000:.0f}" for q in (50, 90, 99))
        demo = "-" if r.demo_warm_p50_ms is None else f"{r.demo_warm_p50_ms:.1f}"
        verdict = "passes" if r.passed else "fails"
        print(
            f"| {r.mode} | {r.claims} ({r.samples} in the histogram) | {histogram} | {verdict} "
            f"| {client} | {demo} |"
        )
    print("\nCPU seconds each process spent from the first claim to the last Ready\n")
    for r in results:
        print(f"- {r.mode}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.cpu.items()))
    print("\nthe claim service's /metrics, as the banner printed it:")
    for r in results:
        print(f"  {r.mode}: {r.metrics_url}")
        if r.scraper is not None:
            print(f"    agent-sandbox's scraper: {r.scraper}")


async def main(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="bench-up-gate-"))
    progress(f"logs in {workdir}")
    results = []
    for mode in MODES:
        result = await gate(mode, args, workdir)
        if args.demo:
            result.demo_warm_p50_ms = await asyncio.to_thread(demo_warm_p50, mode, workdir)
        results.append(result)
    report(results, args)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)  # kept when the run failed, for its logs
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rate", type=float, default=75.0, help="claims a second (75)")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds of claims (2)")
    parser.add_argument("--pool", type=int, default=200, help="warm pool size (200)")
    parser.add_argument("--concurrency", type=int, default=64, help="creates in flight (64)")
    parser.add_argument(
        "--write-latency-ms", type=float, default=None, help="API write latency (up's default)"
    )
    parser.add_argument("--limit", type=float, default=300.0, help="seconds before giving up")
    parser.add_argument("--keep", action="store_true", help="keep the logs' directory")
    parser.add_argument(
        "--scraper",
        type=Path,
        default=None,
        metavar="FILE",
        help="a copy of agent-sandbox's dev/ci/presubmits/shared/scrape_controller_metrics.py, "
        "run unchanged against each mode's claim /metrics beside this script's own reading",
    )
    parser.add_argument(
        "--no-demo", dest="demo", action="store_false", help="skip sandbus demo's warm p50"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
