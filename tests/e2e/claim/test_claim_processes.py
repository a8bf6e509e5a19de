"""End to end: SandboxClaims against a warm pool, with the watcher, the sandbox, pool and claim
workers as their own processes on the development cluster.

What must hold: every claim gets exactly one Sandbox and every Sandbox at most one claim
(upstream #418, a claim adopting two), under any number of claim-worker replicas killed at any
instant; a pool of N serves N claims warm and the rest start cold at once; the pool replenishes
behind the adoptions; afterwards every queue holds exactly the pool's adoptable members.
"""

from __future__ import annotations

import asyncio
import random
import signal
import socket
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.claim.harness import (
    CLAIM_ENV,
    bindings,
    claim_decisions,
    claims_ready,
    create_claims,
    launch_types,
    not_ready,
    queue_matches_pool,
    recent_decisions,
    workers,
)
from tests.e2e.services import log_tails, service
from tests.e2e.world import cluster_world, pool_body, template_body
from tests.support.samples import NS
from tests.support.waiting import until

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def scrape(port: int) -> str:
    url = f"http://127.0.0.1:{port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200
        return await response.text()


def sample(text: str, name: str, launch_type: str) -> float:
    """The sum of ``name``'s samples with ``launch_type`` in a Prometheus text exposition."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and f'launch_type="{launch_type}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.timeout(300)
async def test_fifty_claims_adopt_fifty_warm_then_sixty_take_every_warm_one_and_the_rest_cold(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    async with cluster_world(tmp_path) as (nats_server, _, kube, kubeconfig, _history):
        url = nats_server.url
        metrics_port = free_port()
        metrics_env = {"SANDBUS_METRICS_ADDRESS": f"127.0.0.1:{metrics_port}"}
        try:
            async with (
                workers(url, kubeconfig, logs),
                service("claim", url, kubeconfig, logs, env={**CLAIM_ENV, **metrics_env}),
            ):
                await kube.create(template_body())
                await kube.create(pool_body("warm", 50))

                async def full() -> bool:
                    return await queue_matches_pool(url, kube, "warm", 50)

                await until(full, within=120, interval=0.25)

                first = [f"a{i}" for i in range(50)]
                await create_claims(kube, first, "warm")
                await until(lambda: claims_ready(kube, set(first)), within=60, interval=0.1)
                bound = await bindings(kube)
                assert await launch_types(kube, {bound[n] for n in first}) == {"warm": 50}
                # A warm adoption is one pass: the take and the writes it led to are one
                # decision, whose inputs hold the entry taken.
                for name in first[:5]:
                    decisions = await claim_decisions(url, name)
                    taking = [
                        d for d in decisions if any(a["verb"] == "take" for a in d["actions"])
                    ]
                    assert len(taking) == 1, decisions
                    verbs = [a["verb"] for a in taking[0]["actions"]]
                    assert verbs[0] == "take" and verbs[-1] == "ack", verbs
                    assert {"patch", "patch status"} <= set(verbs), verbs
                    (entry,) = taking[0]["inputs"]["messages"]
                    assert entry["subject"].endswith(f".{bound[name]}"), entry

                await until(full, within=120, interval=0.25)  # replenished, and queued

                second = [f"b{i}" for i in range(60)]
                await create_claims(kube, second, "warm")
                await until(lambda: claims_ready(kube, set(second)), within=120, interval=0.1)
                bound = await bindings(kube)
                assert set(bound) == {*first, *second}
                kinds = await launch_types(kube, {bound[n] for n in second})
                # Every queued member serves a claim; the pool refills during the burst, so a
                # member Ready in time may serve one of the last claims warm instead of cold.
                assert kinds["warm"] >= 50 and kinds["warm"] + kinds["cold"] == 60, kinds
                await until(full, within=120, interval=0.25)

                # What agent-sandbox's dashboards read, from the claim worker's /metrics.
                text = await scrape(metrics_port)
                warm, cold = 50 + kinds["warm"], kinds["cold"]
                assert sample(text, "agent_sandbox_claim_creation_total", "warm") == warm
                assert sample(text, "agent_sandbox_claim_creation_total", "cold") == cold
                ready = "agent_sandbox_claim_controller_startup_latency_ms_count"
                assert sample(text, ready, "warm") == warm
                assert sample(text, ready, "cold") == cold
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None


@pytest.mark.timeout(360)
async def test_claim_workers_killed_every_half_second_leave_every_claim_ready_one_to_one(
    tmp_path: Path,
) -> None:
    """Three claim-worker processes, 200 claims against a pool of 60; about every 0.5 s a
    random claim worker is killed with SIGKILL and started again."""
    logs = tmp_path / "logs"
    logs.mkdir()
    rng = random.Random(7)
    async with cluster_world(tmp_path, nodes=6) as (nats_server, _, kube, kubeconfig, _history):
        url = nats_server.url
        try:
            async with workers(url, kubeconfig, logs), AsyncExitStack() as stack:
                await kube.create(template_body())
                await kube.create(pool_body("warm", 60))
                await until(
                    lambda: queue_matches_pool(url, kube, "warm", 60), within=120, interval=0.25
                )
                generation = 0

                async def start(slot: int) -> asyncio.subprocess.Process:
                    nonlocal generation
                    generation += 1
                    return await stack.enter_async_context(
                        service(
                            "claim",
                            url,
                            kubeconfig,
                            logs,
                            env={**CLAIM_ENV, "SANDBUS_IDENTITY": f"claim-{slot}-{generation}"},
                            log_name=f"claim-{slot}",
                        )
                    )

                replicas = [await start(slot) for slot in range(3)]
                names = [f"c{i:03d}" for i in range(200)]
                creating = asyncio.create_task(create_claims(kube, names, "warm"))
                kills = 0
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 180
                while await not_ready(kube, set(names)):
                    if loop.time() > deadline:
                        stuck = await not_ready(kube, set(names))
                        sandboxes = {
                            s["metadata"]["name"]: (s.get("status") or {}).get("conditions")
                            for s in await kube.list("Sandbox", NS)
                        }
                        raise AssertionError(
                            f"not ready: {stuck[:20]}\n{await recent_decisions(url, stuck[:3])}"
                            f"\n{[sandboxes.get(name) for name in stuck[:3]]}"
                        )
                    await asyncio.sleep(0.5)
                    if kills < 12:
                        slot = rng.randrange(3)
                        replicas[slot].send_signal(signal.SIGKILL)
                        await replicas[slot].wait()
                        replicas[slot] = await start(slot)
                        kills += 1
                await creating
                assert kills >= 6, "the claim workers were killed while claims were served"
                try:
                    bound = await bindings(kube)
                except AssertionError as failure:
                    doubled = str(failure).split("[")[1].split("]")[0].replace("'", "").split(", ")
                    raise AssertionError(
                        f"{failure}\n{await recent_decisions(url, doubled[:1], last=60)}"
                    ) from None
                assert set(bound) == set(names)
                kinds = await launch_types(kube, set(bound.values()))
                # An entry taken by a replica that was killed is away for the ack wait, and a
                # claim that finds the queue empty meanwhile starts cold: some go cold.
                assert kinds["warm"] > 0 and sum(kinds.values()) == 200, kinds
                await until(
                    lambda: queue_matches_pool(url, kube, "warm", 60), within=120, interval=0.25
                )
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None
