"""The warm-queue depth as Prometheus scrapes it: the pool worker's ``/metrics``, with the whole
stack in this process (the development cluster, a real nats-server, the watcher, the sandbox,
pool and claim workers), beside the runtime's other metrics of a worker."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp

from api.keys import name_hash
from events.envelope import ObjectKey
from services.runtime.endpoint import serve_metrics
from services.runtime.metrics import Metrics
from tests.component.tracing.stack import NS, claim_body, pool_body, stack, template_body
from tests.e2e.claim.harness import claim_ready
from tests.support.waiting import until

PYTHON = name_hash("python")


async def scrape(metrics: Metrics) -> str:
    runner = await serve_metrics(metrics, "127.0.0.1", 0)
    try:
        host, port = runner.addresses[0][:2]
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://{host}:{port}/metrics") as response,
        ):
            assert response.status == 200
            return await response.text()
    finally:
        await runner.cleanup()


def depth(text: str, pool: str) -> float | None:
    series = f'sandbus_warm_queue_depth{{namespace="{NS}",pool="{pool}",template_hash="{PYTHON}"}}'
    match = re.search(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


async def test_the_pool_worker_reports_each_queue_s_depth_at_each_scrape(
    nats_url: str, tmp_path: Path
) -> None:
    async with stack(nats_url, tmp_path) as s:
        metrics = s.workers["pool"].metrics
        await s.kube.create(template_body())
        await s.kube.create(pool_body("warm", replicas=2))
        await s.kube.create(pool_body("dry", replicas=0))

        async def depths_are(warm: float) -> str | None:
            text = await scrape(metrics)
            return text if (depth(text, "warm"), depth(text, "dry")) == (warm, 0.0) else None

        text = await until(lambda: depths_are(2.0), within=30, interval=0.2)
        assert "# TYPE sandbus_warm_queue_depth gauge" in text

        # Scaled up: the new member is queued once Ready, and the next scrape says so.
        await s.kube.patch(ObjectKey("SandboxWarmPool", NS, "warm"), {"spec": {"replicas": 3}})
        await until(lambda: depths_are(3.0), within=30, interval=0.2)

        # A claim adopts one (its entry acked), and the pool fills the queue again.
        await s.kube.create(claim_body("c", "warm"))

        async def bound() -> bool:
            return claim_ready(await s.kube.get(ObjectKey("SandboxClaim", NS, "c")))

        await until(bound, within=30, interval=0.1)
        text = await until(lambda: depths_are(3.0), within=30, interval=0.2)

        # The claim worker reports no depth (the pool worker does, once per queue).
        assert "sandbus_warm_queue_depth{" not in await scrape(s.workers["claim"].metrics)

        # The runtime's own metrics of a worker, on the same endpoint.
        for series in (
            'sandbus_events_handled_total{worker="pool"}',
            'sandbus_events_dead_lettered_total{worker="pool"}',
            'sandbus_events_published_total{worker="pool"}',
            'sandbus_events_pending{worker="pool"}',
            'sandbus_reconcile_total{kind="SandboxWarmPool",result="ok",worker="pool"}',
            'sandbus_reconcile_duration_seconds_count{kind="SandboxWarmPool",worker="pool"}',
        ):
            assert re.search(rf"^{re.escape(series)} \S+$", text, re.MULTILINE), series

        # controller-runtime's and client-go's series, under upstream's controller names, so
        # agent-sandbox's dashboards find each worker's reconcilers.
        claim_text = await scrape(s.workers["claim"].metrics)
        for series, served in (
            (
                'controller_runtime_reconcile_total{controller="sandboxwarmpool",result="success"}',
                text,
            ),
            ('controller_runtime_max_concurrent_reconciles{controller="sandboxwarmpool"}', text),
            ('workqueue_adds_total{controller="sandboxwarmpool",name="sandboxwarmpool"}', text),
            (
                'controller_runtime_reconcile_time_seconds_count{controller="sandboxclaim"}',
                claim_text,
            ),
            (
                'workqueue_depth{controller="sandboxclaim",name="sandboxclaim",priority="0"}',
                claim_text,
            ),
        ):
            match = re.search(rf"^{re.escape(series)} (\S+)$", served, re.MULTILINE)
            assert match, series
        passes = re.findall(
            r'^controller_runtime_reconcile_total\{controller="sandboxclaim",result="\w+"\} (\S+)$',
            claim_text,
            re.MULTILINE,
        )
        assert sum(map(float, passes)) > 0, "the claim reconciler's passes are counted"
