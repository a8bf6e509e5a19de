"""The work queue keeps controller-runtime's promises: one task per key, nothing lost, backoff."""

from __future__ import annotations

import asyncio

import pytest

from api.workqueue import QueueShutDown, WorkQueue


async def take(queue: WorkQueue[str]) -> tuple[str, tuple[str, ...]]:
    async with asyncio.timeout(2):
        return await queue.get()


async def test_a_key_waits_once_and_remembers_every_trigger() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a", "e1")
    queue.add("a", "e2")
    queue.add("a", "e1")
    queue.add("b")
    assert len(queue) == 2
    assert await take(queue) == ("a", ("e1", "e2"))
    assert await take(queue) == ("b", ())


async def test_a_key_being_processed_is_not_handed_out_again_but_comes_back_after() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    key, _ = await take(queue)
    queue.add("a", "during")
    assert len(queue) == 0, "not ready while it is being processed"
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    assert not getter.done()
    queue.done(key)
    async with asyncio.timeout(2):
        assert await getter == ("a", ("during",))


async def test_done_without_new_adds_leaves_the_queue_idle() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    key, _ = await take(queue)
    waiter = asyncio.create_task(queue.join())
    await asyncio.sleep(0)
    assert not waiter.done()
    queue.done(key)
    async with asyncio.timeout(2):
        await waiter
    assert queue.idle()


async def test_add_after_keeps_the_earliest_schedule() -> None:
    queue: WorkQueue[str] = WorkQueue()
    loop = asyncio.get_running_loop()
    start = loop.time()
    queue.add_after("a", 5.0)
    queue.add_after("a", 0.02)
    queue.add_after("a", 3.0)
    assert queue.scheduled == frozenset({"a"})
    await take(queue)
    assert loop.time() - start < 1.0


async def test_a_pass_serves_the_schedules_made_before_it() -> None:
    """A key an event asks for before its timer fires is served once: the timer goes with the
    pass, and a pass that still needs one asks again."""
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 0.05)
    queue.add("a", "event")
    assert await take(queue) == ("a", ("event",))
    assert queue.scheduled == frozenset()
    queue.done("a")
    await asyncio.sleep(0.1)
    assert queue.idle() and len(queue) == 0, "no second pass when the timer would have fired"
    queue.add_after("a", 0.02)  # the planner asks again
    assert await take(queue) == ("a", ())


async def test_unschedule_drops_the_timer_of_a_gone_object_and_nothing_else() -> None:
    """The development cluster's kubelet on a DELETED event: no pass is due for the object, but
    one already waiting, and the key's backoff, are not the timer's."""
    queue: WorkQueue[str] = WorkQueue(base_delay=0.01)
    queue.add_soon("gone", 0.02, trigger="e1")
    queue.unschedule("gone")
    await asyncio.sleep(0.05)
    assert queue.idle() and not queue.scheduled, "the timer is dropped"
    queue.add("gone")
    assert await take(queue) == ("gone", ()), "with the triggers it was keeping"
    queue.backoff("gone")
    queue.add("gone", "e2")  # added while being processed: it comes back after done
    queue.unschedule("gone")
    assert not queue.scheduled and queue.failures("gone") == 1
    queue.done("gone")
    assert await take(queue) == ("gone", ("e2",))


async def test_backoff_doubles_and_forget_resets() -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=0.01, max_delay=0.05)
    delays = [queue.backoff("a") for _ in range(5)]
    assert delays == [0.01, 0.02, 0.04, 0.05, 0.05]
    queue.forget("a")
    assert queue.failures("a") == 0
    assert queue.backoff("a") == 0.01
    assert queue.backoff("a", at_least=3.0) == 3.0, "even above the queue's maximum"
    assert queue.backoff("a") == 0.04 and queue.failures("a") == 3
    await take(queue)


async def test_shutdown_wakes_waiting_getters() -> None:
    queue: WorkQueue[str] = WorkQueue()
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add_after("later", 10)
    queue.shutdown()
    with pytest.raises(QueueShutDown):
        async with asyncio.timeout(2):
            await getter
    assert queue.scheduled == frozenset()
    queue.add("ignored")
    assert len(queue) == 0


async def test_a_cancelled_getter_does_not_swallow_a_key() -> None:
    queue: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add("a")
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    async with asyncio.timeout(2):
        key, _ = await second
    assert key == "a"


async def test_a_burst_added_soon_is_one_pass_with_every_trigger() -> None:
    """A pool woken by each of its members: the adds within the window are one pass."""
    queue: WorkQueue[str] = WorkQueue()
    for index in range(50):
        queue.add_soon("pool", 0.05, trigger=f"e{index}")
    assert len(queue) == 0 and "pool" in queue.scheduled, "waiting for the rest of the burst"
    key, triggers = await take(queue)
    assert key == "pool" and len(triggers) == 16, "the last 16 triggers are kept"
    queue.done(key)
    assert len(queue) == 0 and not queue.scheduled, "one pass for the whole burst"


async def test_add_soon_does_not_delay_a_key_already_waiting() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("pool")
    queue.add_soon("pool", 10.0, trigger="later")
    assert not queue.scheduled
    assert await take(queue) == ("pool", ("later",))


async def test_a_change_joins_a_pass_scheduled_within_its_patience() -> None:
    """A Sandbox's pass at the end of its status window serves the Pod progress of the
    meantime: joined, the change is among that pass's triggers and asks for nothing sooner."""
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("sb", 0.05)
    assert queue.join_scheduled("sb", 1.0, trigger="progress")
    assert len(queue) == 0 and "sb" in queue.scheduled
    assert await take(queue) == ("sb", ("progress",))


@pytest.mark.parametrize(
    ("scheduled", "within"),
    [(None, 1.0), (5.0, 1.0), (0.05, 0.0)],
    ids=["none scheduled", "scheduled too late", "no patience"],
)
async def test_a_change_joins_no_pass_beyond_its_patience(
    scheduled: float | None, within: float
) -> None:
    queue: WorkQueue[str] = WorkQueue()
    if scheduled is not None:
        queue.add_after("sb", scheduled)
    assert not queue.join_scheduled("sb", within, trigger="progress")
    queue.add("sb")  # what the caller does then
    assert await take(queue) == ("sb", ())


async def test_background_keys_wait_behind_every_other_key_unless_an_event_asks() -> None:
    """After a load every key gets a pass in the background lane; a fresh change is served
    first, and a background key an event asks for moves to the front."""
    queue: WorkQueue[str] = WorkQueue()
    for name in ("old-1", "old-2", "old-3"):
        queue.add(name, background=True)
    queue.add("fresh", "e1")
    queue.add("old-3", "e2")
    order = [(await take(queue))[0] for _ in range(4)]
    assert order == ["fresh", "old-3", "old-1", "old-2"]
    assert len(queue) == 0
