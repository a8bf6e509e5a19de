"""Encoding and strict decoding of events, and the NATS subject each event belongs on.

Decoding is where bad input enters the system, so it is strict and explains itself: every
failure is an :class:`EventDecodeError` that names the attribute (a dotted path such as
``data.object.metadata.uid``) and what was wrong with it, ready to become a dead letter's
reason. It proceeds in three steps, each with its own errors:

1. Envelope: the payload must be a JSON object whose ``specversion`` is ``"1.0"`` and whose
   ``type`` is one this contract knows. An unknown type raises :class:`UnknownEventType`, a
   subclass, because a newer producer's event is not garbage: a consumer may skip it instead
   of dead-lettering it.
2. Shape: the whole payload is decoded into the class of that type (msgspec checks every
   attribute's type and constraints and reports the path).
3. Consistency: the attributes agree with each other and with ``data``. The ``subject``
   attribute is derived from ``kind``/``namespace``/``name``; for an observed change, those
   match ``data.object`` and the id is ``<uid>:<resourceVersion>:<change>`` of that object, so
   deduplication by id can be trusted; a decision's ``data.key`` is the object the attributes
   name, and its id is derived from its inputs.

Unknown attributes and unknown data fields are ignored (CloudEvents extensions and newer
fields), never rejected.

:func:`decode_observed` decodes an observed change with the same checks but leaves its object
as JSON: a worker that loads thousands of objects from the state table keeps them as JSON, and
decoding each into dicts only to encode it again was most of the cost of its start.
"""

from __future__ import annotations

import re
from typing import Any, Final, NamedTuple

import msgspec

from events.envelope import (
    SPECVERSION,
    CloudEvent,
    NonEmpty,
    ObjectKey,
    event_type_of,
    subject_attribute,
)
from events.ids import ChangeKind, EventIdError, change_event_id, decision_event_id
from events.subjects import decision_subject, event_subject, state_subject, warm_subject
from events.types import (
    EVENT_CLASSES,
    DecisionMade,
    Event,
    ObjectAdded,
    ObjectDeleted,
    ObjectEvent,
    ObjectModified,
    WarmQueued,
)

__all__ = [
    "EventDecodeError",
    "ObservedState",
    "UnknownEventType",
    "decode_event",
    "decode_observed",
    "encode_event",
    "nats_subject",
    "state_table_subject",
]


class EventDecodeError(ValueError):
    """A payload that is not a valid event; ``attribute`` is the dotted path of the culprit
    (``None`` when the payload as a whole is wrong) and ``problem`` what is wrong with it."""

    def __init__(self, attribute: str | None, problem: str) -> None:
        self.attribute = attribute
        self.problem = problem
        where = f"attribute `{attribute}`" if attribute else "payload"
        super().__init__(f"{where}: {problem}")


class UnknownEventType(EventDecodeError):
    """A well-formed envelope whose ``type`` this version of the contract does not know."""

    def __init__(self, event_type: str) -> None:
        self.event_type = event_type
        known = ", ".join(sorted(EVENT_CLASSES))
        super().__init__("type", f"unknown event type {event_type!r} (known: {known})")


class _Envelope(msgspec.Struct):
    """Only what step 1 needs; ``Any`` so that a wrong JSON type is reported by us, precisely."""

    specversion: Any = msgspec.UNSET
    type: Any = msgspec.UNSET


_envelope_decoder: Final = msgspec.json.Decoder(_Envelope)
_decoders: Final[dict[str, msgspec.json.Decoder[Any]]] = {
    event_type: msgspec.json.Decoder(cls) for event_type, cls in EVENT_CLASSES.items()
}
_encoder: Final = msgspec.json.Encoder()

_MSGSPEC_ERROR = re.compile(r"^(?P<problem>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_MISSING_FIELD = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")


def encode_event(event: Event) -> bytes:
    """The structured-mode JSON of ``event``."""
    return _encoder.encode(event)


def _from_msgspec(error: msgspec.DecodeError, within: str | None = None) -> EventDecodeError:
    """The error msgspec reported, as an attribute and a problem; ``within``: the attribute
    the decoded document sits at (``data.object``), when it is not the whole payload."""
    text = str(error)
    if not isinstance(error, msgspec.ValidationError):
        return EventDecodeError(None, f"not valid JSON ({text})")
    match = _MSGSPEC_ERROR.match(text)
    problem = match.group("problem") if match else text
    path = (match.group("path") or "") if match else ""
    attribute = path.lstrip(".") or None
    missing = _MISSING_FIELD.match(problem)
    if missing:
        field = missing.group("field")
        attribute = f"{attribute}.{field}" if attribute else field
        problem = "is required but missing"
    if within is not None:
        return EventDecodeError(f"{within}.{attribute}" if attribute else within, problem)
    if attribute is None and problem.startswith("Expected `object`"):
        problem = f"a CloudEvent must be a JSON object; {problem[0].lower()}{problem[1:]}"
    return EventDecodeError(attribute, problem)


