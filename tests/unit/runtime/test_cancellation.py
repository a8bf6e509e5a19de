"""Stopping tasks that lose their cancellation, as tasks inside nats-py do on Python 3.11.

The fakes here lose a cancel deterministically: ``loses_cancels(n)`` swallows the first ``n``
cancellations (as ``asyncio.wait_for`` does when its reply lands with the cancel) and goes on
waiting for work, the way a publishing task goes back to its queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import pytest

from events.envelope import ObjectKey
from services.runtime.cancellation import honour_lost_cancellation, stop_tasks, supervise
from services.runtime.election import LeaseElector
from services.runtime.lease import LeaseTimings


class Worker:
    """A task body that swallows its first ``lose`` cancellations."""

    def __init__(self, lose: int = 0) -> None:
        self.lose = lose
        self.lost = 0
        self.started = asyncio.Event()
        self.cleaned_up = False

    async def run(self) -> None:
        self.started.set()
        try:
            while True:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    if self.lost >= self.lose:
                        raise
                    self.lost += 1
        finally:
            self.cleaned_up = True


async def test_honouring_a_lost_cancellation_raises_it_where_the_library_swallowed_it() -> None:
    reached_check = asyncio.Event()

    async def loop() -> None:
        while True:
            with contextlib.suppress(asyncio.CancelledError):  # lost inside "the library"
                await asyncio.sleep(3600)
            reached_check.set()
            honour_lost_cancellation()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.wait({task}, timeout=1.0)

    assert reached_check.is_set()
    assert task.cancelled()


async def test_honouring_does_nothing_in_a_task_nobody_cancelled() -> None:
    honour_lost_cancellation()  # the test's own task: not cancelled, nothing raised

    async def checked() -> str:
        honour_lost_cancellation()
        return "ran on"

    assert await asyncio.create_task(checked()) == "ran on"


async def test_a_task_that_loses_its_cancellation_is_cancelled_again_until_it_stops() -> None:
    workers = [Worker(lose=0), Worker(lose=1), Worker(lose=3)]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    await asyncio.sleep(0)

    await stop_tasks(tasks, patience=0.02)

    assert all(task.cancelled() for task in tasks)
    assert [w.lost for w in workers] == [0, 1, 3]
    assert all(w.cleaned_up for w in workers)


async def test_a_task_that_never_stops_is_reported_and_not_waited_for_beyond_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stubborn = Worker(lose=10**9)
    task = asyncio.create_task(stubborn.run(), name="stubborn")
    await asyncio.sleep(0)

    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="services.runtime.cancellation"):
        await stop_tasks([task], bound=0.3, patience=0.05)
    took = time.monotonic() - started

    # It waited out the bound, and no more than a loaded machine's delay past it: the task itself
    # would never have stopped.
    assert 0.3 <= took < 5.0
    assert not task.done()
    assert "stubborn" in caplog.text
    stubborn.lose = 0
    await stop_tasks([task])
    assert task.cancelled()


async def test_a_caller_cancelled_while_stopping_still_waits_for_the_tasks_then_stops() -> None:
    worker = Worker(lose=2)
    child = asyncio.create_task(worker.run())
    await asyncio.sleep(0)

    async def stopper() -> None:
        await stop_tasks([child], patience=0.1)
        raise AssertionError("the caller's cancellation was swallowed")

    caller = asyncio.create_task(stopper())
    await asyncio.sleep(0.02)  # the caller is waiting for the child
    caller.cancel()
    await asyncio.wait({caller}, timeout=2.0)

    assert caller.cancelled(), "the caller's cancellation was lost"
    assert child.cancelled(), "the caller left its child running"


async def test_supervise_stops_every_child_when_its_caller_is_cancelled() -> None:
    workers = [Worker(lose=0), Worker(lose=2)]
    group = asyncio.create_task(supervise((f"child-{i}", w.run()) for i, w in enumerate(workers)))
    for worker in workers:
        await asyncio.wait_for(worker.started.wait(), 1.0)
    before = len(asyncio.all_tasks())

    group.cancel()
    await asyncio.wait({group}, timeout=3.0)

    assert group.cancelled()
    assert all(w.cleaned_up for w in workers)
    assert len(asyncio.all_tasks()) == before - 3  # the group and both children


async def test_supervise_raises_the_first_failure_after_stopping_the_others() -> None:
    survivor = Worker(lose=1)

    async def fails() -> None:
        await survivor.started.wait()
        raise LookupError("the session failed")

    with pytest.raises(LookupError, match="the session failed"):
        await supervise([("survivor", survivor.run()), ("fails", fails())])
    assert survivor.cleaned_up


async def test_supervise_returns_once_every_child_has_returned() -> None:
    finished: list[str] = []

    async def child(name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        finished.append(name)

    await supervise([("slow", child("slow", 0.05)), ("fast", child("fast", 0.0))])
    assert finished == ["fast", "slow"]


class _HangingKube:
    """A Lease API whose read hangs, and whose first cancellation is lost."""

    def __init__(self) -> None:
        self.reading = asyncio.Event()
        self.worker = Worker(lose=1)

    async def get(self, key: ObjectKey) -> dict[str, Any]:
        self.reading.set()
        await self.worker.run()
        raise AssertionError("unreachable")


async def test_the_lease_loop_is_stopped_even_when_it_loses_its_cancellation() -> None:
    kube = _HangingKube()
    elector = LeaseElector(
        kube,  # type: ignore[arg-type]
        namespace="default",
        name="lease",
        identity="me",
        timings=LeaseTimings.for_duration(2.0),
    )

    async def replica() -> None:
        async with elector.running():
            await asyncio.sleep(3600)

    task = asyncio.create_task(replica())
    await asyncio.wait_for(kube.reading.wait(), 1.0)
    task.cancel()
    await asyncio.wait({task}, timeout=2.0)

    assert task.cancelled()
    assert kube.worker.lost == 1 and kube.worker.cleaned_up
