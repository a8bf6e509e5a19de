"""``sandbus queue ls``: every warm queue as the bus holds it, beside what it should hold.

A warm queue (``sandbus.warm.<ns>.<template-hash>.<pool>.>`` on the work-queue stream, see
:mod:`services.runtime.bus`) is right when it holds exactly one entry per adoptable member of
its pool: the pool worker enqueues a member when it becomes adoptable and purges the entry when
it stops being so (:mod:`services.pool.core.members`). Two sources say whether that holds, and
they are written by different processes, so this command reads both and puts them side by side:

- the warm stream: the depth of each queue (one stream-info request with a subject filter gives
  every subject's count), its oldest entry (a message get by subject from the first sequence:
  the stream has no direct get, and a work-queue stream refuses the ack-less consumer that
  every other history read uses), and the in-flight entries of its durable consumers (one per
  node; taken by a claim, not yet acked);
- the state table: the adoptable Sandboxes of each pool, by the pool worker's own rule
  (:func:`~services.pool.core.members.adoptable_pool`), and the SandboxTemplates, whose name
  hash names a queue's template.

An entry a claim has taken stays on the stream until the claim acks it after adopting, so the
depth *includes* the in-flight entries, and the rule is ``depth == adoptable``: an in-flight
entry's sandbox is still adoptable until the adoption's writes land. A mismatch is transient
while pools fill and claims adopt; one that stays means claims start cold with members idle
(``not queued``) or pop entries for sandboxes they cannot use (``stale``).

A queue appears when the bus or the state table knows of it: it has entries, a durable
consumer, or adoptable members. Everything here only reads; the one consumer kind it could
create on the warm stream would take entries away from the claim worker, so it creates none.

The pure half (:func:`depths`, :func:`in_flight_by_queue`, :func:`mismatch`, :func:`queue_rows`,
:func:`queue_table`, :func:`queue_json`) and the thin I/O (the ``_read_*`` functions,
:func:`list_queues`, :func:`register`) live together because the command is small; the unit
tests drive the first, the component tests the second against a real nats-server.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple, TextIO

from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError

from api.keys import LABEL_SANDBOX_TEMPLATE_REF_HASH, name_hash
from api.objects import Json, labels_of, metadata_of
from events.codec import EventDecodeError, decode_event, state_table_subject
from events.subjects import (
    WARM_SUBJECTS,
    SubjectError,
    decode_token,
    encode_token,
    parse_warm_subject,
    state_filter,
    warm_consumer_name,
    warm_queue_filter,
)
from events.types import ObjectAdded, ObjectModified
from services.cli.history.commands import NatsUnavailable, _connected
from services.cli.history.core.instants import format_age, format_instant
from services.domain.agentsandbox.warmpool import adoptable_pool
from services.runtime.bus import BusConfig
from services.runtime.streams import read_to_end

__all__ = [
    "QueueKey",
    "QueueOptions",
    "QueueRow",
    "depths",
    "in_flight_by_queue",
    "list_queues",
    "mismatch",
    "queue_json",
    "queue_of_consumer",
    "queue_rows",
    "queue_table",
]

NO_QUEUES: Final = "no warm queues"
SUBJECT_DETAILS_LIMIT: Final = 100_000
"""The most subjects the server details in one stream-info answer (it pages beyond that)."""
_CONSUMER_PAGE: Final = 256
"""The server's page size when listing consumers."""


class QueueKey(NamedTuple):
    """One warm queue; ``pool`` is empty for entries no pool made."""

    namespace: str
    template_hash: str
    pool: str


@dataclass(frozen=True, kw_only=True)
class QueueRow:
    key: QueueKey
    template: str | None
    """The SandboxTemplate whose name hash is the queue's, if the state table holds one."""
    depth: int
    """Entries stored on the queue's subjects, the in-flight ones included."""
    oldest: datetime | None
    """When the stream stored the queue's first entry (None: the queue is empty)."""
    in_flight: int | None
    """Entries taken and not yet acked (None: the queue has no consumer yet)."""
    adoptable: int
    """Adoptable Sandboxes of the pool with this template hash, in the state table."""

    @property
    def mismatch(self) -> str | None:
        return mismatch(self.depth, self.adoptable)


def mismatch(depth: int, adoptable: int) -> str | None:
    """What is wrong with a queue's depth, or None when it holds one entry per adoptable member.

    ``depth`` counts the in-flight entries already (they stay stored until acked), so they are
    not added again."""
    if depth < adoptable:
        return f"{adoptable - depth} not queued"
    if depth > adoptable:
        return f"{depth - adoptable} stale"
    return None


