"""End to end: OpenSandbox Pools and BatchSandboxes with the watcher, the pool worker (the Pool
and its allocation ledger) and the claim worker (BatchSandbox) as their own processes on the
development cluster.

What must hold: the sample manifests reach their documented state; a sandbox that asks more of
a Pool than its poolMax allows says so (PoolAllocationPending, reason PoolCapacityExhausted)
and completes when another sandbox gives its Pods back; and however often the allocating
process is killed, no Pod is ever held by two sandboxes, none is lost, and the Pool's
``allocated`` is what the sandboxes hold.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest
import yaml

from api.objects import Json
from api.opensandbox import (
    ANNOTATION_ALLOC_RELEASED,
    ANNOTATION_ENDPOINTS,
)
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi
from tests.e2e.opensandbox.harness import conditions, get, pods_of, pool_body, run
from tests.e2e.services import log_tails, service
from tests.e2e.world import cluster_world
from tests.support.samples import NS
from tests.support.waiting import until

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "opensandbox"
BIN = Path(sys.executable).parent
KUBECTL, SANDBUS = str(BIN / "kubectl"), str(BIN / "sandbus")
POOL_ENV = {"SANDBUS_POOL_LEASE_SECONDS": "1"}


def example(name: str) -> Json:
    body: Json = yaml.safe_load((EXAMPLES / name).read_text())
    return body


def batch_body(name: str, replicas: int, pool: str) -> Json:
    return {
        "apiVersion": "sandbox.opensandbox.io/v1alpha1",
        "kind": "BatchSandbox",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "poolRef": pool},
    }


def held(sandbox: Json) -> list[str]:
    released = set(pods_of(sandbox, ANNOTATION_ALLOC_RELEASED))
    return [p for p in pods_of(sandbox) if p not in released]


async def sandbox_ready(kube: KubeApi, name: str, replicas: int) -> bool:
    sandbox = await get(kube, "BatchSandbox", name)
    status = (sandbox or {}).get("status") or {}
    return status.get("ready") == replicas and status.get("phase") == "Succeed"


async def one_holder_each(kube: KubeApi) -> Counter[str]:
    """Pod → how many live sandboxes hold it (alloc-status minus alloc-released); asserts none
    holds a Pod twice and no Pod is held by two."""
    counts: Counter[str] = Counter()
    for sandbox in await kube.list("BatchSandbox", NS):
        mine = held(sandbox)
        assert len(mine) == len(set(mine)), sandbox["metadata"]["name"]
        counts.update(mine)
    twice = sorted(p for p, n in counts.items() if n > 1)
    assert not twice, f"Pods held by two sandboxes: {twice}"
    return counts


def restarts(pod: Json, container: str) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return sum(int(s.get("restartCount") or 0) for s in statuses if s.get("name") == container)


async def pool_is(kube: KubeApi, name: str, **wanted: int) -> bool:
    status = ((await get(kube, "Pool", name)) or {}).get("status") or {}
    return all(status.get(key) == value for key, value in wanted.items())


@asynccontextmanager
async def workers(url: str, kubeconfig: Path, logs: Path) -> AsyncIterator[None]:
    async with (
        service("watcher", url, kubeconfig, logs),
        service("pool", url, kubeconfig, logs, env=POOL_ENV),
        service("claim", url, kubeconfig, logs),
    ):
        yield


@pytest.mark.timeout(240)
async def test_the_sample_manifests_reach_their_documented_state(tmp_path: Path) -> None:
    """examples/opensandbox/pool.yaml (buffer 2-6, poolMin 4, poolMax 20, Restart recycle), a
    pooled sandbox of 10 from it, and the non-pooled web-pair with its shard patches; then
    pooled sandboxes deleted, and their Pods restarted in place and back in the Pool."""
    logs = tmp_path / "logs"
    logs.mkdir()
    async with cluster_world(tmp_path) as (nats_server, _, kube, kubeconfig, _history):
        try:
            async with workers(nats_server.url, kubeconfig, logs):
                await kube.create(example("pool.yaml"))

                async def pool_status() -> Json:
                    pool = await get(kube, "Pool", "python-pool")
                    return (pool or {}).get("status") or {}

                async def warmed() -> bool:
                    status = await pool_status()
                    return status.get("total", 0) >= 4 and status.get("available", 0) >= 2

                await until(warmed, within=60, interval=0.2)
                await kube.create(batch_body("batch-10", 10, "python-pool"))
                await kube.create(example("batchsandbox-nonpooled.yaml"))
                await until(lambda: sandbox_ready(kube, "batch-10", 10), within=60, interval=0.2)
                await until(lambda: sandbox_ready(kube, "web-pair", 2), within=60, interval=0.2)

                batch = await get(kube, "BatchSandbox", "batch-10")
                assert batch is not None
                assert len(pods_of(batch)) == 10
                endpoints = json.loads(batch["metadata"]["annotations"][ANNOTATION_ENDPOINTS])
                assert len(endpoints) == 10 and all(endpoints)
                assert (
                    "pool.sandbox.opensandbox.io/pool-allocation" in batch["metadata"]["finalizers"]
                )
                await one_holder_each(kube)

                async def refilled() -> bool:
                    status = await pool_status()
                    return status.get("allocated") == 10 and 2 <= status.get("available", 0) <= 6

                await until(refilled, within=60, interval=0.2)

                # As a user sees it: kubectl's columns, and explain's account of the sandbox.
                async def columns_and_status() -> tuple[str, list[str], list[str]] | None:
                    # The Pool's buffer may still move (its Pods become Ready once their task
                    # executors answer): compare one listing with the status read right after.
                    listed = await run(
                        KUBECTL, "--kubeconfig", str(kubeconfig), "get", "pools,batchsandboxes"
                    )
                    status = await pool_status()
                    row = next(line for line in listed.splitlines() if "python-pool" in line)
                    columns = row.split()[1:4]  # TOTAL, ALLOCATED, AVAILABLE
                    wanted = [str(status[k]) for k in ("total", "allocated", "available")]
                    return (listed, columns, wanted) if columns == wanted else None

                listed, columns, _ = await until(columns_and_status, within=30, interval=0.2)
                assert columns[1] == "10", listed
                batch_row = next(line for line in listed.splitlines() if "batch-10" in line)
                assert batch_row.split()[1:5] == ["10", "10", "10", "10"], listed
                explained = await run(
                    SANDBUS, "explain", "BatchSandbox/default/batch-10", "--nats", nats_server.url
                )
                assert "10 of 10 Pods from Pool python-pool" in explained, explained
                pair = {
                    pod["metadata"]["name"]: pod
                    for pod in await kube.list("Pod", NS)
                    if pod["metadata"]["name"].startswith("web-pair-")
                }
                assert sorted(pair) == ["web-pair-0", "web-pair-1"]
                canary = pair["web-pair-1"]
                assert canary["metadata"]["labels"]["variant"] == "canary"
                (sandbox_container,) = [
                    c for c in canary["spec"]["containers"] if c["name"] == "sandbox"
                ]
                assert sandbox_container["image"] == "httpd:2.4-alpine"
                assert len(canary["spec"]["containers"]) == 2, "merged by name, not replaced"

                # The sample Pool recycles with Restart. Deleting the sandbox of 10 returns its
                # Pods restarted in place, and the Pool then trims its buffer back into the band
                # (oldest first: these). A sandbox of 2 returns Pods that stay in the band:
                # restarted (not the blacklisted log shipper), not replaced.
                await kube.delete(ObjectKey("BatchSandbox", NS, "batch-10"))
                await until(
                    lambda: pool_is(kube, "python-pool", allocated=0), within=60, interval=0.2
                )
                await until(warmed, within=60, interval=0.2)
                await kube.create(batch_body("pair", 2, "python-pool"))
                await until(lambda: sandbox_ready(kube, "pair", 2), within=60, interval=0.2)
                pair_sandbox = await get(kube, "BatchSandbox", "pair")
                assert pair_sandbox is not None
                given = pods_of(pair_sandbox)
                await kube.delete(ObjectKey("BatchSandbox", NS, "pair"))

                async def restarted() -> bool:
                    if await get(kube, "BatchSandbox", "pair") is not None:
                        return False
                    pods = {p["metadata"]["name"]: p for p in await kube.list("Pod", NS)}
                    back = [pods.get(name) for name in given]
                    return all(
                        pod is not None
                        and not pod["metadata"].get("deletionTimestamp")
                        and restarts(pod, "sandbox") >= 1
                        and restarts(pod, "log-shipper") == 0
                        for pod in back
                    )

                await until(restarted, within=60, interval=0.2)
                await until(
                    lambda: pool_is(kube, "python-pool", allocated=0), within=60, interval=0.2
                )
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None


@pytest.mark.timeout(240)
async def test_a_sandbox_beyond_pool_max_waits_with_the_reason_then_completes(
    tmp_path: Path,
) -> None:
    """30 Pods asked of a Pool with poolMax 20: the second sandbox says
    PoolAllocationPending (reason PoolCapacityExhausted, upstream's names) while it waits, and
    completes once the first is deleted, the condition gone."""
    logs = tmp_path / "logs"
    logs.mkdir()
    async with cluster_world(tmp_path, nodes=3) as (nats_server, _, kube, kubeconfig, _history):
        try:
            async with workers(nats_server.url, kubeconfig, logs):
                await kube.create(pool_body("capped", buffer=(2, 4), pool=(0, 20)))
                await kube.create(batch_body("first", 15, "capped"))
                await until(lambda: sandbox_ready(kube, "first", 15), within=60, interval=0.2)
                await kube.create(batch_body("second", 15, "capped"))

                async def exhausted() -> bool:
                    found = conditions(await get(kube, "BatchSandbox", "second"))
                    return found.get("PoolAllocationPending") == "PoolCapacityExhausted"

                await until(exhausted, within=60, interval=0.2)
                await kube.delete(ObjectKey("BatchSandbox", NS, "first"))
                await until(lambda: sandbox_ready(kube, "second", 15), within=90, interval=0.2)
                second = await get(kube, "BatchSandbox", "second")
                assert "PoolAllocationPending" not in conditions(second)
                assert await get(kube, "BatchSandbox", "first") is None, "released, then gone"
                await one_holder_each(kube)
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None


@pytest.mark.timeout(300)
async def test_killing_the_allocator_twenty_times_loses_no_pod_and_doubles_none(
    tmp_path: Path,
) -> None:
    """Five sandboxes, arriving one every fourth kill, ask for 40 Pods while the pool worker is
    killed with SIGKILL about every half second, 20 times, each time started again: every
    sandbox ends with its Pods, no Pod is held twice, and the Pool's allocated equals what the
    sandboxes hold."""
    logs = tmp_path / "logs"
    logs.mkdir()
    rng = random.Random(11)
    async with cluster_world(tmp_path, nodes=4) as (nats_server, _, kube, kubeconfig, _history):
        url = nats_server.url
        try:
            async with (
                service("watcher", url, kubeconfig, logs),
                service("claim", url, kubeconfig, logs),
                AsyncExitStack() as stack,
            ):
                generation = 0

                async def start() -> asyncio.subprocess.Process:
                    nonlocal generation
                    generation += 1
                    return await stack.enter_async_context(
                        service(
                            "pool",
                            url,
                            kubeconfig,
                            logs,
                            env={**POOL_ENV, "SANDBUS_IDENTITY": f"pool-{generation}"},
                            log_name="pool",
                        )
                    )

                allocator = await start()
                await kube.create(pool_body("busy", buffer=(2, 6), pool=(0, 60)))
                sizes = {f"s{i}": size for i, size in enumerate((12, 8, 9, 5, 6))}
                arriving = list(sizes.items())
                for kill in range(20):
                    if kill % 4 == 0:  # the sandboxes arrive all through the kills
                        name, size = arriving.pop(0)
                        await kube.create(batch_body(name, size, "busy"))
                    await asyncio.sleep(rng.uniform(0.3, 0.7))
                    allocator.send_signal(signal.SIGKILL)
                    await allocator.wait()
                    allocator = await start()

                async def all_ready() -> bool:
                    ready = [await sandbox_ready(kube, n, s) for n, s in sizes.items()]
                    return all(ready)

                await until(all_ready, within=90, interval=0.2)
                counts = await one_holder_each(kube)
                assert sum(counts.values()) == sum(sizes.values())

                async def allocated_is_held() -> bool:
                    pool = await get(kube, "Pool", "busy")
                    return ((pool or {}).get("status") or {}).get("allocated") == sum(
                        sizes.values()
                    )

                await until(allocated_is_held, within=30, interval=0.2)
                live = {p["metadata"]["name"] for p in await kube.list("Pod", NS)}
                assert set(counts) <= live, "every held Pod exists"
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None
