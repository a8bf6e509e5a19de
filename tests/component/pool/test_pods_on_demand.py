"""The pool worker follows Pods on demand: not at all while no OpenSandbox Pool exists (the
Sandboxes' Pods, six changes a claim, never reach it), then, once a Pool comes, from the state
table on; a durable left by an earlier run that nothing needs now is deleted at start. The
development cluster, NATS, the watcher and the pool worker in this process."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import nats.errors
import pytest
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig

from api.keys import LABEL_SANDBOX_NAME_HASH
from api.opensandbox import LABEL_POOL_NAME
from events.subjects import event_filter
from services.runtime.bus import BusConfig
from services.runtime.kube import KubeApi
from services.runtime.reconcile.feeding import BusFeed
from services.runtime.reconcile.worker import Worker
from tests.support.samples import NS, Json, is_ready
from tests.support.stack import api_client, bounded, cluster_and_watcher, pool_worker_running
from tests.support.waiting import until

ON_DEMAND = "pool-worker-on-demand"
POOL = "open-pool"
WITHIN = 20.0


def sandbox_pod(name: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {LABEL_SANDBOX_NAME_HASH: "0a1b"}},
        "spec": {"containers": [{"name": "main", "image": "python:3.12"}]},
    }


def pool_body() -> Json:
    return {
        "apiVersion": "sandbox.opensandbox.io/v1alpha1",
        "kind": "Pool",
        "metadata": {"name": POOL, "namespace": NS},
        "spec": {
            "template": {"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}},
            "capacitySpec": {"bufferMin": 2, "bufferMax": 2, "poolMin": 0, "poolMax": 2},
        },
    }


async def consumers(js: JetStreamContext, bus: BusConfig) -> dict[str, ConsumerConfig]:
    return {info.name: info.config for info in await js.consumers_info(bus.event_log_stream)}


@contextlib.asynccontextmanager
async def pool_worker_after_an_earlier_run(
    nats_url: str, tmp_path: Path
) -> AsyncIterator[tuple[KubeApi, JetStreamContext, BusConfig, Worker]]:
    """The stack and a pool worker started where an earlier run left its durable of the kinds
    on demand, with a backlog behind it."""
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
    ):
        await js.add_consumer(
            bus.event_log_stream,
            ConsumerConfig(durable_name=ON_DEMAND, filter_subject=event_filter("Pod")),
        )
        async with pool_worker_running(cluster, js, bus, tmp_path) as worker:
            yield KubeApi(client, field_manager="test"), js, bus, worker


async def test_pods_reach_the_pool_worker_only_once_a_pool_needs_them(
    nats_url: str, tmp_path: Path
) -> None:
    async with pool_worker_after_an_earlier_run(nats_url, tmp_path) as (kube, js, bus, worker):
        assert worker.demand_feed is not None
        await until(
            lambda: _without(js, bus, ON_DEMAND), within=WITHIN, what="the old durable gone"
        )
        main = (await consumers(js, bus))["pool-worker"]
        assert event_filter("Pod") not in (main.filter_subjects or [main.filter_subject or ""])
        for index in range(5):
            await kube.create(sandbox_pod(f"sandbox-pod-{index}"))
        await until(
            lambda: _logged_pods(js, bus, 5), within=WITHIN, what="the Pods on the event log"
        )
        handled = worker.feed.stats.handled
        assert worker.demand_feed.stats.handled == 0
        assert not worker.demand_feed.loaded.is_set()

        await kube.create(pool_body())

        async def filled() -> bool:
            pods = [
                p
                for p in await kube.list("Pod", NS)
                if (p["metadata"].get("labels") or {}).get(LABEL_POOL_NAME) == POOL
            ]
            return len(pods) == 2 and all(is_ready(p) for p in pods)

        await until(filled, within=WITHIN, what="the Pool's two Pods Ready")

        await until(lambda: _pool_counts(kube, 2), within=WITHIN, what="the Pool counting its Pods")
        assert ON_DEMAND in await consumers(js, bus)
        assert worker.demand_feed.loaded.is_set()
        # The Pool's Pods came through the feed on demand; the main one took none.
        assert worker.demand_feed.stats.handled > 0
        assert worker.feed.stats.filtered == 0 and worker.feed.stats.handled >= handled


async def test_a_durable_that_cannot_be_deleted_at_start_is_followed_when_needed(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting an earlier run's durable is only a saving: when NATS does not answer it, the
    worker goes on, and follows that durable, from where it stopped, once a Pool needs Pods."""

    async def unanswered(self: BusFeed) -> None:
        raise nats.errors.TimeoutError

    monkeypatch.setattr(BusFeed, "forget_durable", unanswered)
    async with pool_worker_after_an_earlier_run(nats_url, tmp_path) as (kube, js, bus, worker):
        await kube.create(pool_body())
        await until(lambda: _pool_counts(kube, 2), within=WITHIN, what="the Pool's Pods")
        assert worker.demand_feed is not None and worker.demand_feed.loaded.is_set()
        assert ON_DEMAND in await consumers(js, bus)


async def _pool_counts(kube: KubeApi, count: int) -> bool:
    pools = await kube.list("Pool", NS)
    status = (pools[0].get("status") or {}) if pools else {}
    return status.get("total") == count and status.get("available") == count


async def _without(js: JetStreamContext, bus: BusConfig, name: str) -> bool:
    return name not in await consumers(js, bus)


async def _logged_pods(js: JetStreamContext, bus: BusConfig, count: int) -> bool:
    info = await js.stream_info(bus.event_log_stream, subjects_filter=event_filter("Pod"))
    return len(info.state.subjects or {}) >= count
