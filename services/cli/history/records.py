"""One message of the event log, read: a decoded event with its place in the log, or the reason
it could not be read (pure).

A history command must never crash on what it finds on the log, because the log is exactly
where a debugging session goes when something already went wrong. So reading a message never
raises: it gives a :class:`LogRecord` or an :class:`UnreadableRecord`, and every command prints
the latter as a warning line and goes on.

A record keeps two times, and they mean different things:

``event.time`` (the CloudEvents ``time`` attribute)
    When the watcher observed the change, or the worker decided. This is the time every
    history command selects by and prints: ``--since``, ``--until`` and ``--at`` compare with
    it. It is the time of the change itself, it survives re-publishing and mirroring (a
    restored or mirrored stream gets new stored times), and it is what the user sees.
``stored``
    When JetStream stored the message. It is never earlier than the observation (a producer
    publishes after it observes), which makes it a safe *lower bound* for seeking: the
    reader asks the server to start at ``since`` minus a clock-skew allowance and then filters
    on ``event.time`` (see :mod:`services.cli.history.reading`). It is not an upper bound: an
    event observed before ``--until`` may be stored long after (a watcher that waited out a
    NATS outage), so bounded reads go to the end of the log.

A message whose payload decodes but that sits on the wrong subject is also unreadable: the
subject is how every filter finds an event, so an event on a subject it does not belong to
would be missed or mis-attributed by every subscriber.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from events.codec import EventDecodeError, decode_event, nats_subject
from events.types import Event

__all__ = ["LogRecord", "UnreadableRecord", "in_window", "read_record"]


@dataclass(frozen=True, kw_only=True)
class LogRecord:
    """A decoded event and where it sits in the log."""

    seq: int
    subject: str
    stored: datetime
    event: Event
    payload: bytes


@dataclass(frozen=True, kw_only=True)
class UnreadableRecord:
    """A message of the log that is not a valid event, and why."""

    seq: int
    subject: str
    stored: datetime
    reason: str
    payload: bytes


def read_record(
    seq: int, subject: str, stored: datetime, payload: bytes
) -> LogRecord | UnreadableRecord:
    """Decode one message of the log; never raises."""
    try:
        event = decode_event(payload)
    except EventDecodeError as error:
        return UnreadableRecord(
            seq=seq, subject=subject, stored=stored, reason=str(error), payload=payload
        )
    expected = nats_subject(event)
    if expected != subject:
        return UnreadableRecord(
            seq=seq,
            subject=subject,
            stored=stored,
            reason=f"a {event.type} event about {event.subject} belongs on {expected}",
            payload=payload,
        )
    return LogRecord(seq=seq, subject=subject, stored=stored, event=event, payload=payload)


def in_window(instant: datetime, since: datetime | None, until: datetime | None) -> bool:
    """Whether ``instant`` is inside ``[since, until]`` (either end may be open)."""
    return (since is None or instant >= since) and (until is None or instant <= until)
