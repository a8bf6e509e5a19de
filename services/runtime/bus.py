"""The bus on JetStream: provisioning of its five streams, and the typed publish helpers.

Streams (names in :class:`BusConfig`; subjects from :mod:`events.subjects`):

``SANDBUS_EVENTS`` — the event log, ``sandbus.events.>`` and ``sandbus.decisions.>``
    Limits retention by age and size (oldest dropped first), and a duplicate window in which a
    second message with the same ``Nats-Msg-Id`` (the deterministic event id) is dropped.
    Changes and decisions share one stream so that one sequence orders both: ``sandbus
    explain`` and replays read a single timeline. Direct get is on, so "the last event of this
    object" is one request.
``SANDBUS_STATE`` — the state table, ``sandbus.state.>``
    One message per subject (``max_msgs_per_subject=1``): the latest event of every object,
    which workers read on start instead of relisting and the watcher diffs a relist against.
    Nobody publishes to it: the server derives it from the event log, sourcing
    ``sandbus.events.>`` with the subject transform ``sandbus.events.>`` → ``sandbus.state.>``,
    so every observed change is written once (by the watcher, to the log) and the table can
    never hold a state the log does not. Sourcing keeps the log's order and marks each copy
    with its log sequence (the ``Nats-Stream-Source`` header, :func:`source_sequence`); the
    table lags the log by the server's copying, which readers that need both account for. A
    deletion stays as a tombstone (the watcher must know an object was deleted, not just not
    seen) until the watcher removes it after ``state_tombstone_ttl``
    (:mod:`services.watcher.tombstones`). A stream rather than a KV bucket because its subjects
    follow the same scheme and filters as the event log and its messages are the same
    CloudEvents, so one decoder and one filter builder serve both.
``SANDBUS_WARM`` — the warm queues, ``sandbus.warm.>``
    Work-queue retention with ``max_msgs_per_subject=1``, ``discard=new`` and
    ``discard_new_per_subject``: a second entry for the same sandbox is refused with error
    10077 (:func:`enqueue_warm` returns False) until the first is acked and gone. Entries are
    published without ``Nats-Msg-Id``: the per-subject limit already deduplicates, and a dedup
    id would silently swallow a legitimate re-enqueue inside the window.
``SANDBUS_DLQ`` — dead letters, ``sandbus.dlq.>``
    Limits retention by age and size; what could not be processed, with the reason.
``SANDBUS_MEMO`` — the workers' per-key memory, ``sandbus.memo.>``
    One message per subject, like the state table: what a worker's planners asked it to keep
    for a key (a memo, expectations of its own writes), written before the writes it covers,
    so that a restarted worker (or its standby) knows what it was waiting for. A key
    forgotten is a ``null`` record with a TTL (``state_tombstone_ttl``), so that a worker needs
    no purge right and forgotten keys do not pile up.

:func:`ensure_bus` is idempotent and converges: it creates what is missing, updates a stream
whose settings differ from the config (and says which), and leaves the rest alone; it is safe
for every service to call on start, concurrently. Settings JetStream cannot change in place
(storage type, retention) raise :class:`BusProvisioningError` naming the stream and fields.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    PubAck,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamSource,
    SubjectTransform,
)
from nats.js.errors import APIError, NotFoundError

from events.codec import encode_event, nats_subject
from events.headers import dead_letter_headers, event_headers
from events.subjects import (
    DEAD_LETTER_SUBJECTS,
    EVENT_LOG_SUBJECTS,
    MEMO_SUBJECTS,
    OBSERVED_SUBJECTS,
    STATE_SUBJECTS,
    WARM_SUBJECTS,
    dead_letter_subject,
)
from events.types import DecisionMade, ObjectEvent, WarmQueued
from services.runtime.settings import setting

__all__ = [
    "REPLICAS_ENV",
    "BusConfig",
    "BusProvisioningError",
    "dead_letter",
    "enqueue_warm",
    "ensure_bus",
    "publish_dead_letter",
    "publish_event",
    "source_sequence",
]

ERR_MAX_MSGS_PER_SUBJECT: Final = 10077
"""JetStream's "maximum messages per subject exceeded": the warm entry is already queued."""
ERR_STREAM_NAME_IN_USE: Final = 10058

StreamChange = Literal["created", "updated", "unchanged"]

_DAY: Final = 86_400.0
REPLICAS_ENV: Final = "SANDBUS_BUS_REPLICAS"
DUPLICATE_WINDOW_ENV: Final = "SANDBUS_BUS_DUPLICATE_WINDOW"
Seconds = Annotated[float, msgspec.Meta(gt=0)]
StreamName = Annotated[str, msgspec.Meta(pattern=r"^[^.*>\s/\\]+$")]


class BusConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Names and limits of the bus. Durations are in seconds, sizes in bytes."""

    replicas: Annotated[int, msgspec.Meta(ge=1, le=5)] = 1
    storage: Literal["file", "memory"] = "file"
    duplicate_window: Seconds = 300.0
    """How long an event id is remembered; covers retries, relists and leader handover."""

    event_log_stream: StreamName = "SANDBUS_EVENTS"
    event_log_max_age: Seconds = 7 * _DAY
    event_log_max_bytes: Annotated[int, msgspec.Meta(gt=0)] = 1 << 30

    state_stream: StreamName = "SANDBUS_STATE"
    state_tombstone_ttl: Annotated[int, msgspec.Meta(ge=1)] = 86_400
    """Seconds a deletion stays in the state table, and a forgotten key's null record in the
    memo stream (per-message TTLs are whole seconds)."""

    warm_stream: StreamName = "SANDBUS_WARM"

    dead_letter_stream: StreamName = "SANDBUS_DLQ"
    dead_letter_max_age: Seconds = 14 * _DAY
    dead_letter_max_bytes: Annotated[int, msgspec.Meta(gt=0)] = 256 << 20

    memo_stream: StreamName = "SANDBUS_MEMO"

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> BusConfig:
        """The defaults, with ``SANDBUS_BUS_REPLICAS`` (1..5: each stream's copies in a NATS
        cluster) and ``SANDBUS_BUS_DUPLICATE_WINDOW`` (seconds) when set; a value that does not
        parse raises ValueError naming the variable."""
        settings: dict[str, Any] = {}
        replicas = setting(REPLICAS_ENV, int, None, env=env)
        if replicas is not None:
            settings["replicas"] = replicas
        window = setting(DUPLICATE_WINDOW_ENV, float, None, env=env)
        if window is not None:
            settings["duplicate_window"] = window
        try:
            return cls(**settings)
        except ValueError as error:
            raise ValueError(f"the bus settings of the environment: {error}") from None

    def __post_init__(self) -> None:
        # msgspec checks the Meta constraints only when decoding; a config built in code gets
        # the same checks here.
        if not 1 <= self.replicas <= 5:
            raise ValueError(f"replicas must be 1..5 (JetStream's range), not {self.replicas}")
        for field in (
            "duplicate_window",
            "event_log_max_age",
            "event_log_max_bytes",
            "state_tombstone_ttl",
            "dead_letter_max_age",
            "dead_letter_max_bytes",
        ):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be positive")
        if self.duplicate_window > self.event_log_max_age:
            raise ValueError("duplicate_window may not exceed event_log_max_age")
        names = [
            self.event_log_stream,
            self.state_stream,
            self.warm_stream,
            self.dead_letter_stream,
        ]
        if len(set(names)) != len(names):
            raise ValueError(f"stream names must differ: {names}")


class BusProvisioningError(RuntimeError):
    """A stream could not be created or brought to the configured settings."""


# --- desired state (pure) ----------------------------------------------------------------


@dataclass(frozen=True)
class _Stream:
    """One stream of the bus, as the module doc describes it."""

    name: Callable[[BusConfig], str]
    description: str
    subjects: tuple[str, ...]
    limits: Callable[[BusConfig], tuple[float, int]] | None = None
    """Its age and size limits (oldest dropped first); None: none."""
    last_per_subject: bool = False
    """One message per subject."""
    work_queue: bool = False
    """Work-queue retention, and a second message on a subject refused rather than replacing
    the first."""
    direct: bool = False
    """Direct get: "the last message of this subject" is one request."""
    message_ttl: bool = False
    derived_from_log: bool = False
    """No subjects of its own: the server copies the event log's observed changes into it."""


_STREAMS: Final = (
    _Stream(
        lambda config: config.event_log_stream,
        "sandbus event log: observed changes and worker decisions",
        EVENT_LOG_SUBJECTS,
        limits=lambda config: (config.event_log_max_age, config.event_log_max_bytes),
        direct=True,
    ),
    _Stream(
        lambda config: config.state_stream,
        "sandbus state table: the latest event per object, derived from the event log",
        (),
        last_per_subject=True,
        direct=True,
        # Not used any more (the watcher removes tombstones), but a stream's per-message TTL
        # can only be turned on: a bus provisioned before keeps it, so the desired config does.
        message_ttl=True,
        derived_from_log=True,
    ),
    _Stream(
        lambda config: config.warm_stream,
        "sandbus warm queues: one entry per adoptable sandbox",
        WARM_SUBJECTS,
        last_per_subject=True,
        work_queue=True,
    ),
    _Stream(
        lambda config: config.dead_letter_stream,
        "sandbus dead letters: messages that could not be processed",
        DEAD_LETTER_SUBJECTS,
        limits=lambda config: (config.dead_letter_max_age, config.dead_letter_max_bytes),
    ),
    _Stream(
        lambda config: config.memo_stream,
        "sandbus worker memory: what each worker keeps per key",
        MEMO_SUBJECTS,
        last_per_subject=True,
        direct=True,
        message_ttl=True,
    ),
)


