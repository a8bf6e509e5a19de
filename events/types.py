"""The event types of the bus: what each ``type`` means and what its ``data`` holds.

Names follow ``io.sandbus.<noun>.<verb>.v<N>``:

``io.sandbus.object.added.v1`` / ``.modified.v1`` / ``.deleted.v1``
    The watcher observed a change of a Kubernetes object. ``data.object`` is the object as
    observed (``metadata.managedFields`` stripped: it is large and says nothing a subscriber
    acts on; and a Sandbox's Pod carries of its ``spec`` only ``nodeName``, since the rest is
    its template's and no worker reads it there); for a deletion it is the last state.
    ``data.synthetic`` is true when the watcher inferred the change instead of seeing it, which
    today means one thing: the object vanished while the watcher was not watching, and a
    relist found it gone. A synthetic deletion
    carries the last state the watcher published, so its id ends in that resourceVersion.
``io.sandbus.decision.made.v1``
    A worker reconciled one object: what woke it (``triggers``, event ids), the digest of the
    inputs its pure planner saw, the actions it took and how each went, why (``reason``), and
    the ``outcome``. ``sandbus explain`` interleaves these with the object's changes.
``io.sandbus.warm.queued.v1``
    An adoptable sandbox entered a warm queue. The entry is a hint, never the truth: whoever
    takes it re-reads the object and checks ``uid`` before adopting.

Every data struct uses Kubernetes' camelCase on the wire, and every field added after v1 must
have a default (msgspec's schema-evolution rule), so an old subscriber keeps decoding new
events and a new subscriber keeps decoding old ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Final

import msgspec

from events.envelope import (
    WATCHER_SOURCE,
    CloudEvent,
    Kind,
    NonEmpty,
    ObjectRef,
    event_type_of,
    subject_attribute,
    worker_source,
)
from events.ids import ChangeKind, change_event_id, decision_event_id

__all__ = [
    "EVENT_CLASSES",
    "OBJECT_EVENT_CLASSES",
    "Decision",
    "DecisionAction",
    "DecisionInputs",
    "DecisionMade",
    "DecisionMessage",
    "Event",
    "ObjectAdded",
    "ObjectChange",
    "ObjectDeleted",
    "ObjectEvent",
    "ObjectModified",
    "ObservedObjectError",
    "ObservedVersion",
    "Outcome",
    "WarmEntry",
    "WarmQueued",
    "decision_event",
    "observed_event",
    "strip_managed_fields",
    "warm_queued_event",
]


# --- observed changes --------------------------------------------------------------------

OBJECT_REQUIRED_FIELDS: Final = ("apiVersion", "kind", "metadata")
METADATA_REQUIRED_FIELDS: Final = ("name", "uid", "resourceVersion")

KubeObject = Annotated[
    dict[str, Any],
    msgspec.Meta(
        description=(
            "The Kubernetes object as observed, without metadata.managedFields (a Sandbox's "
            "Pod: with only spec.nodeName of its spec). Only the "
            "identity fields are constrained; the rest is the kind's own schema."
        ),
        extra_json_schema={
            "required": list(OBJECT_REQUIRED_FIELDS),
            "properties": {
                "apiVersion": {"type": "string", "minLength": 1},
                "kind": {"type": "string", "minLength": 1},
                "metadata": {
                    "type": "object",
                    "required": list(METADATA_REQUIRED_FIELDS),
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "namespace": {"type": "string"},
                        "uid": {"type": "string", "minLength": 1},
                        "resourceVersion": {"type": "string", "minLength": 1},
                    },
                },
            },
        },
    ),
]


class ObjectChange(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``data`` of the three observed-change types."""

    object: KubeObject
    synthetic: Annotated[
        bool,
        msgspec.Meta(
            description=(
                "True when the watcher inferred this change (a deletion found by a relist) "
                "instead of receiving it from a watch."
            )
        ),
    ] = False


class ObjectAdded(CloudEvent[ObjectChange], frozen=True, tag="io.sandbus.object.added.v1"):
    """The watcher saw an object appear (a create, or an object first seen by a relist)."""


class ObjectModified(CloudEvent[ObjectChange], frozen=True, tag="io.sandbus.object.modified.v1"):
    """The watcher saw a new resourceVersion of an object it had seen before."""


class ObjectDeleted(CloudEvent[ObjectChange], frozen=True, tag="io.sandbus.object.deleted.v1"):
    """The object is gone; ``data.object`` is its last state."""


