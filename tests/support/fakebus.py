"""A JetStream stand-in for the worker tests: it keeps what the worker publishes (its decisions;
with :class:`MemoJetStream`, its memos too, or refuses them), or fails every publish as a NATS
that is down."""

from __future__ import annotations

import asyncio
from typing import Any

from nats.js.api import PubAck

from events.codec import decode_event
from events.types import DecisionMade


class FakeJetStream:
    """Keeps every publish; with ``fail``, refuses every one (NATS is down)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.published: list[tuple[str, bytes]] = []
        self.fail = fail

    async def publish(self, subject: str, payload: bytes, **_: Any) -> PubAck:
        if self.fail:
            raise ConnectionError("nats is down")
        self.published.append((subject, payload))
        return PubAck(stream="SANDBUS_EVENTS", seq=len(self.published))

    async def publish_async(
        self, subject: str, payload: bytes, **options: Any
    ) -> asyncio.Future[PubAck]:
        """JetStream's publish without waiting: the answer is a future, here settled at once."""
        answer: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        answer.set_result(await self.publish(subject, payload, **options))
        return answer

    def decisions(self) -> list[DecisionMade]:
        found = [decode_event(payload) for _, payload in self.published]
        assert all(isinstance(d, DecisionMade) for d in found)
        return found  # type: ignore[return-value]


class MemoJetStream(FakeJetStream):
    """Also takes the memo stream's writes, or refuses them."""

    def __init__(self, *, refuse_memos: bool = False) -> None:
        super().__init__()
        self.refuse_memos = refuse_memos
        self.memos: list[tuple[str, bytes]] = []

    async def publish(self, subject: str, payload: bytes, **options: Any) -> PubAck:
        if subject.startswith("sandbus.memo."):
            if self.refuse_memos:
                raise TimeoutError("memo stream unavailable")
            self.memos.append((subject, payload))
            return PubAck(stream="SANDBUS_MEMO", seq=len(self.memos))
        return await super().publish(subject, payload, **options)
