"""The timeline of one object: its changes interleaved with the decisions that touched it (pure).

This is what ``sandbus explain KIND/NAMESPACE/NAME`` prints. A decision touched the object when
the object was its key (the worker reconciled it) or when one of its actions names the object
(the claim worker patched this sandbox while reconciling a claim); the second kind is why
explain reads every decision, not only those on the object's subjects.

Each change is described against the previous version of the same incarnation (same uid) with
:mod:`services.cli.history.core.diffing`; a new uid under the same name is a new incarnation and
starts over with "created". The diff needs the versions in the order the watcher saw them, which is
stream order, so the timeline is built in stream order and only then sorted by time, as a
reader expects; entries with the same time keep their stream order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from events.envelope import ObjectKey, ObjectRef
from events.types import (
    Decision,
    DecisionAction,
    DecisionMade,
    ObjectAdded,
    ObjectDeleted,
    ObjectModified,
)
from services.cli.history.core.diffing import describe_changes, version_changes
from services.cli.history.core.folding import object_key
from services.cli.history.core.instants import format_age
from services.cli.history.records import LogRecord
from services.cli.history.summaries import object_summary

__all__ = ["TimelineEntry", "build_timeline", "describe_action", "describe_decision"]


@dataclass(frozen=True, kw_only=True)
class TimelineEntry:
    """One line of a timeline: when, where in the log, who (``watcher`` or a worker), what."""

    time: datetime
    seq: int
    actor: str
    text: str


def _key_of(ref: ObjectRef) -> ObjectKey:
    return object_key(ref.kind, ref.namespace, ref.name)


def _metadata(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def describe_action(action: DecisionAction) -> str:
    """``patch Sandbox/default/p-7xk2f (adopted from queue default/python)``, with any error."""
    text = f"{action.verb} {action.target}"
    if action.detail:
        text += f" ({action.detail})"
    if action.error:
        text += f" failed: {action.error}"
    return text


def describe_decision(decision: Decision, actions: Sequence[DecisionAction] | None = None) -> str:
    """``applied: <reason>; <actions>; requeue in 5s`` — what one decision did and why."""
    parts = [f"{decision.outcome}: {decision.reason}" if decision.reason else decision.outcome]
    parts.extend(
        describe_action(action) for action in (decision.actions if actions is None else actions)
    )
    if decision.error:
        parts.append(f"error: {decision.error}")
    if decision.requeue_after_seconds is not None:
        after = decision.requeue_after_seconds
        # A far shutdownTime asks for a requeue years away: say "1309d", not "1.13e+08s".
        parts.append(
            f"requeue in {after:g}s"
            if after < 120
            else f"requeue in {format_age(timedelta(seconds=after))}"
        )
    return "; ".join(parts)


def _decision_entry(
    record: LogRecord, event: DecisionMade, target: ObjectKey
) -> TimelineEntry | None:
    decision = event.data
    worker = decision.worker
    if _key_of(decision.key) == target:
        text = f"decided {describe_decision(decision)}"
    else:
        touching = [action for action in decision.actions if _key_of(action.target) == target]
        if not touching:
            return None
        text = f"while reconciling {decision.key}: {describe_decision(decision, touching)}"
    return TimelineEntry(time=event.time, seq=record.seq, actor=worker, text=text)


def build_timeline(records: Iterable[LogRecord], target: ObjectKey) -> list[TimelineEntry]:
    """The timeline of ``target`` from ``records`` (in stream order), sorted by time."""
    entries: list[TimelineEntry] = []
    previous: dict[str, Any] | None = None
    for record in records:
        event = record.event
        if isinstance(event, DecisionMade):
            entry = _decision_entry(record, event, target)
            if entry is not None:
                entries.append(entry)
            continue
        if not isinstance(event, ObjectAdded | ObjectModified | ObjectDeleted):
            continue
        if object_key(event.kind, event.namespace or None, event.name) != target:
            continue
        body = event.data.object
        metadata = _metadata(body)
        rv = metadata.get("resourceVersion")
        same_incarnation = previous is not None and _metadata(previous).get("uid") == metadata.get(
            "uid"
        )
        summary = object_summary(body)
        if isinstance(event, ObjectDeleted):
            text = f"deleted rv {rv}"
            if event.data.synthetic:
                text += " (synthetic: it vanished while the watcher was not watching)"
            previous = None
        elif same_incarnation:
            assert previous is not None
            verb = "changed" if isinstance(event, ObjectModified) else "seen again"
            text = f"{verb} rv {rv}: {describe_changes(version_changes(previous, body))}"
            previous = body
        elif isinstance(event, ObjectAdded):
            text = f"created rv {rv}, uid {metadata.get('uid')}"
            text += f"; {summary}" if summary else ""
            previous = body
        else:
            # The log no longer holds this incarnation's earlier versions (retention).
            text = f"changed rv {rv} (earlier versions not on the log)"
            text += f"; {summary}" if summary else ""
            previous = body
        entries.append(TimelineEntry(time=event.time, seq=record.seq, actor="watcher", text=text))
    return sorted(entries, key=lambda entry: (entry.time, entry.seq))
