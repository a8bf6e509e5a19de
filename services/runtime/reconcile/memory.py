"""A worker's per-key memory on the bus: the memo its planner returned and its expectations.

A planner is pure, so what it must remember between passes (a write-behind clock, "waiting
since", the creates it is waiting to see) comes back as the plan's ``memo``, and the runtime
keeps it per key and hands it to the next observe. Kept in memory only, a restart would lose
it, and with it the one thing expectations exist for. So each key's :class:`KeyRecord` is
also a message on ``sandbus.memo.<worker>.<kind>.<namespace>.<name>`` in the memo stream (one
message per subject, like the state table): written when it changes, *before* the actions it
covers run, and read back when a worker starts, together with the state table.

A key with nothing to remember is written as ``null`` with a TTL, so that a worker needs no
purge right on the stream and forgotten keys expire.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from events.subjects import memo_filter, memo_subject, replica_filter
from services.runtime.bus import BusConfig
from services.runtime.cache import ObjectKey
from services.runtime.reconcile.expectations import Expectations
from services.runtime.streams import read_to_end

__all__ = ["KeyRecord", "MemoStore"]

log = logging.getLogger(__name__)


class KeyRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    kind: str
    namespace: str
    name: str
    memo: Any = None
    """The plan's memo as JSON builtins (the reconciler converts it back to its type)."""
    expectations: Expectations | None = None

    @property
    def key(self) -> ObjectKey:
        return ObjectKey(self.kind, self.namespace, self.name)

    @property
    def empty(self) -> bool:
        return self.memo is None and not self.expectations


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(KeyRecord | None)


class MemoStore:
    def __init__(self, js: JetStreamContext, *, worker: str, bus: BusConfig) -> None:
        self.js = js
        self.worker = worker
        self.bus = bus
        self.writes = 0

    async def put(self, record: KeyRecord, *, ack_timeout: float = 5.0) -> None:
        """Write ``record`` (an empty one as a tombstone); raises when JetStream does not
        confirm it, so that the writes it covers are not made."""
        subject = memo_subject(self.worker, record.kind, record.namespace, record.name)
        if record.empty:
            await self.js.publish(
                subject,
                b"null",
                stream=self.bus.memo_stream,
                timeout=ack_timeout,
                msg_ttl=self.bus.state_tombstone_ttl,
            )
        else:
            await self.js.publish(
                subject, _encoder.encode(record), stream=self.bus.memo_stream, timeout=ack_timeout
            )
        self.writes += 1

    async def load(self) -> dict[ObjectKey, KeyRecord]:
        """Every key this worker remembers something of."""
        records: dict[ObjectKey, KeyRecord] = {}
        heartbeats = replica_filter(self.worker).removesuffix("*")
        async for msg in read_to_end(
            self.js,
            self.bus.memo_stream,
            [memo_filter(self.worker)],
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            name_prefix=f"{self.worker}-memo",
        ):
            if msg.subject.startswith(heartbeats):
                continue  # the replicas' heartbeats share the worker's subjects (.sharding)
            try:
                record = _decoder.decode(msg.data)
            except msgspec.DecodeError as error:
                log.warning("%s: ignoring a memo on %s: %s", self.worker, msg.subject, error)
                continue
            if record is not None and not record.empty:
                records[record.key] = record
        return records
