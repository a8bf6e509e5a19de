"""Active-active replicas that share a worker's keys: each key is reconciled by one replica.

A claim worker runs on several replicas at once (its warm-queue consumers hand each entry to
one of them), but two replicas reconciling the same claim would each take an entry for it and
race to adopt: safe, because every adoption write carries a resourceVersion precondition, but
wasteful, and the loser holds an entry that another claim needed. So the keys are divided.

Membership lives on the bus: each replica publishes a heartbeat on
``sandbus.memo.<worker>.replica.<identity>`` every third of ``ttl``, with a per-message TTL of
``ttl``, so the memo stream (one message per subject) holds exactly the replicas heard from
within the TTL; a replica that stops cleanly says so in a last heartbeat. Every replica reads
the set at each heartbeat, and a key belongs to the member with the highest hash of (member, key)
(rendezvous hashing): every replica computes the same owner from the same set, and a member
joining or leaving moves only the keys it gains or loses.

Between a change and the moment every replica has seen it, two replicas may both think they
own a key (or neither does, for at most one heartbeat). Neither breaks an invariant: the
preconditions make the second writer fail, and a key no replica owns waits one heartbeat. On
every change a replica reconciles again the keys it has just gained. Every replica still
follows every change (a durable of its own on the event log): its cache is the whole world,
only the reconciles are divided.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections.abc import Callable, Iterable

import msgspec
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext

from events.envelope import ObjectKey
from events.subjects import decode_token, replica_filter, replica_subject
from services.runtime.bus import BusConfig

__all__ = ["Membership", "owner_of"]

log = logging.getLogger(__name__)


def _score(member: str, key: ObjectKey) -> bytes:
    text = f"{member}\x00{key.kind}\x00{key.namespace}\x00{key.name}"
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def owner_of(key: ObjectKey, members: Iterable[str]) -> str | None:
    """The member that reconciles ``key`` (None: no members)."""
    return max(members, key=lambda member: _score(member, key), default=None)


class _Heartbeat(msgspec.Struct, frozen=True, rename="camel"):
    identity: str
    since: float
    leaving: bool = False


class Membership:
    """This replica's view of its worker's live replicas; see the module doc."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        worker: str,
        identity: str,
        bus: BusConfig | None = None,
        ttl: float = 6.0,
    ) -> None:
        self.js = js
        self.worker = worker
        self.identity = identity
        self.bus = bus or BusConfig()
        self.ttl = max(1, math.ceil(ttl))  # per-message TTLs are whole seconds
        self.members: frozenset[str] = frozenset({identity})
        self.on_change: Callable[[frozenset[str], frozenset[str]], None] | None = None
        self._since = time.time()
        self.joined = asyncio.Event()

    def owns(self, key: ObjectKey) -> bool:
        return owner_of(key, self.members) == self.identity

    async def run(self) -> None:
        """Heartbeat and follow the members until cancelled; then leave."""
        try:
            while True:
                try:
                    await self.beat()
                    self._update(await self.read())
                    self.joined.set()
                except (nats.errors.Error, TimeoutError) as error:
                    if isinstance(error, nats.errors.ConnectionClosedError):
                        raise
                    log.warning("%s: membership heartbeat failed: %r", self.identity, error)
                await asyncio.sleep(self.ttl / 3)
        finally:
            await self.leave()

    async def beat(self, *, leaving: bool = False) -> None:
        payload = msgspec.json.encode(_Heartbeat(self.identity, self._since, leaving))
        await self.js.publish(
            replica_subject(self.worker, self.identity),
            payload,
            stream=self.bus.memo_stream,
            msg_ttl=1 if leaving else self.ttl,
        )

    async def read(self) -> frozenset[str]:
        info = await self.js.stream_info(
            self.bus.memo_stream, subjects_filter=replica_filter(self.worker)
        )
        subjects = info.state.subjects or {}
        members = {decode_token(subject.rsplit(".", 1)[-1]) for subject in subjects}
        leaving = [m for m in members if m != self.identity and await self._leaving(m)]
        return frozenset((members - set(leaving)) | {self.identity})

    async def _leaving(self, member: str) -> bool:
        # A replica that stopped cleanly said so; the others stop counting it at once.
        try:
            msg = await self.js.get_last_msg(
                self.bus.memo_stream, replica_subject(self.worker, member), direct=True
            )
        except nats.js.errors.NotFoundError:
            return True
        try:
            return msgspec.json.decode(msg.data or b"", type=_Heartbeat).leaving
        except msgspec.DecodeError:
            return False

    async def leave(self) -> None:
        # A heartbeat that says "leaving" (with the shortest TTL) rather than a purge: a worker
        # may only publish on its own subjects, not purge the memo stream.
        try:
            await asyncio.wait_for(self.beat(leaving=True), timeout=2.0)
        except (nats.errors.Error, TimeoutError) as error:
            log.debug("%s: leaving the membership: %r", self.identity, error)

    def _update(self, members: frozenset[str]) -> None:
        if members == self.members:
            return
        previous, self.members = self.members, members
        log.info("%s: %s replicas now %s", self.identity, self.worker, ", ".join(sorted(members)))
        if self.on_change is not None:
            self.on_change(previous, members)