def queue_of_consumer(name: str) -> QueueKey | None:
    """The queue of a durable named by :func:`~events.subjects.warm_consumer_name` (one node's
    part of it), else None."""
    parts = name.split(":")
    if len(parts) != 5 or parts[0] != "warm":
        return None
    try:
        namespace, template_hash, pool, node = (decode_token(part) for part in parts[1:])
    except SubjectError:
        return None
    if not template_hash or warm_consumer_name(namespace, template_hash, pool, node) != name:
        return None
    return QueueKey(namespace, template_hash, pool)


def in_flight_by_queue(consumers: Mapping[str, int], namespace: str | None) -> dict[QueueKey, int]:
    """The ack-pending counts of the warm stream's consumers (by name) that are a queue's
    durables, summed by queue; only ``namespace``'s unless it is None."""
    by_queue: dict[QueueKey, int] = {}
    for name, in_flight in consumers.items():
        key = queue_of_consumer(name)
        if key is not None and namespace in (None, key.namespace):
            by_queue[key] = by_queue.get(key, 0) + in_flight
    return by_queue


@dataclass(frozen=True, kw_only=True)
class Depths:
    """The warm stream's subject counts, by queue; subjects outside the scheme kept apart."""

    by_queue: dict[QueueKey, int] = field(default_factory=dict)
    malformed: list[str] = field(default_factory=list)


def depths(subject_counts: Mapping[str, int]) -> Depths:
    """Sum the per-subject counts of stream info into one depth per queue."""
    result = Depths()
    for subject, count in sorted(subject_counts.items()):
        try:
            parsed = parse_warm_subject(subject)
        except SubjectError:
            result.malformed.append(subject)
            continue
        key = QueueKey(parsed.namespace, parsed.template_hash, parsed.pool)
        result.by_queue[key] = result.by_queue.get(key, 0) + count
    return result


def queue_rows(
    *,
    depths: Mapping[QueueKey, int],
    oldest: Mapping[QueueKey, datetime],
    consumers: Mapping[QueueKey, int],
    sandboxes: Iterable[Json],
    templates: Iterable[Json],
) -> list[QueueRow]:
    """One row per queue that has entries, a consumer or adoptable members, sorted by queue.

    ``consumers`` maps a queue to its consumer's ack-pending count; ``sandboxes`` and
    ``templates`` are the live objects of the state table."""
    adoptable: Counter[QueueKey] = Counter()
    for sandbox in sandboxes:
        pool = adoptable_pool(sandbox)
        if pool is None:
            continue
        template_hash = str(labels_of(sandbox).get(LABEL_SANDBOX_TEMPLATE_REF_HASH) or "")
        namespace = str(metadata_of(sandbox).get("namespace") or "")
        adoptable[QueueKey(namespace, template_hash, pool)] += 1
    names: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
    for template in templates:
        metadata = metadata_of(template)
        name = str(metadata.get("name") or "")
        if name:
            names[(str(metadata.get("namespace") or ""), name_hash(name))].add(name)
    keys = sorted({*depths, *consumers, *adoptable})
    return [
        QueueRow(
            key=key,
            template=",".join(sorted(names[(key.namespace, key.template_hash)])) or None,
            depth=depths.get(key, 0),
            oldest=oldest.get(key),
            in_flight=consumers.get(key),
            adoptable=adoptable[key],
        )
        for key in keys
    ]


def _age(row: QueueRow, now: datetime) -> float | None:
    if row.oldest is None:
        return None
    return round(max(0.0, (now - row.oldest).total_seconds()), 3)


_HEADER: Final = (
    "NAMESPACE",
    "HASH",
    "TEMPLATE",
    "POOL",
    "DEPTH",
    "OLDEST",
    "IN-FLIGHT",
    "ADOPTABLE",
    "MISMATCH",
)


def queue_table(rows: Iterable[QueueRow], now: datetime) -> str:
    """The queues as an aligned table; ``-`` for what is unknown or not there."""
    cells = [_HEADER]
    for row in rows:
        cells.append(
            (
                row.key.namespace or "-",
                row.key.template_hash,
                row.template or "-",
                row.key.pool or "-",
                str(row.depth),
                "-" if row.oldest is None else format_age(now - row.oldest),
                "-" if row.in_flight is None else str(row.in_flight),
                str(row.adoptable),
                row.mismatch or "",
            )
        )
    if len(cells) == 1:
        return NO_QUEUES
    widths = [max(len(line[column]) for line in cells) for column in range(len(_HEADER) - 1)]
    return "\n".join(
        "   ".join(
            [*(cell.ljust(width) for cell, width in zip(line, widths, strict=False)), line[-1]]
        ).rstrip()
        for line in cells
    )


def queue_json(rows: Iterable[QueueRow], now: datetime) -> str:
    """The queues as a JSON array, one object per queue (times in RFC 3339, ages in seconds)."""
    document: list[dict[str, Any]] = [
        {
            "namespace": row.key.namespace,
            "templateHash": row.key.template_hash,
            "template": row.template,
            "pool": row.key.pool,
            "depth": row.depth,
            "oldest": None if row.oldest is None else format_instant(row.oldest),
            "oldestAgeSeconds": _age(row, now),
            "inFlight": row.in_flight,
            "adoptable": row.adoptable,
            "mismatch": row.mismatch,
        }
        for row in rows
    ]
    return json.dumps(document, indent=2, ensure_ascii=False)


