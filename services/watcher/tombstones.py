"""Removing deletions from the state table once they have served: the watcher's tombstones.

A deleted object's last event stays in the state table as a tombstone, so that a watcher which
relists knows the object was deleted rather than never seen, and then goes, so that the table
does not keep one message per name ever used. The server derives the table from the event log
(:mod:`services.runtime.bus`), and a copied message cannot be given a TTL of its own, so the
leading watcher removes each tombstone ``state_tombstone_ttl`` seconds after the deletion: it
schedules every deletion it publishes, and every tombstone its recovery finds, and when one is
due deletes that message by its sequence, if it is still the object's last (an object created
again under the same name replaced it otherwise). A deletion the server has not copied yet is
looked at again a little later. A leader that stops forgets its schedule; the next one finds
the tombstones in its recovery.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable
from typing import Final, NamedTuple

from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from services.runtime.bus import source_sequence
from services.runtime.cancellation import honour_lost_cancellation
from services.watcher.core.recovery import StoredEventError, stored_event
from services.watcher.streams import TRANSIENT, last_message

__all__ = ["Tombstones"]

log = logging.getLogger(__name__)

_LOOK_AGAIN: Final = 1.0
"""Seconds before a tombstone not copied yet, or not removable now, is looked at again."""


class _Due(NamedTuple):
    at: float
    subject: str
    event_id: str
    log_seq: int | None


class Tombstones:
    """The leader's schedule of tombstones to remove from the state table ``stream``."""

    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        ttl: float,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._js = js
        self._stream = stream
        self._ttl = ttl
        self._clock = clock
        self._due: list[_Due] = []
        self._changed = asyncio.Event()
        self.removed = 0

    def __len__(self) -> int:
        return len(self._due)

    def schedule(
        self, subject: str, event_id: str, log_seq: int | None, deleted_at: float | None = None
    ) -> None:
        """Remove the tombstone of ``event_id`` (the deletion at ``log_seq`` in the event log)
        from ``subject`` once ``ttl`` has passed since ``deleted_at`` (default: now)."""
        at = (self._clock() if deleted_at is None else deleted_at) + self._ttl
        heapq.heappush(self._due, _Due(at, subject, event_id, log_seq))
        self._changed.set()

    async def run(self) -> None:
        """Remove tombstones as they fall due, until cancelled."""
        while True:
            self._changed.clear()
            wait = self._due[0].at - self._clock() if self._due else None
            if wait is None or wait > 0:
                try:
                    async with asyncio.timeout(wait):
                        await self._changed.wait()
                except TimeoutError:
                    pass
                continue
            due = heapq.heappop(self._due)
            if not await self._remove(due):
                heapq.heappush(self._due, due._replace(at=self._clock() + _LOOK_AGAIN))

    async def _remove(self, due: _Due) -> bool:
        """Whether ``due`` is settled: removed, or replaced by a later state."""
        try:
            last = await last_message(self._js, self._stream, due.subject)
            if last is None or last.seq is None or not last.data:
                return True
            try:
                stored = stored_event(last.data, source_sequence(last.headers))
            except StoredEventError:
                return True
            if stored.event_id != due.event_id:
                copied = stored.seq
                # Not copied yet: the table still holds an earlier state of the object.
                return not (copied is not None and due.log_seq and copied < due.log_seq)
            await self._js.delete_msg(self._stream, last.seq)
            honour_lost_cancellation()
        except NotFoundError:
            return True
        except TRANSIENT as error:
            log.info("removing the tombstone on %s: %r; trying again", due.subject, error)
            return False
        except APIError as error:
            log.warning("removing the tombstone on %s: %s; trying again", due.subject, error)
            return False
        self.removed += 1
        return True