ObjectEvent = ObjectAdded | ObjectModified | ObjectDeleted

OBJECT_EVENT_CLASSES: Final[Mapping[ChangeKind, type[ObjectEvent]]] = {
    "added": ObjectAdded,
    "modified": ObjectModified,
    "deleted": ObjectDeleted,
}


class ObservedObjectError(ValueError):
    """An object that lacks what an event needs (kind, metadata.name, uid, resourceVersion)."""


def strip_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` without ``metadata.managedFields``; ``obj`` is left as it is."""
    stripped = dict(obj)
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping) and "managedFields" in metadata:
        stripped["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    return stripped


def _identity(obj: Mapping[str, Any]) -> tuple[str, str | None, str, str, str]:
    kind = obj.get("kind")
    metadata = obj.get("metadata")
    if not isinstance(kind, str) or not kind:
        raise ObservedObjectError("the object has no kind")
    if not isinstance(metadata, Mapping):
        raise ObservedObjectError(f"the {kind} has no metadata")
    values: dict[str, str] = {}
    for field in METADATA_REQUIRED_FIELDS:
        value = metadata.get(field)
        if not isinstance(value, str) or not value:
            raise ObservedObjectError(f"the {kind} has no metadata.{field}")
        values[field] = value
    namespace = metadata.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise ObservedObjectError(f"the {kind}'s metadata.namespace is not a string")
    return kind, namespace or None, values["name"], values["uid"], values["resourceVersion"]


def observed_event(
    change: ChangeKind,
    obj: Mapping[str, Any],
    *,
    time: datetime,
    synthetic: bool = False,
    traceparent: str | None = None,
    tracestate: str | None = None,
    source: str = WATCHER_SOURCE,
) -> ObjectEvent:
    """The event for one observed change of ``obj``, with its deterministic id.

    ``obj`` must carry ``kind`` (list items from some clients lack it: set it first),
    ``metadata.name``, ``metadata.uid`` and ``metadata.resourceVersion``.
    """
    kind, namespace, name, uid, resource_version = _identity(obj)
    cls = OBJECT_EVENT_CLASSES[change]
    return cls(
        id=change_event_id(uid, resource_version, change),
        source=source,
        subject=subject_attribute(kind, namespace, name),
        time=time,
        kind=kind,
        namespace=namespace if namespace else msgspec.UNSET,
        name=name,
        traceparent=traceparent if traceparent else msgspec.UNSET,
        tracestate=tracestate if tracestate else msgspec.UNSET,
        data=ObjectChange(object=strip_managed_fields(obj), synthetic=synthetic),
    )


# --- decisions ---------------------------------------------------------------------------


class Outcome:
    """The values of ``Decision.outcome``. A string, not an enum, so that a new outcome added
    later does not make old subscribers reject the event."""

    NOOP: Final = "noop"
    """Nothing to do: the observed state already matched the desired state."""
    APPLIED: Final = "applied"
    """Every action was executed successfully."""
    REQUEUED: Final = "requeued"
    """The worker will reconcile the key again (``requeueAfterSeconds``, or on the next event)."""
    FAILED: Final = "failed"
    """An action failed; ``error`` says why. The key is retried."""

    ALL: Final = (NOOP, APPLIED, REQUEUED, FAILED)


class DecisionAction(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One action a worker took: ``verb`` on ``target``, and how it went."""

    verb: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            description="What was done: create, update, patch, delete, enqueue, dequeue, ack…",
        ),
    ]
    target: ObjectRef
    detail: str = ""
    error: Annotated[
        str | None, msgspec.Meta(description="Why the action failed; absent when it succeeded.")
    ] = None


class ObservedVersion(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"
):
    """One object a planner's inputs were made of, by reference: which version it read.

    ``resourceVersion`` is absent when the planner looked the object up and found nothing. The
    object itself is on the event log (``sandbus.events.<kind>.<namespace>.<name>``, the event
    whose object has this resourceVersion), which is where a re-run reads it back."""

    kind: Kind
    name: NonEmpty
    namespace: str | None = None
    resource_version: str | None = None
    uid: str | None = None


class DecisionMessage(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A message of a further input source (a warm-queue entry) that a reconcile consumed."""

    source: str = ""
    token: str = ""
    """Unique within the source (its stream sequence): what the plan acked."""
    subject: str = ""
    data: Any = None
    delivered: Annotated[int, msgspec.Meta(ge=1)] = 1


class DecisionInputs(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """What a planner was given, small enough to record every time: the objects it read by
    reference, plus everything that is not an object (the worker's memo of the key, the
    previous pass's error, consumed messages). With the decision's ``time`` as ``now`` that is
    enough to call the planner again (``sandbus explain --rerun``)."""

    observed: tuple[ObservedVersion, ...] = ()
    memo: Any = None
    expectations: Any = None
    last_error: str | None = None
    failure_persists: bool = False
    """The key's passes had failed in a row for the worker's ``report_failures_after``."""
    messages: tuple[DecisionMessage, ...] = ()


class Decision(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``data`` of ``io.sandbus.decision.made.v1``: one reconcile of one key by one worker."""

    worker: NonEmpty
    key: ObjectRef
    inputs_digest: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            description=(
                "sha256 of the pass's inputs by reference (data.inputs) and its time"
                " (events.ids.inputs_digest)."
            ),
        ),
    ]
    outcome: Annotated[
        str,
        msgspec.Meta(
            min_length=1, description="noop | applied | requeued | failed (more may be added)."
        ),
    ]
    triggers: Annotated[
        tuple[str, ...], msgspec.Meta(description="Ids of the events that woke this reconcile.")
    ] = ()
    actions: tuple[DecisionAction, ...] = ()
    reason: str = ""
    error: str | None = None
    requeue_after_seconds: Annotated[float, msgspec.Meta(ge=0)] | None = None
    inputs: DecisionInputs | None = None
    plan_digest: Annotated[
        str,
        msgspec.Meta(
            description="sha256 of what the plan decided (actions, requeue, error, memo), "
            "without its prose; a re-run compares against it."
        ),
    ] = ""


class DecisionMade(CloudEvent[Decision], frozen=True, tag="io.sandbus.decision.made.v1"):
    """A worker's decision about one object; the attributes name that object."""


def decision_event(
    decision: Decision,
    *,
    time: datetime,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> DecisionMade:
    """The event that records ``decision``, with an id derived from its inputs."""
    key = decision.key
    return DecisionMade(
        id=decision_event_id(
            decision.worker, key.kind, key.namespace, key.name, decision.inputs_digest
        ),
        source=worker_source(decision.worker),
        subject=str(key),
        time=time,
        kind=key.kind,
        namespace=key.namespace if key.namespace else msgspec.UNSET,
        name=key.name,
        traceparent=traceparent if traceparent else msgspec.UNSET,
        tracestate=tracestate if tracestate else msgspec.UNSET,
        data=decision,
    )


# --- warm queues -------------------------------------------------------------------------


class WarmEntry(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``data`` of a warm-queue entry: which incarnation of the sandbox was adoptable."""

    uid: NonEmpty
    resource_version: NonEmpty
    template_hash: NonEmpty
    pool: Annotated[
        str | None, msgspec.Meta(description="The warm pool that created the sandbox.")
    ] = None
    node: Annotated[
        str | None, msgspec.Meta(description="The node the sandbox runs on, when known.")
    ] = None


class WarmQueued(CloudEvent[WarmEntry], frozen=True, tag="io.sandbus.warm.queued.v1"):
    """An adoptable sandbox (or pooled Pod) entered the warm queue of its template."""


def warm_queued_event(
    kind: str,
    namespace: str,
    name: str,
    entry: WarmEntry,
    *,
    time: datetime,
    source: str,
    traceparent: str | None = None,
) -> WarmQueued:
    """The warm-queue entry for one adoptable object.

    Its id is ``<uid>:<resourceVersion>:queued``, but it is *not* published with a
    ``Nats-Msg-Id``: the warm stream already refuses a second entry per subject, and a dedup
    id would silently drop a legitimate re-enqueue within the duplicate window.
    """
    return WarmQueued(
        id=f"{entry.uid}:{entry.resource_version}:queued",
        source=source,
        subject=subject_attribute(kind, namespace, name),
        time=time,
        kind=kind,
        namespace=namespace if namespace else msgspec.UNSET,
        name=name,
        traceparent=traceparent if traceparent else msgspec.UNSET,
        data=entry,
    )


# --- the registry ------------------------------------------------------------------------

Event = ObjectAdded | ObjectModified | ObjectDeleted | DecisionMade | WarmQueued
"""Every event type this version of the contract knows."""

EVENT_CLASSES: Final[Mapping[str, type[Event]]] = {
    event_type_of(cls): cls
    for cls in (ObjectAdded, ObjectModified, ObjectDeleted, DecisionMade, WarmQueued)
}
"""``type`` attribute → event class."""