def _event_type(payload: bytes | bytearray | memoryview | str) -> str:
    """Step 1: the ``type`` of a payload that is a CloudEvents 1.0 envelope."""
    try:
        envelope = _envelope_decoder.decode(payload)
    except msgspec.DecodeError as error:
        raise _from_msgspec(error) from None
    if envelope.specversion is msgspec.UNSET or envelope.specversion is None:
        raise EventDecodeError("specversion", "is required but missing")
    if envelope.specversion != SPECVERSION:
        raise EventDecodeError(
            "specversion", f"unsupported value {envelope.specversion!r}, expected {SPECVERSION!r}"
        )
    if envelope.type is msgspec.UNSET or envelope.type is None:
        raise EventDecodeError("type", "is required but missing")
    if not isinstance(envelope.type, str):
        raise EventDecodeError("type", f"expected a string, got {envelope.type!r}")
    if envelope.type not in _decoders:
        raise UnknownEventType(envelope.type)
    return envelope.type


def decode_event(payload: bytes | bytearray | memoryview | str) -> Event:
    """The event in ``payload``; raises :class:`EventDecodeError` saying what is wrong."""
    decoder = _decoders[_event_type(payload)]
    try:
        event: Event = decoder.decode(payload)
    except msgspec.DecodeError as error:
        raise _from_msgspec(error) from None
    _check_consistency(event)
    return event


# --- step 3: consistency -----------------------------------------------------------------


class _ObservedMetadata(msgspec.Struct, rename="camel"):
    """What :data:`events.types.KubeObject`'s schema requires of ``metadata``, checked here,
    and what :func:`decode_observed` reads besides (unchecked, as the schema leaves it)."""

    name: NonEmpty
    uid: NonEmpty
    resource_version: NonEmpty
    namespace: str | None = None
    labels: Any = None
    owner_references: Any = None


class _ObservedIdentity(msgspec.Struct, rename="camel"):
    api_version: NonEmpty
    kind: NonEmpty
    metadata: _ObservedMetadata


_identity_decoder: Final = msgspec.json.Decoder(_ObservedIdentity)

_CHANGE_OF: Final[dict[type[ObjectEvent], ChangeKind]] = {
    ObjectAdded: "added",
    ObjectModified: "modified",
    ObjectDeleted: "deleted",
}


def _mismatch(attribute: str, value: object, other: str, other_value: object) -> EventDecodeError:
    return EventDecodeError(attribute, f"{value!r} does not match {other} {other_value!r}")


def _check_consistency(event: Event) -> None:
    namespace = event.namespace or None
    # Attributes against data first: when they disagree, the attribute is the precise culprit,
    # and the subject (derived from the attributes) would only repeat the symptom.
    if isinstance(event, ObjectAdded | ObjectModified | ObjectDeleted):
        try:
            identity = msgspec.convert(event.data.object, _ObservedIdentity)
        except msgspec.ValidationError as error:
            raise _from_msgspec(error, within="data.object") from None
        _check_identity(identity, event, namespace, _CHANGE_OF[type(event)])
    elif isinstance(event, DecisionMade):
        _check_decision(event, namespace)
    else:
        _check_warm(event)
    _check_subject(event, namespace)


def _check_subject(event: CloudEvent[Any], namespace: str | None) -> None:
    expected_subject = subject_attribute(event.kind, namespace, event.name)
    if event.subject != expected_subject:
        raise _mismatch("subject", event.subject, "kind/namespace/name", expected_subject)


def _check_identity(
    identity: _ObservedIdentity, event: CloudEvent[Any], namespace: str | None, change: ChangeKind
) -> None:
    """An observed change's attributes name its object, and its id is that object's."""
    metadata = identity.metadata
    for attribute, value, field, observed in (
        ("kind", event.kind, "data.object.kind", identity.kind),
        ("name", event.name, "data.object.metadata.name", metadata.name),
        ("namespace", namespace, "data.object.metadata.namespace", metadata.namespace or None),
    ):
        if value != observed:
            raise _mismatch(attribute, value, field, observed)
    try:
        expected_id = change_event_id(metadata.uid, metadata.resource_version, change)
    except EventIdError as error:
        raise EventDecodeError("data.object.metadata", str(error)) from None
    if event.id != expected_id:
        raise _mismatch(
            "id", event.id, "<uid>:<resourceVersion>:<change> of data.object", expected_id
        )


