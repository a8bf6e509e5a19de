"""The event log loaded into SQLite for ad-hoc SQL (``sandbus events replay --into FILE.db``).

Tables (created if missing; the file can be loaded again and again):

``events``
    One row per observed change: ``seq`` (the stream sequence, the log's order), ``id``, the
    observation ``time`` and the ``stored_time``, ``type`` and ``change`` (added, modified,
    deleted), ``kind``/``namespace``/``name``, ``uid``, ``resource_version``, ``synthetic``, and
    ``data`` (the event's data as JSON, for ``json_extract``).
``decisions``
    One row per recorded decision: who, about which object, ``outcome``, ``reason``, ``error``,
    ``requeue_after_seconds``, ``inputs_digest``, ``triggers`` and ``actions`` (JSON) and
    ``data``.
``decision_actions``
    One row per action of a decision, with its target split into columns, so "every decision
    that touched this sandbox" is an indexed join rather than a scan of JSON.
``unreadable``
    The messages that were not valid events, with the reason and the raw payload.

Times are stored as RFC 3339 UTC text of fixed width (microseconds, ``Z``), so they compare
and sort correctly as text and read as they print.

Loading twice must not duplicate anything, and every insert is ``INSERT OR IGNORE`` against a
key that identifies the row. For a change that key is its event id, which is exactly the
contract's identity of a change (``<uid>:<resourceVersion>:<change>``). A decision's id is
derived from its inputs, and the same inputs may legitimately be decided again once the
duplicate window has passed (a requeue that found nothing new), so a decision is identified by
its id *and* its time. A message that could not be read has no id; its stream sequence and
stored time identify it.

The rows are built by pure functions (``*_row``); only :func:`load_into` does I/O.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import aiosqlite
import msgspec

from events.types import DecisionMade, ObjectAdded, ObjectDeleted, ObjectModified, WarmQueued
from services.cli.history.records import LogRecord, UnreadableRecord

__all__ = [
    "EXAMPLE_QUERIES",
    "SCHEMA",
    "LoadReport",
    "action_rows",
    "decision_row",
    "event_row",
    "load_into",
    "sql_time",
    "unreadable_row",
]

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER NOT NULL,
    id TEXT PRIMARY KEY,
    time TEXT NOT NULL,
    stored_time TEXT NOT NULL,
    type TEXT NOT NULL,
    change TEXT NOT NULL,
    kind TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    uid TEXT NOT NULL,
    resource_version TEXT NOT NULL,
    synthetic INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_seq ON events (seq);
CREATE INDEX IF NOT EXISTS events_by_object ON events (kind, namespace, name, seq);
CREATE INDEX IF NOT EXISTS events_by_time ON events (time);
CREATE INDEX IF NOT EXISTS events_by_uid ON events (uid);

CREATE TABLE IF NOT EXISTS decisions (
    seq INTEGER NOT NULL,
    id TEXT NOT NULL,
    time TEXT NOT NULL,
    stored_time TEXT NOT NULL,
    worker TEXT NOT NULL,
    kind TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL,
    error TEXT,
    requeue_after_seconds REAL,
    inputs_digest TEXT NOT NULL,
    triggers TEXT NOT NULL,
    actions TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (id, time)
);
CREATE INDEX IF NOT EXISTS decisions_by_seq ON decisions (seq);
CREATE INDEX IF NOT EXISTS decisions_by_object ON decisions (kind, namespace, name, seq);
CREATE INDEX IF NOT EXISTS decisions_by_worker ON decisions (worker, time);
CREATE INDEX IF NOT EXISTS decisions_by_time ON decisions (time);

CREATE TABLE IF NOT EXISTS decision_actions (
    decision_id TEXT NOT NULL,
    decision_time TEXT NOT NULL,
    position INTEGER NOT NULL,
    verb TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_namespace TEXT NOT NULL,
    target_name TEXT NOT NULL,
    detail TEXT NOT NULL,
    error TEXT,
    PRIMARY KEY (decision_id, decision_time, position)
);
CREATE INDEX IF NOT EXISTS decision_actions_by_target
    ON decision_actions (target_kind, target_namespace, target_name);

CREATE TABLE IF NOT EXISTS unreadable (
    seq INTEGER NOT NULL,
    stored_time TEXT NOT NULL,
    subject TEXT NOT NULL,
    reason TEXT NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (seq, stored_time)
);
"""

_INSERT_EVENT: Final = "INSERT OR IGNORE INTO events VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
_INSERT_DECISION: Final = "INSERT OR IGNORE INTO decisions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
_INSERT_ACTION: Final = "INSERT OR IGNORE INTO decision_actions VALUES (?,?,?,?,?,?,?,?,?)"
_INSERT_UNREADABLE: Final = "INSERT OR IGNORE INTO unreadable VALUES (?,?,?,?,?)"
_BATCH: Final = 500

