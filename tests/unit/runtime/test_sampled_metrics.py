"""Gauges read by I/O, sampled when scraped, and the worker's own metrics: reconcile errors,
decisions published, and its gauges only while it runs."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping

import aiohttp
import pytest

from services.runtime.endpoint import sample, serve_metrics
from services.runtime.metrics import RECONCILES, Metrics, MetricsError
from services.runtime.worker_api import Gauge
from tests.support.fakeapi import ScriptedApi
from tests.support.fakebus import FakeJetStream
from tests.unit.runtime.toys import WIDGET, PodPerWidget, worker

DEPTH = "queue_depth"


class Depths:
    """A sampler whose answers a test sets; it counts how often it was asked."""

    def __init__(self) -> None:
        self.answer: Mapping[tuple[str, ...], float] | Exception = {("ns", "a"): 3.0}
        self.asked = 0

    async def __call__(self) -> Mapping[tuple[str, ...], float]:
        self.asked += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


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


async def test_a_sampled_gauge_is_read_when_scraped_and_only_then() -> None:
    metrics = Metrics()
    depths = Depths()
    metrics.sample_from(DEPTH, "Depth.", ("namespace", "queue"), depths)
    assert depths.asked == 0, "registering reads nothing"
    text = await scrape(metrics)
    assert "# TYPE queue_depth gauge" in text
    assert 'queue_depth{namespace="ns",queue="a"} 3.0' in text
    depths.answer = {("ns", "a"): 1.0, ("ns", "b"): 0.0}
    text = await scrape(metrics)
    assert 'queue_depth{namespace="ns",queue="a"} 1.0' in text
    assert 'queue_depth{namespace="ns",queue="b"} 0.0' in text
    assert depths.asked == 2


async def test_a_sample_that_fails_or_hangs_leaves_no_series_until_one_succeeds() -> None:
    metrics = Metrics()
    depths = Depths()
    metrics.sample_from(DEPTH, "Depth.", ("namespace", "queue"), depths)
    await sample(metrics)
    assert metrics.value(DEPTH, {"namespace": "ns", "queue": "a"}) == 3.0
    depths.answer = ConnectionError("nats is down")
    await sample(metrics)
    assert metrics.value(DEPTH, {"namespace": "ns", "queue": "a"}) is None, "unknown, not stale"

    async def hangs() -> Mapping[tuple[str, ...], float]:
        await asyncio.sleep(60)
        return {}

    metrics.sample_from(DEPTH, "Depth.", ("namespace", "queue"), hangs)
    async with asyncio.timeout(5):
        await sample(metrics, within=0.05)
    assert "queue_depth{" not in metrics.exposition().decode()
    metrics.sample_from(DEPTH, "Depth.", ("namespace", "queue"), Depths())
    await sample(metrics)
    assert metrics.value(DEPTH, {"namespace": "ns", "queue": "a"}) == 3.0


async def test_a_stopped_sampler_takes_its_series_away_unless_replaced() -> None:
    metrics = Metrics()
    first, second = Depths(), Depths()
    metrics.sample_from(DEPTH, "Depth.", ("namespace", "queue"), first)
    metrics.sample_from(DEPTH, "Depth.", ("namespace", "queue"), second)  # started again
    metrics.stop_sampling(DEPTH, first)  # the old one stopping late changes nothing
    await sample(metrics)
    assert (first.asked, second.asked) == (0, 1)
    assert metrics.value(DEPTH, {"namespace": "ns", "queue": "a"}) == 3.0
    metrics.stop_sampling(DEPTH, second)
    await sample(metrics)
    assert metrics.value(DEPTH, {"namespace": "ns", "queue": "a"}) is None


def test_a_sampled_gauge_keeps_its_labels() -> None:
    metrics = Metrics()
    metrics.sample_from(DEPTH, "Depth.", ("namespace", "queue"), Depths())
    with pytest.raises(MetricsError, match=DEPTH):
        metrics.sample_from(DEPTH, "Depth.", ("pool",), Depths())


# --- the worker's ---------------------------------------------------------------------------


async def test_a_reconcile_that_raises_counts_as_an_error() -> None:
    """A planner that raises is a recorded error; so is a pass that raises before its
    decision (here: an observe that fails), which only the work loop sees."""
    reconciler = PodPerWidget()

    def broken(*_: object) -> None:
        raise RuntimeError("observe bug")

    reconciler.observe = broken  # type: ignore[method-assign]
    w = worker(reconciler, ScriptedApi())
    task = asyncio.create_task(w._work())
    try:
        w.queue.add(WIDGET)
        async with asyncio.timeout(2):
            await w.settled()
    finally:
        w.queue.shutdown()
        async with asyncio.timeout(2):
            await task
    labels = {"worker": "toy", "kind": "Widget", "result": "error"}
    assert w.metrics.value(RECONCILES, labels, "_total") == 1


async def test_a_worker_counts_the_decisions_it_published() -> None:
    w = worker(PodPerWidget(), ScriptedApi(), FakeJetStream())
    await w.reconcile(WIDGET)
    await asyncio.sleep(0)  # the acknowledgement is counted when it arrives, after the pass
    assert w.metrics.value("sandbus_events_published", {"worker": "toy"}, "_total") == 1


async def test_a_worker_s_gauges_are_sampled_while_it_runs() -> None:
    """An active-passive worker runs only while it leads: a standby reports no depth."""
    depths = Depths()

    async def read(*_: object) -> Mapping[tuple[str, ...], float]:
        return await depths()

    w = worker(PodPerWidget(), ScriptedApi())
    gauge = Gauge(DEPTH, "Depth.", ("namespace", "queue"), read)
    w.definition = dataclasses.replace(w.definition, gauges=(gauge,))

    async def load() -> dict[object, object]:
        return {}

    async def follow(_: object) -> None:
        await asyncio.Event().wait()

    w.memos.load = load  # type: ignore[method-assign,assignment]
    w.feed.run = follow  # type: ignore[method-assign,assignment]
    await sample(w.metrics)
    assert w.metrics.value(DEPTH, {"namespace": "ns", "queue": "a"}) is None, "not running yet"
    running = asyncio.create_task(w.run())
    try:
        async with asyncio.timeout(2):
            while w.metrics.value(DEPTH, {"namespace": "ns", "queue": "a"}) is None:
                await asyncio.sleep(0.01)
                await sample(w.metrics)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(5):
                await running
    await sample(w.metrics)
    assert w.metrics.value(DEPTH, {"namespace": "ns", "queue": "a"}) is None, "stopped"