def _check_decision(event: DecisionMade, namespace: str | None) -> None:
    key = event.data.key
    for attribute, value, field, recorded in (
        ("kind", event.kind, "data.key.kind", key.kind),
        ("name", event.name, "data.key.name", key.name),
        ("namespace", namespace, "data.key.namespace", key.namespace or None),
    ):
        if value != recorded:
            raise _mismatch(attribute, value, field, recorded)
    expected_id = decision_event_id(
        event.data.worker, key.kind, key.namespace, key.name, event.data.inputs_digest
    )
    if event.id != expected_id:
        raise _mismatch("id", event.id, "the id derived from data", expected_id)


def _check_warm(event: WarmQueued) -> None:
    expected_id = f"{event.data.uid}:{event.data.resource_version}:queued"
    if event.id != expected_id:
        raise _mismatch("id", event.id, "<uid>:<resourceVersion>:queued of data", expected_id)


# --- the state table's bulk reads --------------------------------------------------------


class ObservedState(NamedTuple):
    """An observed change as a bulk reader of the state table needs it: the object's identity
    and index fields, and the object itself still as JSON (a cache that keeps objects as JSON
    stores it without decoding and encoding it again)."""

    change: ChangeKind
    key: ObjectKey
    uid: str
    resource_version: str
    labels: Any
    """``metadata.labels`` as the object has them (not checked: a dict of strings, normally)."""
    owner_references: Any
    """``metadata.ownerReferences`` as the object has them (not checked either)."""
    object_json: bytes
    """``data.object``, as it was encoded in the event."""

    def object(self) -> dict[str, Any]:
        """``data.object`` decoded, as :func:`decode_event` gives it."""
        return _object_decoder.decode(self.object_json)


_object_decoder: Final = msgspec.json.Decoder(dict[str, Any])


class _JsonChange(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    object: msgspec.Raw
    synthetic: bool = False


class _AddedJson(CloudEvent[_JsonChange], frozen=True, tag=event_type_of(ObjectAdded)):
    pass


class _ModifiedJson(CloudEvent[_JsonChange], frozen=True, tag=event_type_of(ObjectModified)):
    pass


class _DeletedJson(CloudEvent[_JsonChange], frozen=True, tag=event_type_of(ObjectDeleted)):
    pass


_observed_decoders: Final[dict[str, tuple[ChangeKind, msgspec.json.Decoder[Any]]]] = {
    event_type_of(ObjectAdded): ("added", msgspec.json.Decoder(_AddedJson)),
    event_type_of(ObjectModified): ("modified", msgspec.json.Decoder(_ModifiedJson)),
    event_type_of(ObjectDeleted): ("deleted", msgspec.json.Decoder(_DeletedJson)),
}


def decode_observed(payload: bytes | bytearray | memoryview | str) -> ObservedState | None:
    """The observed change in ``payload`` with its object left as JSON, checked exactly as
    :func:`decode_event` checks it; None for a valid event of another type."""
    event_type = _event_type(payload)
    if event_type not in _observed_decoders:
        decode_event(payload)  # raises if it is not a valid event of its type either
        return None
    change, decoder = _observed_decoders[event_type]
    try:
        event = decoder.decode(payload)
        object_json = bytes(event.data.object)
    except msgspec.DecodeError as error:
        raise _from_msgspec(error) from None
    try:
        identity = _identity_decoder.decode(object_json)
    except msgspec.DecodeError as error:
        raise _from_msgspec(error, within="data.object") from None
    namespace = event.namespace or None
    _check_identity(identity, event, namespace, change)
    _check_subject(event, namespace)
    metadata = identity.metadata
    return ObservedState(
        change,
        ObjectKey(event.kind, event.namespace or "", event.name),
        metadata.uid,
        metadata.resource_version,
        metadata.labels,
        metadata.owner_references,
        object_json,
    )


# --- routing -----------------------------------------------------------------------------


def nats_subject(event: Event) -> str:
    """The subject ``event`` is published on (see :mod:`events.subjects`)."""
    namespace = event.namespace or None
    if isinstance(event, DecisionMade):
        return decision_subject(event.data.worker, event.kind, namespace, event.name)
    if isinstance(event, WarmQueued):
        data = event.data
        return warm_subject(
            namespace or "", data.template_hash, data.pool or "", data.node or "", event.name
        )
    return event_subject(event.kind, namespace, event.name)


def state_table_subject(event: ObjectEvent) -> str:
    """The state-table subject that holds the latest event of ``event``'s object."""
    return state_subject(event.kind, event.namespace or None, event.name)