def _log_source(config: BusConfig) -> StreamSource:
    """The state table's one source: the event log's observed changes, under state subjects."""
    (observed,) = OBSERVED_SUBJECTS
    (state,) = STATE_SUBJECTS
    return StreamSource(
        name=config.event_log_stream,
        subject_transforms=[SubjectTransform(src=observed, dest=state)],
    )


SOURCE_HEADER: Final = "Nats-Stream-Source"
"""On a sourced message: ``<origin stream> <origin sequence> <filter> <transform> …``."""


def source_sequence(headers: Mapping[str, str] | None) -> int | None:
    """The event-log sequence a state-table message was copied from, or None for a message
    that was not sourced (written by a watcher before the table was derived)."""
    value = (headers or {}).get(SOURCE_HEADER, "")
    tokens = value.split(" ", 2)
    return int(tokens[1]) if len(tokens) > 1 and tokens[1].isdigit() else None


def stream_configs(config: BusConfig) -> list[StreamConfig]:
    """The five streams as ``config`` wants them.

    Every compared setting is spelled out, even where it equals the server default, so that
    comparing with what the server reports finds no difference that is not real.
    """
    storage = StorageType.FILE if config.storage == "file" else StorageType.MEMORY
    configs = []
    for stream in _STREAMS:
        max_age, max_bytes = stream.limits(config) if stream.limits else (0, -1)
        configs.append(
            StreamConfig(
                name=stream.name(config),
                description=stream.description,
                subjects=list(stream.subjects),
                retention=RetentionPolicy.WORK_QUEUE
                if stream.work_queue
                else RetentionPolicy.LIMITS,
                discard=DiscardPolicy.NEW if stream.work_queue else DiscardPolicy.OLD,
                discard_new_per_subject=stream.work_queue,
                max_age=max_age,
                max_bytes=max_bytes,
                max_msgs_per_subject=1 if stream.last_per_subject else -1,
                allow_direct=stream.direct,
                allow_msg_ttl=stream.message_ttl,
                sources=[_log_source(config)] if stream.derived_from_log else None,
                storage=storage,
                num_replicas=config.replicas,
                duplicate_window=config.duplicate_window,
                max_msgs=-1,
            )
        )
    return configs


_COMPARED: Final = (
    "description",
    "subjects",
    "retention",
    "discard",
    "discard_new_per_subject",
    "max_age",
    "max_bytes",
    "max_msgs",
    "max_msgs_per_subject",
    "storage",
    "num_replicas",
    "duplicate_window",
    "allow_direct",
    "allow_msg_ttl",
    "sources",
)


