"""Reading the event log from JetStream: a bounded read to the end, and a live follow.

Both are read-only and leave nothing behind on the server: each read creates its own
ephemeral consumer with ``AckPolicy.NONE`` (a reader acknowledges nothing, so it can never
take a message away from anyone) and server-side subject filters. A bounded read deletes its
consumer at the end; a follower unsubscribes; either way an inactivity threshold lets the
server remove a consumer whose process died.

:func:`read_log` serves replay, state-at and explain, which must *end*. It is the bus's one
bounded read (:func:`services.runtime.streams.read_to_end`): it notes the stream's last
sequence when it starts and stops after delivering that message or as soon as the server
reports nothing pending for the filter, so a busy log cannot keep it reading forever and an
empty selection returns at once.

:func:`following` serves tail. It is an ordered push consumer (flow control, heartbeats and
a gap-free recreation after missed heartbeats are handled by nats-py), delivering new
messages or starting at a position. When NATS restarts, the consumer (held in memory) is gone;
the client reconnects, notices the missing heartbeats and recreates the consumer from the
sequence after the last one it delivered, so the tail goes on without a gap.

Positions (:class:`LogStart`): from the first message, from a stream sequence, from an
observation time, or (follow only) from now. A time is a time of *observation* (the
``time`` attribute, see :mod:`services.cli.history.records`); the server can only seek by stored
time, which is never earlier than the observation, so the reader seeks to ``since`` minus
:data:`CLOCK_SKEW_ALLOWANCE` (the producer's and the server's clocks may disagree) and the
caller filters on the observation time. An event observed at or after ``since`` is thus
never missed, and the only cost is reading a few minutes too many.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from services.cli.history.records import LogRecord, UnreadableRecord, read_record
from services.runtime.streams import filter_fields, read_to_end

__all__ = [
    "CLOCK_SKEW_ALLOWANCE",
    "EventLogMissing",
    "LogStart",
    "following",
    "read_log",
]

CLOCK_SKEW_ALLOWANCE: Final = timedelta(minutes=5)
_INACTIVE_THRESHOLD: Final = 60.0
_FOLLOW_HEARTBEAT: Final = 1.0
"""Seconds between the server's heartbeats to a follower; two missed ones make nats-py
recreate the consumer from the next sequence, which is how a tail survives a NATS restart."""


class EventLogMissing(RuntimeError):
    """The event-log stream does not exist: the bus was never provisioned on this server."""

    def __init__(self, stream: str) -> None:
        super().__init__(
            f"the event log stream {stream} does not exist on this NATS server; "
            "is the watcher running (sandbus up) and is --nats the right server?"
        )


@dataclass(frozen=True, kw_only=True)
class LogStart:
    """Where a read starts; at most one of the fields is set (none: the first message)."""

    sequence: int | None = None
    observed_since: datetime | None = None
    new_only: bool = False

    @property
    def seek_time(self) -> datetime | None:
        """The stored time to seek to for ``observed_since`` (see the module docstring)."""
        if self.observed_since is None:
            return None
        return self.observed_since - CLOCK_SKEW_ALLOWANCE

    def consumer_fields(self) -> dict[str, object]:
        if self.sequence is not None:
            return {
                "deliver_policy": DeliverPolicy.BY_START_SEQUENCE,
                "opt_start_seq": self.sequence,
            }
        if self.seek_time is not None:
            return {"deliver_policy": DeliverPolicy.BY_START_TIME, "opt_start_time": self.seek_time}
        if self.new_only:
            return {"deliver_policy": DeliverPolicy.NEW}
        return {"deliver_policy": DeliverPolicy.ALL}


def _record(msg: Msg) -> LogRecord | UnreadableRecord:
    metadata = msg.metadata
    return read_record(metadata.sequence.stream, msg.subject, metadata.timestamp, msg.data)


async def _last_sequence(js: JetStreamContext, stream: str) -> int:
    try:
        info = await js.stream_info(stream)
    except NotFoundError:
        raise EventLogMissing(stream) from None
    return int(info.state.last_seq)


async def read_log(
    js: JetStreamContext,
    subjects: list[str],
    *,
    stream: str,
    start: LogStart | None = None,
) -> AsyncIterator[LogRecord | UnreadableRecord]:
    """Every message matching ``subjects`` from ``start`` to the current end, in stream order."""
    start = start or LogStart()
    if start.new_only:
        raise ValueError("a bounded read cannot start at new messages")
    last = await _last_sequence(js, stream)
    if last == 0:
        return
    async for msg in read_to_end(
        js,
        stream,
        subjects,
        start_seq=start.sequence,
        start_time=start.seek_time if start.sequence is None else None,
        until_seq=last,
        name_prefix="sandbus-history",
    ):
        yield _record(msg)


@contextlib.asynccontextmanager
async def following(
    js: JetStreamContext,
    subjects: list[str],
    *,
    stream: str,
    start: LogStart | None = None,
) -> AsyncIterator[AsyncIterator[LogRecord | UnreadableRecord]]:
    """Follow ``subjects`` live: on entering, the consumer exists (messages published from
    then on will be delivered); the value is the endless iterator of records, after those
    from ``start`` (by default: only new messages)."""
    start = start or LogStart(new_only=True)
    await _last_sequence(js, stream)  # a clear error when the stream is missing
    config = ConsumerConfig(**filter_fields(subjects), **start.consumer_fields())  # type: ignore[arg-type]
    subscription = await js.subscribe(
        subjects[0],
        stream=stream,
        config=config,
        ordered_consumer=True,
        idle_heartbeat=_FOLLOW_HEARTBEAT,
        inactive_threshold=_INACTIVE_THRESHOLD,
    )

    async def records() -> AsyncIterator[LogRecord | UnreadableRecord]:
        async for msg in subscription.messages:
            yield _record(msg)

    try:
        yield records()
    finally:
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()
