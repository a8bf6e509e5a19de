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

:class:`KeyMemory` is what a worker remembers per key: those records, and, in this process
only, the failure of the key's last pass, since when its passes have failed in a row, and how
many passes in a row wrote something.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import msgspec
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from api.objects import metadata_of
from events.envelope import ObjectKey
from events.subjects import memo_filter, memo_subject, replica_filter
from services.runtime.bus import BusConfig
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.expectations import Expectations, settle
from services.runtime.streams import read_to_end

__all__ = ["KeyMemory", "MemoStore"]

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


@dataclass
class _Passes:
    last_error: str | None = None
    failing_since: datetime | None = None
    """The time of the first of the passes that have failed in a row (None: the last one
    did not fail)."""
    write_passes: int = 0


class KeyMemory:
    """What a worker remembers per key (see the module doc)."""

    def __init__(self, store: MemoStore, *, ack_timeout: float) -> None:
        self.store = store
        self._ack_timeout = ack_timeout
        self._records: dict[ObjectKey, KeyRecord] = {}
        self._passes: dict[ObjectKey, _Passes] = {}

    async def load(self) -> None:
        """Read back every key's record from the bus (on start, before any pass)."""
        self._records = await self.store.load()

    def remembered(self) -> Iterable[ObjectKey]:
        """The keys with a record: each gets a pass after a load, its object gone or not."""
        return list(self._records)

    def memo(self, key: ObjectKey) -> Any:
        """The key's memo as it was kept (JSON builtins); None: none."""
        record = self._records.get(key)
        return record.memo if record is not None else None

    def expectations(
        self, key: ObjectKey, cache: ObjectCache, now: datetime, ttl: timedelta
    ) -> Expectations | None:
        """The key's expectations, settled against what the bus has shown."""
        record = self._records.get(key)
        expectations = settle(record.expectations if record else None, cache.observed, now, ttl)
        owner_uid = metadata_of(cache.get(key) or {}).get("uid")
        if expectations is not None and expectations.owner_uid != owner_uid:
            # Another incarnation's (the owner was deleted, or recreated under its name):
            # not this one's to wait for, and forgotten with the next pass's memory.
            return None
        return expectations

    def last_error(self, key: ObjectKey) -> str | None:
        """The failure of the key's previous pass."""
        passes = self._passes.get(key)
        return passes.last_error if passes else None

    def failure_persists(self, key: ObjectKey, now: datetime, after: timedelta) -> bool:
        """Whether the key's passes have failed in a row for at least ``after`` by ``now``."""
        passes = self._passes.get(key)
        since = passes.failing_since if passes else None
        return since is not None and now - since >= after

    def passed(
        self, key: ObjectKey, *, wrote: bool, error: str | None, now: datetime | None = None
    ) -> int:
        """Note a pass of ``key`` that started at ``now``; returns how many passes in a row
        have written. A failed pass starts a run of failures at ``now``, unless one is running;
        a pass without an error ends it."""
        passes = self._passes.setdefault(key, _Passes())
        passes.write_passes = passes.write_passes + 1 if wrote else 0
        passes.last_error = error
        if error is None:
            passes.failing_since = None
        elif passes.failing_since is None:
            passes.failing_since = now
        if passes == _Passes():
            del self._passes[key]
        return passes.write_passes

    async def remember(self, key: ObjectKey, memo: Any, expectations: Expectations | None) -> None:
        """Keep the key's memo (JSON builtins) and expectations, on the bus when they changed;
        raises when the bus did not take them, so that the writes they cover are not made."""
        record = KeyRecord(
            kind=key.kind,
            namespace=key.namespace,
            name=key.name,
            memo=memo,
            expectations=expectations,
        )
        current = self._records.get(key)
        if current == record or (current is None and record.empty):
            return
        await self.store.put(record, ack_timeout=self._ack_timeout)
        if record.empty:
            self._records.pop(key, None)
        else:
            self._records[key] = record
