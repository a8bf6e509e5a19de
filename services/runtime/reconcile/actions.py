"""What a planner returns: typed Kubernetes writes, in order, plus when to look again and why.

Planners are pure (``plan(observed, now) -> Plan``), so they cannot talk to the API server;
they describe each write completely instead, and the shell (:mod:`.executing`) carries it out.
The four actions are the four writes a controller needs:

:class:`Create`
    POST a complete object. AlreadyExists is not a failure: the shell reads the existing object
    into the cache and reconciles again, which is "treat it as existing" without a second code
    path in the planner.
:class:`Patch`
    A JSON merge patch (RFC 7386) of the object or of its ``status`` subresource. Put
    ``metadata.resourceVersion`` into the patch to make it conditional (optimistic
    concurrency): the API server answers 409 Conflict if the object changed since it was read,
    and ``on_conflict="refresh"`` turns that into a new plan on the fresh object.
:class:`Replace`
    A PUT of the whole object; its ``metadata.resourceVersion`` is the precondition.
:class:`Delete`
    With optional ``uid``/``resourceVersion`` preconditions, so a delete decided on one
    incarnation of an object never removes its successor.

Every action carries ``why``, one line for a person, which becomes the ``detail`` of the
action in the recorded decision, and may carry ``step``: the part of the reconcile it belongs
to (a :class:`Step` of the plan), which only tracing looks at.

:func:`merge_patch` computes the merge patch that turns one JSON document into another, the
way controller-runtime's ``client.MergeFrom`` does: changed and added fields as they are,
removed fields as ``null``, lists replaced whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from services.runtime.cache import Json, ObjectKey, key_of

__all__ = [
    "Action",
    "Create",
    "Delete",
    "Patch",
    "Plan",
    "Replace",
    "SpanEvent",
    "Step",
    "merge_patch",
    "target_of",
]

PropagationPolicy = Literal["Foreground", "Background", "Orphan"]
OnConflict = Literal["fail", "refresh"]
"""What a 409 Conflict of a conditional write means: a failure (retried with backoff), or
"someone else wrote first": read the object again and plan anew at once."""


@dataclass(frozen=True)
class Create:
    """POST ``body`` (with apiVersion, kind, metadata.name or generateName, namespace)."""

    body: Json
    why: str = ""
    step: str = ""


@dataclass(frozen=True)
class Patch:
    """A JSON merge patch of ``target``, or of its ``subresource`` (``"status"``)."""

    target: ObjectKey
    patch: Json
    subresource: Literal["status"] | None = None
    why: str = ""
    on_conflict: OnConflict = "fail"
    step: str = ""


@dataclass(frozen=True)
class Replace:
    """PUT ``body``; ``body.metadata.resourceVersion`` must be the version it was built from."""

    body: Json
    why: str = ""
    on_conflict: OnConflict = "fail"
    step: str = ""


@dataclass(frozen=True)
class Delete:
    target: ObjectKey
    uid: str | None = None
    resource_version: str | None = None
    propagation: PropagationPolicy | None = None
    why: str = ""
    step: str = ""


Action = Create | Patch | Replace | Delete


def target_of(action: Action) -> ObjectKey:
    if isinstance(action, Create | Replace):
        return key_of(action.body)
    return action.target


@dataclass(frozen=True)
class SpanEvent:
    """Something the planner observed, worth a span event when the reconcile is traced."""

    name: str
    attributes: Mapping[str, str]


@dataclass(frozen=True)
class Step:
    """A named part of a reconcile (upstream names them after its functions: ``reconcilePod``).

    Only tracing looks at steps: each becomes a child span of the reconcile's span, covering
    the actions whose ``step`` names it (a step without actions is an instant span: the planner
    looked and found nothing to write), and carrying ``events``.
    """

    name: str
    events: tuple[SpanEvent, ...] = ()


@dataclass(frozen=True)
class Plan:
    """The writes to make, in order, and what to do afterwards.

    The shell executes ``actions`` in order and stops at the first one that fails (a later
    write may depend on an earlier one: the pod after its PVCs). ``requeue_after`` asks for
    another reconcile of the key after that many seconds (0: as soon as possible, with the
    cache already holding the responses of these writes); None waits for the next event.
    ``error`` marks a problem the planner cannot resolve by itself (an object it may not
    adopt): the decision is recorded as failed and the key retried with backoff, as
    controller-runtime does with a returned error. ``steps`` name the parts of the reconcile
    for tracing (see :class:`Step`).
    """

    actions: tuple[Action, ...] = ()
    requeue_after: float | None = None
    reason: str = ""
    error: str | None = None
    steps: tuple[Step, ...] = ()


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> Json:
    """The JSON merge patch that turns ``old`` into ``new`` (empty when they are equal)."""
    patch: Json = {}
    for name in old.keys() - new.keys():
        patch[name] = None
    for name, value in new.items():
        before = old.get(name, _MISSING)
        if before == value:
            continue
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                patch[name] = nested
        else:
            patch[name] = _without_nulls(value)
    return patch


_MISSING: Any = object()


def _without_nulls(value: Any) -> Any:
    # In a merge patch a null means "delete"; a new object that holds a null field would
    # otherwise be read as "delete that field", so such fields are left out, as Kubernetes
    # leaves them out when it serialises an object.
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value
