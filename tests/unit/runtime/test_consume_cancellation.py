"""consume_events stops on one cancel even when nats-py's fetch swallows it.

On Python 3.11 ``fetch`` can return the messages that arrived together with a ``cancel()``
instead of raising it; the consumer loop used to fetch on for good. The fake subscription here
does exactly that, deterministically: the first cancellation during a fetch is swallowed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.runtime.consume import consume_events


class _SwallowingSubscription:
    def __init__(self) -> None:
        self.fetching = asyncio.Event()
        self.fetches = 0
        self.swallowed = 0
        self.unsubscribed = False

    async def fetch(self, batch: int, timeout: float) -> list[Any]:  # noqa: ASYNC109 (nats-py's)
        self.fetches += 1
        self.fetching.set()
        try:
            await asyncio.sleep(timeout)
        except asyncio.CancelledError:
            if self.swallowed:
                raise
            self.swallowed += 1
            return []  # the reply landed with the cancel: nats-py returns it, cancel lost
        raise TimeoutError

    async def unsubscribe(self) -> None:
        self.unsubscribed = True


class _JetStream:
    def __init__(self, sub: _SwallowingSubscription) -> None:
        self.sub = sub

    async def pull_subscribe(self, *args: Any, **kwargs: Any) -> _SwallowingSubscription:
        return self.sub


async def _handle(event: Any, msg: Any) -> None:
    raise AssertionError("no message is ever delivered")


async def test_a_cancel_swallowed_by_fetch_still_stops_the_consumer() -> None:
    sub = _SwallowingSubscription()
    task = asyncio.create_task(
        consume_events(
            _JetStream(sub),  # type: ignore[arg-type]
            filter_subjects=["sandbus.events.>"],
            handle=_handle,
            rejected_by="test",
        )
    )
    await asyncio.wait_for(sub.fetching.wait(), 2.0)

    task.cancel()  # once
    await asyncio.wait({task}, timeout=2.0)

    assert task.done() and task.cancelled()
    assert sub.swallowed == 1
    assert sub.fetches == 1, "fetched again after being cancelled"
    assert sub.unsubscribed
