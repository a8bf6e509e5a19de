"""The four history commands as async functions: connect, read, hand to the pure core, print.

Each takes its options as a typed struct and the two streams to write to, and returns the exit
code, so tests run them in-process with captured output and the CLI (:mod:`.cli`) only parses
arguments and handles signals. Conventions shared by all four:

- Results go to ``out``; warnings (a message on the log that is not a valid event) and errors
  go to ``err``, so ``--json`` output stays machine-readable when the log holds garbage.
- Exit codes: 0 success, 1 the command could not do its job (NATS unreachable, no event log,
  nothing known about the object), 2 bad input (parsing in :mod:`.cli`).
- Nothing is written to the bus: every read is an ephemeral, ack-less consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final, TextIO

import nats
from nats.js import JetStreamContext

from api.objects import metadata_of
from events.envelope import ObjectKey, ObjectRef
from events.subjects import decision_filter, event_filter
from events.types import DecisionMade, ObjectAdded, ObjectModified
from services.cli.history.core.folding import object_key, state_at
from services.cli.history.core.timeline import build_timeline
from services.cli.history.database import EXAMPLE_QUERIES, load_into
from services.cli.history.reading import EventLogMissing, LogStart, following, read_log
from services.cli.history.records import LogRecord, UnreadableRecord, in_window
from services.cli.history.render import (
    OutputFormat,
    event_line,
    object_list,
    state_table,
    timeline_lines,
    warning_line,
)
from services.cli.history.rerun import Rerun, rerun, rerun_lines
from services.cli.history.selection import Selection
from services.runtime.connection import server_urls, tls_context
from services.runtime.worker_api import WorkerDefinition

__all__ = [
    "ExplainOptions",
    "NatsUnavailable",
    "ReplayOptions",
    "StateOptions",
    "TailOptions",
    "explain",
    "replay",
    "state",
    "tail",
]

CONNECT_TIMEOUT: Final = 10.0


class NatsUnavailable(RuntimeError):
    """No NATS server answered at the URL in time."""


@dataclass(frozen=True, kw_only=True)
class TailOptions:
    nats_url: str
    stream: str
    selection: Selection
    since: datetime | None = None
    json: bool = False


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    nats_url: str
    stream: str
    selection: Selection
    since: datetime | None = None
    since_seq: int | None = None
    until: datetime | None = None
    json: bool = False
    into: Path | None = None


@dataclass(frozen=True, kw_only=True)
class StateOptions:
    nats_url: str
    stream: str
    at: datetime
    kind: str | None = None
    namespace: str | None = None
    output: OutputFormat = "table"


@dataclass(frozen=True, kw_only=True)
class ExplainOptions:
    nats_url: str
    stream: str
    target: ObjectRef
    definitions: Callable[[str], WorkerDefinition]
    """The worker definition by worker name, for ``rerun`` (the command line passes the
    registered workers'; tests swap in a changed planner)."""
    rerun: bool = False
    """Re-run each recorded decision about the object through today's planner."""


@contextlib.asynccontextmanager
async def _connected(url: str, err: TextIO) -> AsyncIterator[JetStreamContext]:
    last_error: list[BaseException] = []
    connected = False

    async def remember(error: BaseException) -> None:
        # nats-py logs every failed attempt by default; one clear message is enough.
        last_error[:] = [error]

    async def disconnected() -> None:
        if connected:
            print(f"nats: disconnected from {url}; reconnecting", file=err, flush=True)

    async def reconnected() -> None:
        print(f"nats: reconnected to {url}", file=err, flush=True)

    try:
        client = await asyncio.wait_for(
            nats.connect(
                server_urls(url),
                tls=tls_context(),
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                error_cb=remember,
                disconnected_cb=disconnected,
                reconnected_cb=reconnected,
            ),
            CONNECT_TIMEOUT,
        )
    except (TimeoutError, OSError, nats.errors.Error) as error:
        last = last_error[0] if last_error else error
        raise NatsUnavailable(
            f"cannot connect to NATS at {url} within {CONNECT_TIMEOUT:g}s ({last})"
        ) from None
    connected = True
    try:
        yield client.jetstream()
    finally:
        connected = False
        with contextlib.suppress(Exception):
            await client.close()


def _print_json(payload: bytes, out: TextIO) -> None:
    text = payload.decode("utf-8", errors="replace")
    if "\n" in text:
        # One event per line whatever the producer's formatting, so `jq -c`/`grep` work.
        text = json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
    print(text, file=out)


def _fail(error: Exception, err: TextIO) -> int:
    print(f"error: {error}", file=err)
    return 1


async def tail(options: TailOptions, *, out: TextIO, err: TextIO) -> int:
    """Print events as they reach the log, until cancelled (Ctrl-C/SIGTERM in the CLI)."""
    subjects = options.selection.subjects()
    start = LogStart(observed_since=options.since) if options.since else LogStart(new_only=True)
    try:
        async with (
            _connected(options.nats_url, err) as js,
            following(js, subjects, stream=options.stream, start=start) as records,
        ):
            print(
                f"following {' '.join(subjects)} on {options.stream} (Ctrl-C to stop)",
                file=err,
                flush=True,
            )
            async for record in records:
                if isinstance(record, UnreadableRecord):
                    print(warning_line(record), file=err, flush=True)
                    continue
                if not in_window(record.event.time, options.since, None):
                    continue
                if options.json:
                    _print_json(record.payload, out)
                else:
                    print(event_line(record), file=out)
                out.flush()
    except (NatsUnavailable, EventLogMissing) as error:
        return _fail(error, err)
    return 0


async def _selected(
    records: AsyncIterator[LogRecord | UnreadableRecord],
    *,
    since: datetime | None,
    until: datetime | None,
    err: TextIO,
) -> AsyncIterator[LogRecord]:
    async for record in records:
        if isinstance(record, UnreadableRecord):
            print(warning_line(record), file=err)
        elif in_window(record.event.time, since, until):
            yield record


async def replay(options: ReplayOptions, *, out: TextIO, err: TextIO) -> int:
    """Print (or load into SQLite) the log from ``since`` to ``until`` or its current end."""
    if options.since_seq is not None:
        start = LogStart(sequence=options.since_seq)
    else:
        start = LogStart(observed_since=options.since)
    try:
        async with _connected(options.nats_url, err) as js:
            records = read_log(js, options.selection.subjects(), stream=options.stream, start=start)
            if options.into is not None:
                return await _load(options, records, out=out, err=err)
            count = 0
            async for record in _selected(
                records, since=options.since, until=options.until, err=err
            ):
                count += 1
                if options.json:
                    _print_json(record.payload, out)
                else:
                    print(event_line(record), file=out)
            if count == 0 and not options.json:
                print("no events in that range", file=err)
    except (NatsUnavailable, EventLogMissing) as error:
        return _fail(error, err)
    return 0


async def _load(
    options: ReplayOptions,
    records: AsyncIterator[LogRecord | UnreadableRecord],
    *,
    out: TextIO,
    err: TextIO,
) -> int:
    assert options.into is not None

    async def window() -> AsyncIterator[LogRecord | UnreadableRecord]:
        async for record in records:
            if isinstance(record, UnreadableRecord) or in_window(
                record.event.time, options.since, options.until
            ):
                yield record

    report = await load_into(
        options.into, window(), on_unreadable=lambda record: print(warning_line(record), file=err)
    )
    print(
        f"{options.into}: {report.events_added} new events ({report.events_present} already "
        f"there), {report.decisions_added} new decisions ({report.decisions_present} already "
        f"there), {report.unreadable} unreadable messages",
        file=out,
    )
    print("try:", file=out)
    for query in EXAMPLE_QUERIES:
        print(f'  sqlite3 {options.into} "{query}"', file=out)
    return 0


async def _warn_if_truncated(js: JetStreamContext, stream: str, err: TextIO) -> None:
    """Retention may have dropped the start of the log; a fold cannot see what was dropped."""
    info = await js.stream_info(stream)
    first = int(info.state.first_seq)
    if first > 1:
        print(
            f"warning: the log starts at sequence {first} (older messages expired); objects "
            "whose last change is older than that are missing",
            file=err,
        )


async def state(options: StateOptions, *, out: TextIO, err: TextIO) -> int:
    """Every object as it was at ``options.at``, folded from the log."""
    selection = Selection(kind=options.kind, namespace=options.namespace)
    try:
        async with _connected(options.nats_url, err) as js:
            records = [
                record
                async for record in _selected(
                    read_log(js, selection.subjects(), stream=options.stream),
                    since=None,
                    until=None,
                    err=err,
                )
            ]
            await _warn_if_truncated(js, options.stream, err)
    except (NatsUnavailable, EventLogMissing) as error:
        return _fail(error, err)
    objects = state_at(records, options.at)
    if options.output == "table":
        print(state_table(objects, options.at), file=out)
    else:
        print(object_list(objects, options.output), file=out)
    return 0


async def explain(options: ExplainOptions, *, out: TextIO, err: TextIO) -> int:
    """The timeline of one object with the decisions that touched it; with ``rerun``, each
    decision about it made again by today's planner."""
    target = options.target
    if options.rerun:
        return await _rerun(options, out=out, err=err)
    # Decisions that name the object only in their actions are on other subjects, so every
    # decision is read; changes are filtered to the object on the server.
    subjects = [event_filter(target.kind, target.namespace, target.name), decision_filter()]
    try:
        async with _connected(options.nats_url, err) as js:
            records = [
                record
                async for record in _selected(
                    read_log(js, subjects, stream=options.stream), since=None, until=None, err=err
                )
            ]
            await _warn_if_truncated(js, options.stream, err)
    except (NatsUnavailable, EventLogMissing) as error:
        return _fail(error, err)
    key = object_key(target.kind, target.namespace, target.name)
    entries = build_timeline(records, key)
    if not entries:
        print(f"error: the event log has nothing about {key}", file=err)
        return 1
    for line in timeline_lines(key, entries):
        print(line, file=out)
    return 0


async def _rerun(options: ExplainOptions, *, out: TextIO, err: TextIO) -> int:
    target = options.target
    try:
        async with _connected(options.nats_url, err) as js:
            decisions = [
                record.event
                async for record in _selected(
                    read_log(
                        js,
                        [decision_filter(None, target.kind, target.namespace, target.name)],
                        stream=options.stream,
                    ),
                    since=None,
                    until=None,
                    err=err,
                )
                if isinstance(record.event, DecisionMade)
            ]
            referenced = sorted(
                {
                    event_filter(ref.kind, ref.namespace or "", ref.name)
                    for decision in decisions
                    for ref in (decision.data.inputs.observed if decision.data.inputs else ())
                    if ref.resource_version is not None
                }
            )
            index: dict[ObjectKey, dict[str, dict[str, object]]] = {}
            if referenced:
                async for record in _selected(
                    read_log(js, referenced, stream=options.stream), since=None, until=None, err=err
                ):
                    event = record.event
                    if isinstance(event, ObjectAdded | ObjectModified):
                        obj = event.data.object
                        version = str(metadata_of(obj).get("resourceVersion") or "")
                        key = ObjectKey(event.kind, event.namespace or "", event.name)
                        index.setdefault(key, {})[version] = obj
    except (NatsUnavailable, EventLogMissing) as error:
        return _fail(error, err)
    if not decisions:
        print(f"error: the event log has no decision about {target}", file=err)
        return 1
    results: list[Rerun] = []
    for decision in decisions:
        try:
            definition = options.definitions(decision.data.worker)
        except LookupError as error:
            print(f"warning: {error}", file=err)
            continue
        results.append(rerun(decision, definition, index))
    for line in rerun_lines(results):
        print(line, file=out)
    return 0 if all(result.same for result in results) else 3
