"""Benchmark: a claim with ``env`` delivered as a task to a warm sandbox (sandbus's opt-in,
README "Tasks"), beside a plain warm claim in the same run.

Run on purpose (it is not a test)::

    .venv/bin/python bench/claim_env_task.py [--claims 20] [--write-latency-ms 5]

Setup: an embedded nats-server, ``sandbus devcluster`` (whose kubelet runs a real task executor
in every Pod that runs one) and ``sandbus run watcher``, ``sandbox``, ``pool`` and ``claim``,
each its own process. The template's Pods run the task executor and the template names the
workload's command in ``sandbus.io/claim-env-task``; a pool of twice ``--claims`` is filled.
Then ``--claims`` plain claims and ``--claims`` claims with two variables alternate, one at a
time, each timed from its create request to the watch event that shows it Ready. Goal (issue
#14): the env claim's p50 within 2x the plain claim's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import nats
from claim_latency import CLAIMS, claim_ready, fill_pool, launch_types, percentile
from sandbox_ready import cluster_url, progress
from sandbus_processes import start_devcluster, start_sandbus, stop

from devtools.natsd import NatsServer
from services.claim.core.envtask import ANNOTATION_CLAIM_ENV_TASK
from services.runtime.bus import BusConfig, ensure_bus

EXECUTOR = {
    "name": "task-executor",
    "image": "task-executor:dev",
    "args": ["-listen-addr=0.0.0.0:5758"],
}
WORKLOAD = [sys.executable, "-c", "import os; assert os.environ['TOKEN']"]


async def one_claim(http: aiohttp.ClientSession, name: str, env: bool, limit: float) -> float:
    """Seconds from the create request to the claim's Ready."""
    async with http.get(CLAIMS) as response:
        resource_version = (await response.json())["metadata"]["resourceVersion"]
    spec: dict[str, Any] = {"warmPoolRef": {"name": "bench"}}
    if env:
        spec["env"] = [{"name": "TOKEN", "value": "s3cret"}, {"name": "MODE", "value": "bench"}]
    params = {"watch": "1", "resourceVersion": resource_version, "timeoutSeconds": "600"}
    async with asyncio.timeout(limit), http.get(CLAIMS, params=params) as stream:
        sent = time.perf_counter()
        body = {"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim"}
        async with http.post(CLAIMS, json={**body, "metadata": {"name": name}, "spec": spec}) as r:
            r.raise_for_status()
        async for line in stream.content:
            obj = json.loads(line)["object"]
            if obj["metadata"]["name"] == name and claim_ready(obj):
                return time.perf_counter() - sent
    raise RuntimeError(f"claim {name} was not Ready")


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-envtask-"))
    kubeconfig = workdir / "kubeconfig"
    processes: dict[str, subprocess.Popen[bytes]] = {}
    finished = False
    timings: dict[str, list[float]] = {"plain": [], "env": []}
    try:
        with NatsServer(store_dir=workdir / "nats") as natsd:
            connection = await nats.connect(natsd.url)
            await ensure_bus(connection.jetstream(), BusConfig())
            processes["devcluster"] = start_devcluster(
                kubeconfig,
                workdir / "devcluster.log",
                pod_ready_delay=args.pod_ready_delay,
                write_latency_ms=args.write_latency_ms,
                pods=4 * args.claims + 10,
            )
            url = await cluster_url(kubeconfig, processes["devcluster"])
            for service in ("watcher", "sandbox", "pool", "claim"):
                processes[service] = start_sandbus(
                    ["run", service, "--nats", natsd.url, "--kubeconfig", str(kubeconfig)],
                    workdir / f"{service}.log",
                )
            async with aiohttp.ClientSession(base_url=url) as http:
                progress(f"filling a pool of {2 * args.claims} sandboxes that run the executor")
                await fill_pool(
                    http,
                    connection.jetstream(),
                    2 * args.claims,
                    args.limit,
                    template_spec={
                        "envVarsInjectionPolicy": "Allowed",
                        "podTemplate": {"spec": {"containers": [EXECUTOR]}},
                    },
                    annotations={ANNOTATION_CLAIM_ENV_TASK: json.dumps(WORKLOAD)},
                )
                progress(f"{args.claims} plain and {args.claims} env claims, one at a time")
                for index in range(args.claims):
                    for kind in ("plain", "env"):
                        name = f"{kind}-{index:03d}"
                        timings[kind].append(await one_claim(http, name, kind == "env", args.limit))
                kinds = await launch_types(http)
            await connection.close()
            finished = True
    finally:
        for process in reversed(processes.values()):
            await asyncio.to_thread(stop, process)
        if finished:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            progress(f"logs kept in {workdir}")
    plain_p50 = statistics.median(timings["plain"])
    print(
        f"\n{args.claims} claims of each kind, one at a time, against a warm pool; write latency "
        f"{args.write_latency_ms} ms; Python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n"
    )
    print("| claim | p50 ms | p90 ms | max ms | x plain p50 |")
    print("|---|---:|---:|---:|---:|")
    for kind, values in timings.items():
        p50 = statistics.median(values)
        print(
            f"| {kind} | {p50 * 1000:.1f} | {percentile(values, 90) * 1000:.1f} | "
            f"{max(values) * 1000:.1f} | {p50 / plain_p50:.2f} |"
        )
    print(f"\nlaunch types: {kinds} (every claim warm: the env did not force a cold start)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=20, help="claims of each kind")
    parser.add_argument("--write-latency-ms", type=float, default=5.0)
    parser.add_argument("--pod-ready-delay", type=float, default=0.2)
    parser.add_argument("--limit", type=float, default=180.0, help="seconds before giving up")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