def _normalized(field: str, value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if field == "subjects":
        return sorted(value or [])
    if field == "sources":
        return sorted(
            (
                source.name,
                tuple((t.src, t.dest) for t in source.subject_transforms or ()),
                source.filter_subject or None,
            )
            for source in value or ()
        )
    if field in ("allow_direct", "allow_msg_ttl", "discard_new_per_subject"):
        return bool(value)
    if field in ("max_age", "duplicate_window"):
        # The server reports nanoseconds, which nats-py turns into float seconds.
        return round(float(value or 0), 6)
    return value


def config_differences(desired: StreamConfig, actual: StreamConfig) -> list[str]:
    """The compared settings in which ``actual`` differs from ``desired``."""
    return [
        field
        for field in _COMPARED
        if _normalized(field, getattr(desired, field)) != _normalized(field, getattr(actual, field))
    ]


# --- provisioning ------------------------------------------------------------------------


async def _sourcing_from_now(js: JetStreamContext, desired: StreamConfig) -> StreamConfig:
    """A state table that a watcher wrote itself (before the server derived it) already holds
    the latest state of every object: its source starts after the log's last message, instead
    of copying the whole log again, older states first, over the newer ones it holds."""
    sources = []
    for source in desired.sources or ():
        last = (await js.stream_info(source.name)).state.last_seq
        sources.append(dataclasses.replace(source, opt_start_seq=last + 1))
    return dataclasses.replace(desired, sources=sources)


async def _ensure_stream(js: JetStreamContext, desired: StreamConfig) -> StreamChange:
    name = desired.name
    assert name is not None
    try:
        info = await js.stream_info(name)
    except NotFoundError:
        try:
            await js.add_stream(desired)
            return "created"
        except APIError as error:
            if error.err_code != ERR_STREAM_NAME_IN_USE:
                raise BusProvisioningError(f"cannot create stream {name}: {error}") from error
            # Another service created it between our lookup and our create; converge on it.
            info = await js.stream_info(name)
    if (info.config.num_replicas or 1) > (desired.num_replicas or 1):
        # Replicas are a floor: a service started without SANDBUS_BUS_REPLICAS never shrinks
        # a bus that was provisioned replicated.
        desired = dataclasses.replace(desired, num_replicas=info.config.num_replicas)
    differences = config_differences(desired, info.config)
    if not differences:
        return "unchanged"
    if desired.sources and not info.config.sources:
        desired = await _sourcing_from_now(js, desired)
    try:
        await js.update_stream(desired)
    except APIError as error:
        raise BusProvisioningError(
            f"cannot update stream {name} ({', '.join(differences)}): {error.description}"
        ) from error
    return "updated"


async def ensure_bus(
    js: JetStreamContext, config: BusConfig | None = None
) -> dict[str, StreamChange]:
    """Create or update the five streams; returns what happened to each, by stream name."""
    report: dict[str, StreamChange] = {}
    for desired in stream_configs(config or BusConfig()):
        assert desired.name is not None
        report[desired.name] = await _ensure_stream(js, desired)
    return report


# --- publishing --------------------------------------------------------------------------


async def publish_event(
    js: JetStreamContext,
    event: ObjectEvent | DecisionMade,
    config: BusConfig | None = None,
    *,
    ack_timeout: float | None = None,
) -> PubAck:
    """Append ``event`` to the event log, deduplicated by its id.

    ``PubAck.duplicate`` is true when the id was already stored inside the duplicate window,
    which is the expected outcome of a retry or a relist, not an error. The expected-stream
    header makes a publish fail loudly if the bus was not provisioned, instead of vanishing.
    """
    config = config or BusConfig()
    headers = event_headers(
        event.id, traceparent=event.traceparent, tracestate=event.tracestate, dedup=True
    )
    return await js.publish(
        nats_subject(event),
        encode_event(event),
        timeout=ack_timeout,
        stream=config.event_log_stream,
        headers=headers,
    )


async def enqueue_warm(
    js: JetStreamContext,
    event: WarmQueued,
    config: BusConfig | None = None,
    *,
    ack_timeout: float | None = None,
) -> bool:
    """Put a warm-queue entry; False when that sandbox already has one (error 10077)."""
    config = config or BusConfig()
    try:
        await js.publish(
            nats_subject(event),
            encode_event(event),
            timeout=ack_timeout,
            stream=config.warm_stream,
            headers=event_headers(event.id, traceparent=event.traceparent, dedup=False),
        )
    except APIError as error:
        if error.err_code == ERR_MAX_MSGS_PER_SUBJECT:
            return False
        raise
    return True


async def publish_dead_letter(
    js: JetStreamContext,
    *,
    original_subject: str,
    payload: bytes,
    reason: str,
    config: BusConfig | None = None,
    rejected_by: str | None = None,
    stream: str | None = None,
    sequence: int | None = None,
    original_headers: Mapping[str, str] | None = None,
    ack_timeout: float | None = None,
) -> PubAck:
    """Store ``payload`` unchanged on the dead-letter subject of ``original_subject``."""
    config = config or BusConfig()
    return await js.publish(
        dead_letter_subject(original_subject),
        payload,
        timeout=ack_timeout,
        stream=config.dead_letter_stream,
        headers=dead_letter_headers(
            reason=reason,
            original_subject=original_subject,
            rejected_by=rejected_by,
            stream=stream,
            sequence=sequence,
            original_headers=original_headers,
        ),
    )


async def dead_letter(
    js: JetStreamContext,
    msg: Msg,
    *,
    reason: str,
    config: BusConfig | None = None,
    rejected_by: str | None = None,
) -> PubAck:
    """Dead-letter a received message; a JetStream message's stream and sequence go along.

    The caller still acks (or terms) ``msg`` afterwards: dead-lettering first means a crash in
    between redelivers the message, and the dedup id makes the second dead letter a no-op.
    """
    stream: str | None = None
    sequence: int | None = None
    if msg.reply and msg.reply.startswith("$JS.ACK."):
        metadata = msg.metadata
        stream, sequence = metadata.stream, metadata.sequence.stream
    return await publish_dead_letter(
        js,
        original_subject=msg.subject,
        payload=msg.data,
        reason=reason,
        config=config,
        rejected_by=rejected_by,
        stream=stream,
        sequence=sequence,
        original_headers=msg.headers,
    )
