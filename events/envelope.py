"""The CloudEvents 1.0 envelope every message on the bus travels in (structured mode, JSON).

Structured mode puts every attribute and the data into one JSON object, which is all the NATS
protocol binding of CloudEvents 1.0.2 defines, and means ``nats sub``, any CloudEvents SDK and a
plain JSON parser all read our events. The attributes:

``specversion``
    Always ``"1.0"``; a decoder rejects anything else.
``id``
    Deterministic (see :mod:`events.ids`) and also the ``Nats-Msg-Id``, so JetStream dedup and
    CloudEvents' "source + id is unique" are the same rule.
``source``
    The producer: ``/sandbus/watcher`` for observed changes, ``/sandbus/<worker>`` for
    decisions. Every watcher replica uses the same source, because a change is the same event
    whichever replica saw it.
``type``
    The versioned event type, ``io.sandbus.<noun>.<verb>.v<N>`` (see :mod:`events.types`).
``subject``
    ``<Kind>/<namespace>/<name>`` (``<Kind>/<name>`` when cluster-scoped): the object the
    event is about, written the way ``sandbus explain`` takes it.
``time``
    RFC 3339 with a time zone: when the watcher observed the change, or the worker decided.
``datacontenttype``
    Always ``application/json`` (absent means the same); ``data`` is a JSON object whose
    shape the type fixes.

Extension attributes. CloudEvents requires extension names of lower-case ASCII letters and
digits only, which ``kind``, ``namespace`` and ``name`` already are, so they are used as they
are rather than prefixed (``k8skind``…): a subscriber filters on the names it would guess.
``namespace`` is omitted for a cluster-scoped object. ``traceparent`` and ``tracestate`` are
the W3C Trace Context values, as the CloudEvents distributed-tracing extension names them; the
same values also travel as NATS headers, so tracing works without decoding the payload.

Schema evolution follows msgspec's rules: a new attribute or data field always has a default,
and no field ever changes its type; a breaking change is a new ``.v<N>`` type. Decoders ignore
attributes they do not know (other producers' extensions), as CloudEvents requires. Optional
attributes accept JSON ``null`` as "absent", also as CloudEvents requires, and are omitted when
encoded.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, NamedTuple, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from api.objects import metadata_of

__all__ = [
    "DATACONTENTTYPE",
    "KIND_PATTERN",
    "SPECVERSION",
    "TRACEPARENT_PATTERN",
    "WATCHER_SOURCE",
    "CloudEvent",
    "Kind",
    "NonEmpty",
    "ObjectKey",
    "ObjectRef",
    "Timestamp",
    "TraceParent",
    "event_type_of",
    "key_of",
    "subject_attribute",
    "worker_source",
]

SPECVERSION = "1.0"
DATACONTENTTYPE = "application/json"
WATCHER_SOURCE = "/sandbus/watcher"
TRACEPARENT_PATTERN = r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
KIND_PATTERN = r"^[A-Za-z][A-Za-z0-9]*$"

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
Kind = Annotated[
    str,
    msgspec.Meta(pattern=KIND_PATTERN, description="The Kubernetes kind, e.g. Sandbox."),
]
Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]
TraceParent = Annotated[
    str,
    msgspec.Meta(pattern=TRACEPARENT_PATTERN, description="W3C Trace Context traceparent."),
]

D = TypeVar("D")


def event_type_of(cls: type[CloudEvent[Any]]) -> str:
    """The ``type`` attribute that an event class carries (its msgspec tag)."""
    tag = cls.__struct_config__.tag
    if not isinstance(tag, str):
        raise TypeError(f"{cls.__name__} is not a concrete event type (it has no type tag)")
    return tag


def worker_source(worker: str) -> str:
    """The ``source`` attribute of events that a worker produces."""
    return f"/sandbus/{worker}"


def subject_attribute(kind: str, namespace: str | None, name: str) -> str:
    """The CloudEvents ``subject``: ``Kind/namespace/name``, or ``Kind/name`` if cluster-scoped."""
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


class ObjectKey(NamedTuple):
    """Which object, as the services key it: kind, namespace (``""`` when cluster-scoped), name.

    The key of the watcher's published view, of the workers' cache and work queues, and of the
    history's folds. It lives here, beside :class:`ObjectRef` (the same identity as it travels
    inside events), because the subjects and the ``subject`` attribute are built from these
    three values, and because every service that reads the bus can import it from here
    without importing another service. Its string is the ``subject`` attribute.
    """

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return subject_attribute(self.kind, self.namespace or None, self.name)


def key_of(obj: Mapping[str, Any], kind: str | None = None) -> ObjectKey:
    """The key of ``obj``; ``kind`` fills in for list items that arrive without one."""
    metadata = metadata_of(obj)
    # Interned: a cache holds a key per object, and these two are the same few strings.
    return ObjectKey(
        sys.intern(str(kind or obj.get("kind") or "")),
        sys.intern(str(metadata.get("namespace") or "")),
        str(metadata.get("name") or ""),
    )


class ObjectRef(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Which Kubernetes object: kind, namespace (absent when cluster-scoped) and name."""

    kind: Kind
    name: NonEmpty
    namespace: str | None = None

    def __str__(self) -> str:
        return subject_attribute(self.kind, self.namespace, self.name)


class CloudEvent(msgspec.Struct, Generic[D], frozen=True, kw_only=True, tag_field="type"):
    """The attributes every event carries; a subclass fixes ``type`` (its tag) and ``data``.

    ``type`` is the msgspec tag of the subclass, so decoding a union of event classes picks the
    class by the ``type`` attribute, and the JSON Schema of each class pins its ``type``.
    """

    specversion: Literal["1.0"] = "1.0"
    id: NonEmpty
    source: NonEmpty
    subject: NonEmpty
    time: Timestamp
    datacontenttype: Literal["application/json"] = "application/json"
    kind: Kind
    namespace: str | UnsetType | None = UNSET
    name: NonEmpty
    traceparent: TraceParent | UnsetType | None = UNSET
    tracestate: str | UnsetType | None = UNSET
    data: D

    @property
    def type(self) -> str:
        """The CloudEvents ``type`` attribute (the msgspec tag of this class)."""
        return event_type_of(type(self))

    @property
    def object_ref(self) -> ObjectRef:
        """The object this event is about, from the ``kind``/``namespace``/``name`` attributes."""
        return ObjectRef(kind=self.kind, namespace=self.namespace or None, name=self.name)