# --- I/O ----------------------------------------------------------------------------------


class StreamMissing(RuntimeError):
    def __init__(self, stream: str) -> None:
        super().__init__(
            f"the stream {stream} does not exist on this NATS server; "
            "is sandbus running (sandbus up) and is --nats the right server?"
        )


@dataclass(frozen=True, kw_only=True)
class QueueOptions:
    nats_url: str
    namespace: str | None = None
    json: bool = False
    bus: BusConfig = field(default_factory=BusConfig)
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    """What "now" is for the ages (tests pin it)."""


def _warm_filter(namespace: str | None) -> str:
    """Every queue's subjects, or those of one namespace's queues."""
    everything = WARM_SUBJECTS[0]
    if namespace is None:
        return everything
    return f"{everything.removesuffix('>')}{encode_token(namespace)}.>"


async def _read_subject_counts(js: JetStreamContext, stream: str, subjects: str) -> dict[str, int]:
    try:
        info = await js.stream_info(stream, subjects_filter=subjects)
    except NotFoundError:
        raise StreamMissing(stream) from None
    return dict(info.state.subjects or {})


async def _read_oldest(js: JetStreamContext, stream: str, subjects: str) -> datetime | None:
    try:
        message = await js.get_msg(stream, seq=1, subject=subjects, next=True)
    except NotFoundError:  # taken and acked, or purged, since the counts were read
        return None
    return message.time


async def _read_consumers(js: JetStreamContext, stream: str) -> dict[str, int]:
    """Every consumer of the stream by name, with its ack-pending count (all pages)."""
    consumers: dict[str, int] = {}
    while True:
        page = await js.consumers_info(stream, offset=len(consumers) or None)
        for info in page:
            consumers[str(info.name)] = int(info.num_ack_pending or 0)
        if len(page) < _CONSUMER_PAGE:
            return consumers


async def _read_state(
    js: JetStreamContext, stream: str, namespace: str | None, err: TextIO
) -> dict[str, list[Json]]:
    """The live objects of the state table by kind (Sandbox, SandboxTemplate); deletions and
    messages that are not a valid event on their own subject are skipped (with a warning)."""
    objects: dict[str, list[Json]] = {"Sandbox": [], "SandboxTemplate": []}
    try:
        messages = read_to_end(
            js,
            stream,
            [state_filter(kind, namespace) for kind in objects],
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            name_prefix="sandbus-queues",
        )
        async for msg in messages:
            try:
                event = decode_event(msg.data)
            except EventDecodeError as error:
                print(f"warning: {msg.subject} in {stream} is not a valid event: {error}", file=err)
                continue
            if not isinstance(event, ObjectAdded | ObjectModified):
                continue  # a deletion's tombstone
            if state_table_subject(event) != msg.subject:
                print(f"warning: {msg.subject} in {stream} holds {event.subject}", file=err)
                continue
            objects.setdefault(event.kind, []).append(event.data.object)
    except NotFoundError:
        raise StreamMissing(stream) from None
    return objects


async def list_queues(options: QueueOptions, *, out: TextIO, err: TextIO) -> int:
    """Print every warm queue with its depth, oldest entry, in-flight and adoptable members."""
    stream = options.bus.warm_stream
    try:
        async with _connected(options.nats_url, err) as js:
            counts = await _read_subject_counts(js, stream, _warm_filter(options.namespace))
            counted = depths(counts)
            oldest: dict[QueueKey, datetime] = {}
            for key in counted.by_queue:
                first = await _read_oldest(js, stream, warm_queue_filter(*key))
                if first is not None:
                    oldest[key] = first
            consumers = in_flight_by_queue(await _read_consumers(js, stream), options.namespace)
            state = await _read_state(js, options.bus.state_stream, options.namespace, err)
    except (NatsUnavailable, StreamMissing) as error:
        print(f"error: {error}", file=err)
        return 1
    for subject in counted.malformed:
        print(f"warning: {subject} in {stream} is not a warm-queue subject; not counted", file=err)
    if len(counts) >= SUBJECT_DETAILS_LIMIT:
        print(
            f"warning: the server detailed only {len(counts)} subjects; depths may be short",
            file=err,
        )
    rows = queue_rows(
        depths=counted.by_queue,
        oldest=oldest,
        consumers=consumers,
        sandboxes=state["Sandbox"],
        templates=state["SandboxTemplate"],
    )
    now = options.clock()
    print(queue_json(rows, now) if options.json else queue_table(rows, now), file=out)
    return 0
