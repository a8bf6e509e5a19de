"""Stopping the bus feed even when a cancellation is swallowed on the way (Python 3.11 with
nats-py's fetch), and its subject filters."""

from __future__ import annotations

import asyncio

from services.runtime.reconcile.feeding import BusFeed, durable_name, stop


async def test_stop_repeats_a_swallowed_cancellation() -> None:
    cancellations = 0

    async def stubborn() -> None:
        nonlocal cancellations
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancellations += 1
                if cancellations == 1:
                    continue  # what a lost cancellation looks like to the task that lost it
                raise

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        await stop(task, patience=0.01)
    assert task.cancelled() and cancellations == 2


async def test_stop_of_a_finished_task_is_quiet() -> None:
    async def fails() -> None:
        raise ValueError("already reported elsewhere")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await stop(task)
    assert task.done()


def test_the_feed_follows_the_event_subjects_of_its_kinds() -> None:
    feed = BusFeed(None, worker="sandbox", kinds=("Sandbox", "Pod"), deliver=lambda e: None)  # type: ignore[arg-type]
    assert feed.event_filters == ["sandbus.events.sandbox.*.*", "sandbus.events.pod.*.*"]
    assert feed.durable == durable_name("sandbox") == "sandbox-worker"
