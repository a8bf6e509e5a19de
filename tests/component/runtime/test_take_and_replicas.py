"""Taking warm entries and sharing keys among replicas, against a real nats-server.

A take hands out a queue's entries oldest first within a node, from the node its spread names
first, one taker at a time, and answers at once when the queue is empty; an entry given back
is offered again; a dropped queue's consumers are made again by the next take, and no entry is
lost with them. Replicas that heartbeat see each other,
agree on who owns each key, and stop counting a replica at once when it says it leaves, or
after the TTL when it dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import nats
import pytest
from nats.js import JetStreamContext

from events.envelope import ObjectKey
from events.types import WarmEntry, warm_queued_event
from services.domain.agentsandbox.warmqueue import DropQueue, Enqueue, Take, WarmQueue
from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.actions import Plan
from services.runtime.reconcile.executing import Execution, ExecutionContext, execute
from services.runtime.reconcile.sharding import Membership
from services.runtime.reconcile.sources import Delivery
from services.runtime.reconcile.warm import WarmTaker
from tests.support.waiting import until

BUS = BusConfig(storage="memory")
QUEUE = WarmQueue("default", "h1", "pool-a")
CLAIM = ObjectKey("SandboxClaim", "default", "c1")


@pytest.fixture
async def js(nats_url: str) -> AsyncIterator[JetStreamContext]:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_bus(js, BUS)
        yield js
    finally:
        await nc.close()


def entry(name: str, pool: str = "pool-a", node: str | None = None) -> Enqueue:
    event = warm_queued_event(
        "Sandbox",
        "default",
        name,
        WarmEntry(
            uid=f"uid-{name}", resource_version="5", template_hash="h1", pool=pool, node=node
        ),
        time=datetime.now(UTC),
        source="sandbus/pool",
    )
    return Enqueue(event)


async def attempt(
    js: JetStreamContext,
    taker: WarmTaker,
    *actions: object,
    hold: Callable[[Delivery], None] = lambda delivery: None,
) -> Execution:
    """``actions`` carried out for :data:`CLAIM`, as a plan of its own."""
    context = ExecutionContext(
        api=None,  # type: ignore[arg-type]
        cache=ObjectCache(),
        js=js,
        bus=BUS,
        key=CLAIM,
        hold=hold,
    )
    return await execute(Plan(actions=actions), taker.executors(), context)  # type: ignore[arg-type]


async def run(js: JetStreamContext, taker: WarmTaker, *actions: object) -> list[Delivery]:
    held: list[Delivery] = []
    done = await attempt(js, taker, *actions, hold=held.append)
    assert done.error is None, done.error
    return held


@contextlib.contextmanager
def pulls_lost(js: JetStreamContext, how_many: int | None = None) -> Iterator[list[str]]:
    """The connection's pull requests go nowhere (the first ``how_many``; None: all), as if
    the connection were lost under them; yields the subjects of those lost."""
    nc = js._nc
    publish = nc.publish
    lost: list[str] = []

    async def losing(subject: str, payload: bytes = b"", **kwargs: Any) -> None:
        if ".CONSUMER.MSG.NEXT." in subject and (how_many is None or len(lost) < how_many):
            lost.append(subject)
            return
        await publish(subject, payload, **kwargs)

    nc.publish = losing  # type: ignore[method-assign]
    try:
        yield lost
    finally:
        nc.publish = publish  # type: ignore[method-assign]


async def test_takes_hand_out_the_pool_entries_oldest_first_then_answer_empty_at_once(
    js: JetStreamContext,
) -> None:
    taker = WarmTaker(ack_wait=30)
    await run(js, taker, entry("a"), entry("b"), entry("other", pool="pool-b"))
    first = await run(js, taker, Take(QUEUE, CLAIM))
    second = await run(js, taker, Take(QUEUE, CLAIM))
    assert [d.message.subject.rsplit(".", 1)[-1] for d in first + second] == ["a", "b"]
    assert all(d.key == CLAIM for d in first + second)
    started = time.monotonic()
    assert await run(js, taker, Take(QUEUE, CLAIM)) == [], "pool-b's entry is not pool-a's"
    assert time.monotonic() - started < 1.0, "an empty queue answers at once"
    assert taker.empty == 1


async def test_an_entry_given_back_is_offered_again_and_an_acked_one_never(
    js: JetStreamContext,
) -> None:
    taker = WarmTaker(ack_wait=30)
    await run(js, taker, entry("a"), entry("b"))
    (a,) = await run(js, taker, Take(QUEUE, CLAIM))
    (b,) = await run(js, taker, Take(QUEUE, CLAIM))
    await a.handle.nak()  # what Release does
    await b.handle.ack_sync()  # what Ack does, after an adoption
    (again,) = await run(js, taker, Take(QUEUE, CLAIM))
    assert again.message.subject == a.message.subject
    assert again.message.delivered == 2
    await again.handle.ack_sync()
    assert await run(js, taker, Take(QUEUE, CLAIM)) == []


async def test_an_entry_of_a_taker_that_died_comes_back_after_the_ack_wait(
    js: JetStreamContext,
) -> None:
    await run(js, WarmTaker(ack_wait=1), entry("a"))
    (dying,) = await run(js, WarmTaker(ack_wait=1), Take(QUEUE, CLAIM))
    assert await run(js, WarmTaker(ack_wait=1), Take(QUEUE, CLAIM)) == [], "held meanwhile"
    await asyncio.sleep(1.5)
    (back,) = await run(js, WarmTaker(ack_wait=1), Take(QUEUE, CLAIM))
    assert back.message.subject == dying.message.subject


async def test_a_dropped_queue_is_made_again_by_the_next_take(js: JetStreamContext) -> None:
    taker = WarmTaker()
    await run(js, taker, entry("a"))
    await run(js, taker, Take(QUEUE, CLAIM))
    pool = ObjectKey("SandboxWarmPool", "default", "pool-a")
    await run(js, taker, DropQueue(QUEUE, pool))
    assert await js.consumers_info(BUS.warm_stream) == []
    await run(js, taker, entry("b"))
    again = [*await run(js, taker, Take(QUEUE, CLAIM)), *await run(js, taker, Take(QUEUE, CLAIM))]
    # The entries stay on the stream (the pool worker purges them with their members): the
    # entry the dropped consumer had handed out is offered again, then the new one.
    assert [d.message.subject.rsplit(".", 1)[-1] for d in again] == ["a", "b"]


async def test_takes_at_once_from_one_consumer_each_get_their_own_answer(
    js: JetStreamContext,
) -> None:
    """Forty takes at once from a queue of twenty, over the one subscription the consumer's
    pulls share: twenty distinct entries and twenty empty answers, none waiting in vain."""
    taker = WarmTaker()
    await run(js, taker, *(entry(f"m{index}") for index in range(20)))
    results = await asyncio.gather(*(run(js, taker, Take(QUEUE, CLAIM)) for _ in range(40)))
    taken = [name for held in results for name in names(held)]
    assert sorted(taken) == sorted(f"m{index}" for index in range(20))
    assert taker.empty == 20


async def test_a_take_whose_answer_is_lost_fails_and_the_next_takes_go_on(
    js: JetStreamContext,
) -> None:
    """A pull request that never reaches the server (a connection lost under it): that take
    fails after its timeout, saying so, and the takes after it are served as before."""
    taker = WarmTaker(timeout=0.5)
    await run(js, taker, entry("a"), entry("b"))
    with pulls_lost(js, 1) as lost:
        failed = await attempt(js, taker, Take(QUEUE, CLAIM))
    assert lost and failed.error is not None and "no answer from queue" in failed.error
    assert names(await run(js, taker, Take(QUEUE, CLAIM))) == ["a"]
    assert names(await run(js, taker, Take(QUEUE, CLAIM))) == ["b"]
    assert await run(js, taker, Take(QUEUE, CLAIM)) == []


async def test_a_take_waiting_when_its_queue_is_dropped_fails_at_once(
    js: JetStreamContext,
) -> None:
    taker = WarmTaker(timeout=30)
    await run(js, taker, entry("a"))
    with pulls_lost(js):
        waiting = asyncio.create_task(attempt(js, taker, Take(QUEUE, CLAIM)))
        await asyncio.sleep(0.2)
        assert not waiting.done()
    started = time.monotonic()
    await run(js, taker, DropQueue(QUEUE, ObjectKey("SandboxWarmPool", "default", "pool-a")))
    failed = await asyncio.wait_for(waiting, 5)
    assert failed.error is not None and "was deleted" in failed.error
    assert time.monotonic() - started < 5


async def test_a_take_whose_subscription_fails_fails_and_the_next_subscribes_again(
    js: JetStreamContext,
) -> None:
    taker = WarmTaker()
    await run(js, taker, entry("a"))
    nc = js._nc
    subscribe = nc.subscribe
    refused: list[str] = []

    async def refusing_once(subject: str, **kwargs: Any) -> Any:
        if not refused:
            refused.append(subject)
            raise nats.errors.ConnectionReconnectingError
        return await subscribe(subject, **kwargs)

    nc.subscribe = refusing_once  # type: ignore[method-assign]
    try:
        failed = await attempt(js, taker, Take(QUEUE, CLAIM))
        assert refused and failed.error is not None
        assert names(await run(js, taker, Take(QUEUE, CLAIM))) == ["a"]
    finally:
        nc.subscribe = subscribe  # type: ignore[method-assign]


def names(deliveries: list[Delivery]) -> list[str]:
    return [d.message.subject.rsplit(".", 1)[-1] for d in deliveries]


async def take_all(js: JetStreamContext, taker: WarmTaker) -> list[str]:
    taken: list[Delivery] = []
    while held := await run(js, taker, Take(QUEUE, CLAIM)):
        taken.extend(held)
    return names(taken)


async def test_takes_follow_the_node_spread_order_then_any_node_left(
    js: JetStreamContext,
) -> None:
    """The taker pulls from the nodes in its spread's order (FIFO within a node), then from
    entries without a node, then from a node its spread did not name (the cache had not shown
    that member yet): none is left behind."""
    await run(js, WarmTaker(), entry("a1", node="node-a"), entry("b1", node="node-b"))
    await run(js, WarmTaker(), entry("b2", node="node-b"), entry("free"))
    await run(js, WarmTaker(), entry("c1", node="node-c"))
    taker = WarmTaker(spread=lambda queue, cache: ("node-b", "node-a"))
    assert await take_all(js, taker) == ["b1", "b2", "a1", "free", "c1"]
    assert taker.empty == 1


async def test_a_spread_order_is_reused_for_a_moment(js: JetStreamContext) -> None:
    """Counting a pool's members is a pass over them: the takes of a burst within the order's
    time to live reuse it; after that it is counted again."""
    asked: list[WarmQueue] = []

    def spread(queue: WarmQueue, cache: ObjectCache) -> tuple[str, ...]:
        asked.append(queue)
        return ("node-a",)

    await run(js, WarmTaker(), *(entry(f"a{i}", node="node-a") for i in range(3)))
    taker = WarmTaker(spread=spread, spread_ttl=60)
    took = [*await run(js, taker, Take(QUEUE, CLAIM)), *await run(js, taker, Take(QUEUE, CLAIM))]
    assert len(took) == 2 and len(asked) == 1
    fresh = WarmTaker(spread=spread, spread_ttl=0)
    await run(js, fresh, Take(QUEUE, CLAIM))
    assert len(asked) == 2


async def test_a_node_found_empty_is_not_asked_again_while_the_order_lasts(
    js: JetStreamContext,
) -> None:
    """In a burst the order's first node drains first; the takes after that go straight to the
    next node instead of asking the drained one again (one pull per take, not one per node)."""
    asked: list[str] = []

    class CountingTaker(WarmTaker):
        async def _pull(self, js: Any, bus: Any, queue: WarmQueue, node: str) -> Any:
            asked.append(node)
            return await super()._pull(js, bus, queue, node)

    await run(js, WarmTaker(), entry("a1", node="node-a"))
    await run(js, WarmTaker(), *(entry(f"b{i}", node="node-b") for i in range(3)))
    taker = CountingTaker(spread=lambda queue, cache: ("node-a", "node-b"), spread_ttl=60)
    assert await take_all(js, taker) == ["a1", "b0", "b1", "b2"]
    # a1; node-a empty, then b0; b1 and b2 from node-b at once; the last take finds all empty.
    assert asked == ["node-a", "node-a", "node-b", "node-b", "node-b", "node-b", "", "node-a"]


async def test_without_a_spread_the_fullest_node_comes_first(js: JetStreamContext) -> None:
    await run(js, WarmTaker(), entry("a1", node="node-a"), entry("b1", node="node-b"))
    await run(js, WarmTaker(), entry("b2", node="node-b"))
    assert await take_all(js, WarmTaker()) == ["b1", "b2", "a1"]


async def test_dropping_a_queue_deletes_the_consumer_of_every_node_and_only_its_own(
    js: JetStreamContext,
) -> None:
    taker = WarmTaker()
    await run(js, taker, entry("a1", node="node-a"), entry("b1", node="node-b"))
    await run(js, taker, entry("x", pool="pool-a2", node="node-a"))
    await take_all(js, taker)
    await run(js, taker, Take(WarmQueue("default", "h1", "pool-a2"), CLAIM))
    before = {info.name for info in await js.consumers_info(BUS.warm_stream)}
    pool_a2 = {"warm:default:h1:pool-a2:node-a", "warm:default:h1:pool-a2:="}
    assert before - pool_a2 == {
        "warm:default:h1:pool-a:node-a",
        "warm:default:h1:pool-a:node-b",
        "warm:default:h1:pool-a:=",
    }
    await run(js, taker, DropQueue(QUEUE, ObjectKey("SandboxWarmPool", "default", "pool-a")))
    left = {info.name for info in await js.consumers_info(BUS.warm_stream)}
    assert left == pool_a2


async def test_replicas_see_each_other_and_agree_on_every_key(js: JetStreamContext) -> None:
    one = Membership(js, worker="claim", identity="one", bus=BUS, ttl=1)
    two = Membership(js, worker="claim", identity="two", bus=BUS, ttl=1)
    for member in (one, two):
        await member.beat()
    for member in (one, two):
        member._update(await member.read())
    assert one.members == two.members == {"one", "two"}
    keys = [ObjectKey("SandboxClaim", "default", f"c{i}") for i in range(200)]
    owned_by_one = {key for key in keys if one.owns(key)}
    owned_by_two = {key for key in keys if two.owns(key)}
    assert owned_by_one.isdisjoint(owned_by_two) and owned_by_one | owned_by_two == set(keys)
    assert 60 < len(owned_by_one) < 140, "the keys are shared out, not all to one replica"

    await two.leave()
    assert await one.read() == {"one"}, "a replica that leaves stops counting at once"


async def test_a_replica_that_dies_stops_counting_after_its_ttl(js: JetStreamContext) -> None:
    one = Membership(js, worker="claim", identity="one", bus=BUS, ttl=1)
    dead = Membership(js, worker="claim", identity="dead", bus=BUS, ttl=1)
    await dead.beat()
    await one.beat()
    assert await one.read() == {"one", "dead"}

    async def only_one() -> bool:
        if await one.read() == {"one"}:
            return True
        await one.beat()
        return False

    await until(only_one, within=5, interval=0.2, what="the dead replica's heartbeat to expire")
