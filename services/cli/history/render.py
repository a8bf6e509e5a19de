"""How history is printed: one line per event, the state table, object lists, timelines (pure).

Every time is printed in UTC, RFC 3339 with milliseconds, the way the log stores it, so that a
time copied from the output can be pasted into ``--since``/``--until``/``--at`` unchanged.
Lines are made for people and for ``grep``: the fields that identify an event (time, what,
which object, resourceVersion) come first in fixed order, the free-form summary last.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

import yaml

from events.envelope import ObjectKey
from events.types import DecisionMade, ObjectAdded, ObjectDeleted, ObjectModified, WarmQueued
from services.cli.history.core.folding import ObjectVersion
from services.cli.history.core.instants import format_age, format_instant
from services.cli.history.core.timeline import TimelineEntry, describe_decision
from services.cli.history.records import LogRecord, UnreadableRecord
from services.cli.history.summaries import object_summary

__all__ = [
    "OutputFormat",
    "event_line",
    "object_list",
    "state_table",
    "timeline_lines",
    "warning_line",
]

OutputFormat = Literal["table", "json", "yaml"]

_VERBS = {ObjectAdded: "added", ObjectModified: "modified", ObjectDeleted: "deleted"}


def warning_line(record: UnreadableRecord) -> str:
    """The line a command prints for a message it could not read, instead of crashing."""
    return f"warning: seq {record.seq} on {record.subject} is not a valid event: {record.reason}"


def event_line(record: LogRecord) -> str:
    """``<time>  <what>  <Kind/namespace/name>  rv <rv>  <summary>``."""
    event = record.event
    when = format_instant(event.time)
    if isinstance(event, ObjectAdded | ObjectModified | ObjectDeleted):
        body = event.data.object
        rv = (body.get("metadata") or {}).get("resourceVersion", "?")
        fields = [when, f"{_VERBS[type(event)]:<8}", event.subject, f"rv {rv}"]
        summary = object_summary(body)
        if summary:
            fields.append(summary)
        if event.data.synthetic:
            fields.append("(synthetic)")
        return "  ".join(fields)
    if isinstance(event, DecisionMade):
        decision = event.data
        return "  ".join(
            [when, "decision", event.subject, f"{decision.worker}: {describe_decision(decision)}"]
        )
    assert isinstance(event, WarmQueued)
    entry = event.data
    return "  ".join(
        [
            when,
            "queued  ",
            event.subject,
            f"rv {entry.resource_version}",
            f"template {entry.template_hash}",
        ]
    )


def _created(version: ObjectVersion) -> datetime:
    stamp = (version.object.get("metadata") or {}).get("creationTimestamp")
    if isinstance(stamp, str):
        try:
            return datetime.fromisoformat(stamp)
        except ValueError:
            pass
    return version.first_observed


def _sorted(objects: dict[ObjectKey, ObjectVersion]) -> list[ObjectVersion]:
    return [objects[key] for key in sorted(objects)]


def state_table(objects: dict[ObjectKey, ObjectVersion], at: datetime) -> str:
    """The objects at ``at`` as an aligned table (KIND NAMESPACE NAME RV AGE STATUS)."""
    if not objects:
        return f"no objects at {format_instant(at)}"
    rows = [("KIND", "NAMESPACE", "NAME", "RV", "AGE", "STATUS")]
    for version in _sorted(objects):
        key = version.key
        rows.append(
            (
                key.kind,
                key.namespace or "-",
                key.name,
                version.resource_version,
                format_age(at - _created(version)),
                object_summary(version.object),
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    return "\n".join(
        "   ".join(
            [*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]
        ).rstrip()
        for row in rows
    )


def object_list(objects: dict[ObjectKey, ObjectVersion], output: Literal["json", "yaml"]) -> str:
    """The full objects as a Kubernetes ``List``, which kubectl and jq read as they are."""
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [version.object for version in _sorted(objects)],
    }
    if output == "json":
        return json.dumps(document, indent=2, ensure_ascii=False)
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True).rstrip("\n")


def timeline_lines(target: ObjectKey, entries: Sequence[TimelineEntry]) -> list[str]:
    """A header naming the object, then ``<time>  <actor>  <what>`` per entry.

    Times are printed as the time of day when the entry falls on the same UTC day as the one
    before it, and in full when the day changes, so a timeline stays short yet unambiguous.
    """
    lines = [f"{target}: {len(entries)} entries (times in UTC)"]
    actor_width = max((len(entry.actor) for entry in entries), default=0)
    day = None
    for entry in entries:
        stamp = format_instant(entry.time)
        entry_day, time_of_day = stamp[:10], stamp[11:-1]
        if entry_day != day:
            lines.append(f"{entry_day}")
            day = entry_day
        lines.append(f"  {time_of_day}  {entry.actor.ljust(actor_width)}  {entry.text}")
    return lines
