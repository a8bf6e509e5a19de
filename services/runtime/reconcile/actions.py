"""What a planner returns: typed actions, in order, plus when to look again, why, and a memo.

Planners are pure (``plan(observed, now) -> Plan``), so they cannot talk to the API server or
the bus; they describe each action completely instead, and the shell (:mod:`.executing`)
carries it out through the executor registered for the action's type. An action is any frozen
dataclass with the :class:`Action` shape (``verb``, ``target``, ``why``, ``step``); a worker
registers its own kinds with their executors in its
:class:`~.definition.WorkerDefinition` (the warm queues' kinds are agent-sandbox rules, in
``services/domain/agentsandbox/warmqueue.py``), and an action whose type has no
executor fails the pass instead of being guessed at.

The runtime executes these kinds itself, and one grouping. Four are the writes a controller
needs:

:class:`Create`
    POST a complete object. AlreadyExists is not a failure: the shell reads the existing object
    into the cache and reconciles again, which is "treat it as existing" without a second code
    path in the planner.
:class:`Patch`
    A JSON merge patch (RFC 7386) of the object or of its ``status`` subresource. Put
    ``metadata.resourceVersion`` into the patch to make it conditional (optimistic
    concurrency): the API server answers 409 Conflict if the object changed since it was read,
    and ``on_conflict="refresh"`` turns that into a new plan on the fresh object. With
    ``conditional=True`` the shell puts in the version the worker knows when the patch runs:
    after an earlier write of the same plan to that object, that write's answer.
:class:`Replace`
    A PUT of the whole object; its ``metadata.resourceVersion`` is the precondition.
:class:`Delete`
    With optional ``uid``/``resourceVersion`` preconditions, so a delete decided on one
    incarnation of an object never removes its successor.

:class:`Together` groups actions that run at the same time (the creates of a slow-start
batch); the plan goes on after the group only if all of them succeeded.

:class:`Release` gives a message taken for a key back at once; :class:`Refresh` reads one
object from the API server instead of trusting the bus's view of it, and ends the plan, so the
key is planned again at once on what it learned.

:class:`Record` counts or observes a metric once the writes before it are committed, and
:class:`Exec` runs a command in a Pod's container.

The last, :class:`Ack`, acknowledges a message that a further input source (a warm-queue pull
consumer) delivered into this reconcile. Put it last: the shell stops at the first failed
action, so a message is acked only once every write before it is committed
(ack-after-commit), and a worker that dies before that leaves the message to be redelivered.

Every action carries ``why``, one line for a person, which becomes the ``detail`` of the
action in the recorded decision, and may carry ``step``: the part of the reconcile it belongs
to (a :class:`Step` of the plan), which only tracing looks at.

A plan may return a ``memo``: per-key memory the worker keeps (on the bus, so a restart finds
it) and hands to the next observe of the same key (a write-behind clock, "waiting since").

:func:`merge_patch` computes the merge patch that turns one JSON document into another, the
way controller-runtime's ``client.MergeFrom`` does: changed and added fields as they are,
removed fields as ``null``, lists replaced whole. :func:`plan_digest` names what a plan
decides, for comparing a re-run with the recorded decision.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal, Protocol

import msgspec

from api.objects import Json
from events.envelope import ObjectKey, key_of

__all__ = [
    "Ack",
    "Action",
    "Create",
    "Delete",
    "Exec",
    "Patch",
    "Plan",
    "Record",
    "Refresh",
    "Release",
    "Replace",
    "SpanEvent",
    "Step",
    "Together",
    "flattened",
    "plan_digest",
]

PropagationPolicy = Literal["Foreground", "Background", "Orphan"]
OnConflict = Literal["fail", "refresh"]
"""What a 409 Conflict of a conditional write means: a failure (retried with backoff), or
"someone else wrote first": read the object again and plan anew at once."""


class Action(Protocol):
    """The shape of every action: a dataclass saying what it does to which object, and why."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def verb(self) -> str: ...

    @property
    def target(self) -> ObjectKey: ...

    @property
    def why(self) -> str: ...

    @property
    def step(self) -> str: ...


@dataclass(frozen=True)
class Create:
    """POST ``body`` (with apiVersion, kind, metadata.name or generateName, namespace)."""

    body: Json
    why: str = ""
    step: str = ""
    verb = "create"

    @property
    def target(self) -> ObjectKey:
        return key_of(self.body)


@dataclass(frozen=True)
class Patch:
    """A JSON merge patch of ``target``, or of its ``subresource`` (``"status"``)."""

    target: ObjectKey
    patch: Json
    subresource: Literal["status"] | None = None
    why: str = ""
    on_conflict: OnConflict = "fail"
    step: str = ""
    conditional: bool = False
    """Make the patch conditional on the version of ``target`` the worker knows when it runs."""

    @property
    def verb(self) -> str:
        return "patch status" if self.subresource == "status" else "patch"


@dataclass(frozen=True)
class Replace:
    """PUT ``body``; ``body.metadata.resourceVersion`` must be the version it was built from."""

    body: Json
    why: str = ""
    on_conflict: OnConflict = "fail"
    step: str = ""
    verb = "update"

    @property
    def target(self) -> ObjectKey:
        return key_of(self.body)


