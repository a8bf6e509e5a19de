"""Writing to the event log with a fence, and reading one message back.

What the publisher and the recovery need, kept thin (reading a whole stream is
:func:`services.runtime.streams.read_to_end`):

- :func:`last_message`: the last message on one subject, by direct get (the event log and the
  state table have ``allow_direct``), or None.
- :func:`fenced_publish`: a publish with ``Nats-Expected-Last-Subject-Sequence``. The fence is
  what keeps one object's events in order when two leaders overlap for a moment, and what makes
  a retry after a lost acknowledgement land exactly once even outside the duplicate window: the
  server refuses a write whose writer has not seen the subject's latest message (error 10071),
  and then the latest message says whether it is already ours (done), or another writer's
  state at least as new as ours, which ``keep_stored`` recognises (done as well: ours is not
  written), or else it is written after it. Transient failures (NATS restarting, timeouts) are
  retried with backoff for as long as ``may_write`` says so: a change is never dropped while
  this replica leads.

Each of them, and every retry through :class:`Backoff`, raises a cancellation that nats-py
lost on the way (:func:`services.runtime.cancellation.honour_lost_cancellation`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError

from services.runtime.acked import AckedPublisher
from services.runtime.cancellation import honour_lost_cancellation

__all__ = [
    "ERR_WRONG_LAST_SEQUENCE",
    "EXPECTED_LAST_SUBJECT_SEQUENCE",
    "Backoff",
    "LeadershipLost",
    "PublishStats",
    "fenced_publish",
    "last_message",
]

log = logging.getLogger(__name__)

EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
ERR_WRONG_LAST_SEQUENCE = 10071
_ERR_STREAM_NOT_FOUND = 10059

TRANSIENT = (NatsError, TimeoutError, asyncio.TimeoutError, ConnectionError, OSError)
"""What a publish or a request raises while NATS is unreachable or restarting."""


class LeadershipLost(Exception):
    """This replica does not lead any more; whatever it was writing is abandoned."""


@dataclass
class Backoff:
    """Exponential backoff with full jitter, for retries that never give up."""

    initial: float = 0.05
    maximum: float = 2.0
    _current: float = 0.0

    def reset(self) -> None:
        self._current = 0.0

    async def wait(self) -> None:
        # Every retry loop passes here: the place to stop one whose cancellation a failed
        # call swallowed (the sleep alone would not raise it).
        honour_lost_cancellation()
        self._current = min(self.maximum, max(self.initial, self._current * 2))
        await asyncio.sleep(random.uniform(self._current / 2, self._current))


@dataclass
class PublishStats:
    """Counters a test or an operator reads to see what the publishing went through."""

    published: int = 0
    duplicates: int = 0
    """Publishes JetStream reported as duplicates (deduplicated by id)."""
    fenced: int = 0
    """Writes refused by the subject-sequence fence and resolved by reading the subject."""
    retries: int = 0
    """Writes retried after a transient failure (NATS unreachable, a timeout)."""
    superseded: int = 0
    """Writes not made because the fence found another writer's state of the same object that
    is at least as new (two leaders overlapping)."""
    dead_lettered: int = 0


async def last_message(js: JetStreamContext, stream: str, subject: str) -> RawStreamMsg | None:
    try:
        last = await js.get_last_msg(stream, subject, direct=True)
    except NotFoundError:
        last = None
    honour_lost_cancellation()
    return last


async def fenced_publish(
    js: JetStreamContext,
    acked: AckedPublisher,
    *,
    stream: str,
    subject: str,
    payload: bytes,
    headers: dict[str, str],
    expected: int | None,
    event_id: str,
    stored_id: Callable[[RawStreamMsg], str | None],
    may_write: Callable[[], bool],
    repair_bus: Callable[[], Awaitable[None]],
    stats: PublishStats,
    ack_timeout: float = 5.0,
    keep_stored: Callable[[RawStreamMsg], bool] | None = None,
) -> int:
    """Write ``payload`` as the next message of ``subject`` through ``acked`` (the watcher's
    publishes, :mod:`services.runtime.acked`); returns its stream sequence (or, when the stored
    message is kept, the stored one's).

    ``expected`` is the subject's last sequence as this writer knows it (None: no message).
    ``stored_id`` reads the event id of a stored message, to recognise our own write.
    ``keep_stored`` says whether another writer's stored message is to stay the subject's last
    instead of ours (it holds a state of the object at least as new); otherwise, ours is
    written after it.
    Raises :class:`LeadershipLost` as soon as ``may_write`` turns False.
    """
    backoff = Backoff()
    while True:
        if not may_write():
            raise LeadershipLost(f"stopped writing {event_id} to {subject}")
        fenced = dict(headers)
        fenced[EXPECTED_LAST_SUBJECT_SEQUENCE] = str(expected or 0)
        try:
            ack = await acked.publish(
                subject,
                payload,
                timeout=ack_timeout,
                stream=stream,
                headers=fenced,
            )
            honour_lost_cancellation()
        except APIError as error:
            if error.err_code == ERR_WRONG_LAST_SEQUENCE:
                stats.fenced += 1
                try:
                    last = await last_message(js, stream, subject)
                except TRANSIENT as transient:
                    log.warning("reading the last message of %s: %r", subject, transient)
                    stats.retries += 1
                    await backoff.wait()
                    continue
                ours = last is not None and last.seq is not None and stored_id(last) == event_id
                log.debug(
                    "%s: expected last sequence %s, found %s (%s)",
                    subject,
                    expected,
                    last.seq if last is not None else None,
                    "our write" if ours else "another write",
                )
                if ours:
                    assert last is not None and last.seq is not None
                    return last.seq
                if (
                    keep_stored is not None
                    and last is not None
                    and last.seq is not None
                    and keep_stored(last)
                ):
                    log.info(
                        "%s: not writing %s over another writer's newer state (sequence %s)",
                        subject,
                        event_id,
                        last.seq,
                    )
                    stats.superseded += 1
                    return last.seq
                expected = last.seq if last is not None else None
                continue
            if error.err_code == _ERR_STREAM_NOT_FOUND:
                await _repair(repair_bus, stream)
            log.warning("publishing %s to %s failed: %s", event_id, subject, error)
            stats.retries += 1
            await backoff.wait()
            continue
        except NoStreamResponseError:
            await _repair(repair_bus, stream)
            stats.retries += 1
            await backoff.wait()
            continue
        except TRANSIENT as error:
            log.info("publishing %s to %s: %r; retrying", event_id, subject, error)
            stats.retries += 1
            await backoff.wait()
            continue
        if ack.duplicate:
            stats.duplicates += 1
        return ack.seq


async def _repair(repair_bus: Callable[[], Awaitable[None]], stream: str) -> None:
    log.warning("stream %s is missing; provisioning the bus again", stream)
    with contextlib.suppress(*TRANSIENT, APIError):
        await repair_bus()