EXAMPLE_QUERIES: Final = (
    "SELECT time, change, kind, namespace, name, resource_version FROM events "
    "ORDER BY seq LIMIT 20;",
    "SELECT kind, change, count(*) FROM events GROUP BY kind, change;",
    "SELECT name, json_extract(data, '$.object.status.phase') AS phase FROM events "
    "WHERE kind = 'Pod' ORDER BY seq;",
    "SELECT time, worker, outcome, reason FROM decisions "
    "WHERE kind = 'SandboxClaim' AND name = 'c1' ORDER BY seq;",
    "SELECT d.time, d.worker, a.verb, a.detail FROM decision_actions a "
    "JOIN decisions d ON d.id = a.decision_id AND d.time = a.decision_time "
    "WHERE a.target_kind = 'Sandbox' ORDER BY d.seq;",
)

_encoder: Final = msgspec.json.Encoder()
_CHANGES: Final = {ObjectAdded: "added", ObjectModified: "modified", ObjectDeleted: "deleted"}


def sql_time(instant: datetime) -> str:
    """RFC 3339 UTC of fixed width, so text order is time order."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json(value: Any) -> str:
    return _encoder.encode(value).decode()


def event_row(record: LogRecord) -> tuple[Any, ...]:
    """The ``events`` row of an observed change (or a stray warm-queue entry)."""
    event = record.event
    if isinstance(event, ObjectAdded | ObjectModified | ObjectDeleted):
        metadata = event.data.object["metadata"]
        uid, resource_version = metadata["uid"], metadata["resourceVersion"]
        change, synthetic = _CHANGES[type(event)], event.data.synthetic
    elif isinstance(event, WarmQueued):
        uid, resource_version = event.data.uid, event.data.resource_version
        change, synthetic = "queued", False
    else:
        raise TypeError(f"{event.type} is not a change; use decision_row")
    return (
        record.seq,
        event.id,
        sql_time(event.time),
        sql_time(record.stored),
        event.type,
        change,
        event.kind,
        event.namespace or "",
        event.name,
        uid,
        resource_version,
        int(synthetic),
        _json(event.data),
    )


def decision_row(record: LogRecord) -> tuple[Any, ...]:
    event = record.event
    if not isinstance(event, DecisionMade):
        raise TypeError(f"{event.type} is not a decision; use event_row")
    decision = event.data
    return (
        record.seq,
        event.id,
        sql_time(event.time),
        sql_time(record.stored),
        decision.worker,
        event.kind,
        event.namespace or "",
        event.name,
        decision.outcome,
        decision.reason,
        decision.error,
        decision.requeue_after_seconds,
        decision.inputs_digest,
        _json(decision.triggers),
        _json(decision.actions),
        _json(decision),
    )


def action_rows(record: LogRecord) -> list[tuple[Any, ...]]:
    event = record.event
    if not isinstance(event, DecisionMade):
        return []
    time = sql_time(event.time)
    return [
        (
            event.id,
            time,
            position,
            action.verb,
            action.target.kind,
            action.target.namespace or "",
            action.target.name,
            action.detail,
            action.error,
        )
        for position, action in enumerate(event.data.actions)
    ]


def unreadable_row(record: UnreadableRecord) -> tuple[Any, ...]:
    return (record.seq, sql_time(record.stored), record.subject, record.reason, record.payload)


@dataclass(kw_only=True)
class LoadReport:
    """What a load did: rows new to the file, and rows the file already had."""

    events_added: int = 0
    events_present: int = 0
    decisions_added: int = 0
    decisions_present: int = 0
    unreadable: int = 0


async def _insert(db: aiosqlite.Connection, statement: str, rows: Sequence[tuple[Any, ...]]) -> int:
    if not rows:
        return 0
    cursor = await db.executemany(statement, rows)
    return max(cursor.rowcount, 0)


async def load_into(
    path: Path,
    records: AsyncIterable[LogRecord | UnreadableRecord],
    *,
    on_unreadable: Callable[[UnreadableRecord], None] | None = None,
) -> LoadReport:
    """Load ``records`` into the SQLite file at ``path``; ``on_unreadable(record)`` is called
    for each message that is not a valid event (they are stored too)."""
    report = LoadReport()
    async with aiosqlite.connect(path) as db:
        await db.executescript(SCHEMA)
        events: list[tuple[Any, ...]] = []
        decisions: list[tuple[Any, ...]] = []
        actions: list[tuple[Any, ...]] = []
        unreadable: list[tuple[Any, ...]] = []

        async def flush() -> None:
            added = await _insert(db, _INSERT_EVENT, events)
            report.events_added += added
            report.events_present += len(events) - added
            added = await _insert(db, _INSERT_DECISION, decisions)
            report.decisions_added += added
            report.decisions_present += len(decisions) - added
            await _insert(db, _INSERT_ACTION, actions)
            await _insert(db, _INSERT_UNREADABLE, unreadable)
            await db.commit()
            for batch in (events, decisions, actions, unreadable):
                batch.clear()

        async for record in records:
            if isinstance(record, UnreadableRecord):
                report.unreadable += 1
                unreadable.append(unreadable_row(record))
                if on_unreadable is not None:
                    on_unreadable(record)
            elif isinstance(record.event, DecisionMade):
                decisions.append(decision_row(record))
                actions.extend(action_rows(record))
            else:
                events.append(event_row(record))
            if len(events) + len(decisions) + len(unreadable) >= _BATCH:
                await flush()
        await flush()
    return report