@dataclass(frozen=True)
class Delete:
    target: ObjectKey
    uid: str | None = None
    resource_version: str | None = None
    propagation: PropagationPolicy | None = None
    why: str = ""
    step: str = ""
    verb = "delete"


@dataclass(frozen=True)
class Ack:
    """Acknowledge message ``token`` of input source ``source``: it is done with for good.

    ``target`` is the key whose reconcile consumed it (the decision's subject)."""

    source: str
    token: str
    target: ObjectKey
    why: str = ""
    step: str = ""
    verb = "ack"


@dataclass(frozen=True)
class Release:
    """Give message ``token`` of ``source``, held for ``target``, back to its queue now (a warm
    entry this key will not use: another consumer may take it at once)."""

    source: str
    token: str
    target: ObjectKey
    why: str = ""
    step: str = ""
    verb = "release"


@dataclass(frozen=True)
class Refresh:
    """Read ``target`` from the API server into the cache, then plan again: the bus's view of it
    may lag (a queued sandbox the worker has not seen yet) and the decision must not."""

    target: ObjectKey
    why: str = ""
    step: str = ""
    verb = "read"


@dataclass(frozen=True)
class Exec:
    """Run ``command`` in ``container`` of the Pod ``target`` through the ``pods/exec``
    subresource. Its outcome, a non-zero exit or an exec the API refused, is the action's note,
    not a failure: the plan that asks for it (a restart recycle) judges by what the Pod shows
    afterwards, as upstream only logs exec errors."""

    target: ObjectKey
    container: str
    command: tuple[str, ...]
    why: str = ""
    step: str = ""
    verb = "exec"


@dataclass(frozen=True)
class Record:
    """Count ``value`` on the metric ``metric`` (a counter), or observe it (a histogram), under
    ``labels`` (see :mod:`services.runtime.metrics`). With ``since``, the value is the time
    from that moment to when the action runs, in the metric's unit (a moment in the future
    records nothing). Put it after the writes it reports: the shell stops at the first write
    that fails or conflicts, so it is recorded only for what was committed."""

    metric: str
    labels: Mapping[str, str]
    target: ObjectKey
    value: float = 1.0
    since: datetime | None = None
    why: str = ""
    step: str = ""
    verb = "record"


@dataclass(frozen=True)
class Together:
    """Actions carried out at the same time (upstream's slow-start batches: creates in
    parallel). The plan goes on after the group only if every action in it succeeded."""

    actions: tuple[Action, ...]
    why: str = ""
    step: str = ""
    verb = "together"

    @property
    def target(self) -> ObjectKey:
        return self.actions[0].target


def flattened(actions: tuple[Action, ...]) -> list[Action]:
    """The actions with every :class:`Together` group replaced by its members, in order."""
    out: list[Action] = []
    for action in actions:
        if isinstance(action, Together):
            out.extend(flattened(action.actions))
        else:
            out.append(action)
    return out


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
    """The actions to take, in order, and what to do afterwards.

    The shell executes ``actions`` in order and stops at the first one that fails (a later
    write may depend on an earlier one: the pod after its PVCs). ``requeue_after`` asks for
    another reconcile of the key after that many seconds (0: as soon as possible, with the
    cache already holding the responses of these writes); None waits for the next event.
    ``error`` marks a problem the planner cannot resolve by itself (an object it may not
    adopt): the decision is recorded as failed and the key retried with backoff, as
    controller-runtime does with a returned error. ``steps`` name the parts of the reconcile
    for tracing (see :class:`Step`). ``memo`` is what the worker keeps for this key and hands
    to the next observe (None: nothing); it must encode with msgspec.
    """

    actions: tuple[Action, ...] = ()
    requeue_after: float | None = None
    reason: str = ""
    error: str | None = None
    steps: tuple[Step, ...] = ()
    memo: Any = None


def plan_digest(plan: Plan) -> str:
    """``sha256:<hex>`` of what ``plan`` decides: each action's type and fields, the requeue,
    the error and the memo. Prose (``why``, ``reason``) and tracing (``step``, ``steps``) are
    left out: a re-run that words its reasons differently still decides the same."""
    decided = {
        "actions": [_decided(action) for action in plan.actions],
        "requeueAfter": plan.requeue_after,
        "error": plan.error,
        "memo": plan.memo,
    }
    canonical = msgspec.json.encode(decided, order="sorted")
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def _decided(action: Action) -> dict[str, Any]:
    if isinstance(action, Together):
        return {"type": "Together", "actions": [_decided(a) for a in action.actions]}
    decided: dict[str, Any] = {"type": type(action).__name__}
    for name in _decided_fields(type(action)):
        decided[name] = getattr(action, name)
    return decided


@functools.cache
def _decided_fields(kind: type) -> tuple[str, ...]:
    """The fields of an action type that say what it decides (every pass digests its plan)."""
    return tuple(
        field.name for field in dataclasses.fields(kind) if field.name not in ("why", "step")
    )
