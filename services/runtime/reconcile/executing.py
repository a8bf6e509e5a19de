"""Carrying out a plan: each action through the executor registered for its type.

A worker's executors are a mapping from action type to an async function
``(action, context) -> Executed``; the runtime brings those of its own actions
(:data:`RUNTIME_EXECUTORS`, and the worker's ``Ack`` and ``Release``) and a worker adds
its own kinds (:class:`~.definition.WorkerDefinition`). An action whose
type has no executor fails the pass with that said: an unknown action is an error, never
guessed at.

An executor returns :class:`Executed` (what the action turned out to touch, a note, and
whether the plan must stop because it was made on stale state) or raises. Whatever it raises
(:class:`~services.runtime.kube.KubeError` from the API server, a JetStream error, a
bug) is a failed action: recorded with the error, the plan stops there, and the worker backs
the key off. Only a cancellation passes through.

The answers of the Kubernetes API a controller must tell apart, and what each does here:

- Success: the object the API server returned goes into the cache (read-your-writes), so the
  next reconcile of any key sees our write even before the watcher's event arrives.
- Create → AlreadyExists: the existing object is read and cached, and the plan stops: it was
  made for a world without that object. The key is reconciled again at once (``stale``),
  which treats the object as existing.
- Patch/Replace → NotFound: the object is gone; cached as gone, the plan stops, reconcile
  again. Delete → NotFound: the goal is reached, so it counts as done and the plan goes on.
- Patch/Replace with a resourceVersion precondition → Conflict, when the action says
  ``on_conflict="refresh"``: someone else wrote first; the object is read again into the cache
  and the key reconciled again at once, on the fresh state (client-go's RetryOnConflict, but
  through a new plan). Otherwise a Conflict is a failure like any other.
- Anything else (Invalid, a 5xx, the server unreachable or too slow): the action failed, the
  plan stops there, and the key is retried with backoff. The error is kept for the next
  reconcile of that key, whose planner may report it (a status condition).

A :class:`~services.runtime.reconcile.actions.Together` group runs its actions at the same
time; each has its own outcome, and the plan stops after the group if any of them failed.

``may_act`` is asked before every action: a replica that lost its Lease stops in the middle of
a plan rather than write as a leader it no longer is.

With a tracer, the actions of each step of the plan run inside that step's child span
(:class:`~.tracing.StepSpans`); a failed action marks its step's span as an error.

:func:`carry_out` is a pass's whole execution: the key's memory written ahead of the actions it
covers (the plan's memo and, for a reconciler that keeps them, the expectations of its creates
and deletes), the plan executed, then the expectations completed with what the answers taught
(the uids of created objects).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec
from nats.js import JetStreamContext
from opentelemetry.trace import Tracer

from api.objects import Json, metadata_of
from events.envelope import ObjectKey
from services.runtime.bus import BusConfig
from services.runtime.cache import ObjectCache
from services.runtime.kube import KubeApi, KubeError
from services.runtime.metrics import Metrics, MetricsError
from services.runtime.reconcile.actions import (
    Action,
    Create,
    Delete,
    Exec,
    Patch,
    Plan,
    Record,
    Refresh,
    Replace,
    Together,
    flattened,
)
from services.runtime.reconcile.expectations import Expectations, answered, expect
from services.runtime.reconcile.failures import describe_failure
from services.runtime.reconcile.tracing import StepSpans

if TYPE_CHECKING:
    from services.runtime.reconcile.sources import Delivery

__all__ = [
    "RUNTIME_EXECUTORS",
    "ActionFailed",
    "Executed",
    "Execution",
    "ExecutionContext",
    "Executor",
    "carry_out",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExecutionContext:
    """What an executor may use: the API server, the worker's cache, the bus."""

    api: KubeApi
    cache: ObjectCache
    js: JetStreamContext | None = None
    bus: BusConfig = field(default_factory=BusConfig)
    key: ObjectKey | None = None
    """The key being reconciled: the writer of what these actions write."""
    hold: Callable[[Delivery], None] | None = None
    """Hands a message taken for the key to the worker, which holds it until a plan acks it."""
    metrics: Metrics | None = None


@dataclass(frozen=True)
class Executed:
    target: ObjectKey | None = None
    """What the action turned out to touch, when the action could not say (generateName)."""
    note: str = ""
    stale: bool = False
    """The answer showed the plan was made on stale state: stop and plan again now."""


ALREADY_GONE = "already gone"
"""The note of a delete that found its object gone: the goal is reached."""


NOT_LEADING = "this replica does not lead any more"
"""Why a replica that lost its Lease neither acts nor writes its memory."""


class ActionFailed(Exception):
    """An executor's way to say "this action did not happen", with the reason."""


Executor = Callable[[Any, ExecutionContext], Awaitable[Executed]]


@dataclass(frozen=True)
class ActionOutcome:
    action: Action
    target: ObjectKey
    """For a create, the name the server gave (generateName)."""
    note: str = ""
    error: str | None = None
    uncertain: bool = False
    """A failure that may still have taken effect (no answer: the request timed out, the
    connection broke) rather than a refusal."""
    stale: bool = False


@dataclass(frozen=True)
class Execution:
    outcomes: tuple[ActionOutcome, ...] = ()
    error: str | None = None
    """The first failure; the actions after it were not attempted."""
    stale: bool = False
    """The answers showed the plan was made on stale state: reconcile again now."""

    @property
    def acted(self) -> bool:
        """Some action was carried out (a failed one does not count)."""
        return any(outcome.error is None for outcome in self.outcomes)


async def execute(
    plan: Plan,
    executors: Mapping[type, Executor],
    context: ExecutionContext,
    *,
    may_act: Callable[[], bool] = lambda: True,
    tracer: Tracer | None = None,
) -> Execution:
    steps = StepSpans(tracer, plan)
    try:
        return await _execute(plan, executors, context, may_act, steps)
    finally:
        steps.close()


async def _execute(
    plan: Plan,
    executors: Mapping[type, Executor],
    context: ExecutionContext,
    may_act: Callable[[], bool],
    steps: StepSpans,
) -> Execution:
    outcomes: list[ActionOutcome] = []
    for action in plan.actions:
        steps.enter(action.step)
        group = action.actions if isinstance(action, Together) else (action,)
        if len(group) == 1:
            # Most steps are one action: awaited here, without gather's task around it.
            done = [await _one(group[0], executors, context, may_act)]
        else:
            done = await asyncio.gather(*(_one(a, executors, context, may_act) for a in group))
        outcomes.extend(done)
        failed = next((outcome for outcome in done if outcome.error is not None), None)
        if failed is not None:
            failure = describe_failure(failed.action.verb, failed.target, str(failed.error))
            steps.failed(failure)
            return Execution(tuple(outcomes), error=failure)
        if any(outcome.stale for outcome in done):
            return Execution(tuple(outcomes), stale=True)
    return Execution(tuple(outcomes))


async def _one(
    action: Action,
    executors: Mapping[type, Executor],
    context: ExecutionContext,
    may_act: Callable[[], bool],
) -> ActionOutcome:
    target = action.target
    executor = executors.get(type(action))
    try:
        if executor is None:
            raise ActionFailed(f"no executor is registered for {type(action).__name__}")
        if not may_act():
            raise ActionFailed(NOT_LEADING)
        done = await executor(action, context)
    except asyncio.CancelledError:
        raise
    except Exception as error:
        text = str(error) or repr(error)
        refused = isinstance(error, ActionFailed) or (
            isinstance(error, KubeError) and error.status >= 400
        )
        return ActionOutcome(action, target, error=text, uncertain=not refused)
    return ActionOutcome(action, done.target or target, note=done.note, stale=done.stale)


Remember = Callable[[Any, Expectations | None], Awaitable[None]]
"""Writes the key's memory (memo as JSON builtins, expectations); raises when the bus did not
take it."""


async def carry_out(
    plan: Plan,
    executors: Mapping[type, Executor],
    context: ExecutionContext,
    *,
    remember: Remember,
    expectations: Expectations | None,
    expects: bool,
    now: datetime,
    may_act: Callable[[], bool] = lambda: True,
    tracer: Tracer | None = None,
) -> Execution:
    """Write the key's memory ahead of the actions it covers, execute, then record what the
    answers taught (see the module doc). ``expectations`` are the key's, as its observe got
    them; ``expects``: keep expectations of this plan's creates and deletes."""
    given = expectations
    if expects and context.key is not None:
        owner_uid = str(metadata_of(context.cache.get(context.key) or {}).get("uid") or "")
        if owner_uid:
            expectations = expect(expectations, owner_uid, flattened(plan.actions), now)
    memo = msgspec.to_builtins(plan.memo) if plan.memo is not None else None
    if not may_act():
        # A replica that no longer leads writes nothing, its memory included: the memory is
        # written ahead of actions it would not take, and a new leader may already read it
        # (found by the chaos soak: a pool member's "queued" memo, written by a replica that
        # had just lost its Lease, kept the new leader from ever queueing it).
        return Execution(error=NOT_LEADING)
    try:
        await remember(memo, expectations)
    except Exception as error:
        return Execution(error=f"keeping the memo of {context.key} on the bus: {error!r}")
    execution = await execute(plan, executors, context, may_act=may_act, tracer=tracer)
    if expectations is not None and expectations is not given:
        learned = answered(expectations, *_answers(plan, execution, context.cache))
        if learned != expectations:
            try:
                await remember(memo, learned)
            except Exception as error:
                # The next pass writes it again; meanwhile the names still match.
                log.warning("keeping the answers of %s: %r", context.key, error)
    return execution


def _answers(
    plan: Plan, execution: Execution, cache: ObjectCache
) -> tuple[list[Json], list[Json], list[str]]:
    """The objects our creates returned, the bodies of creates that surely did not happen
    (refused, or never attempted after an earlier failure), and the uids of the deletes that
    are settled: the object was already gone, or the delete surely did not happen (refused,
    a precondition among the reasons, or never attempted). Expecting those to show on the bus
    would count a member as terminating for the whole ttl while it stays, as controller-runtime
    lowers an expectation when its delete fails."""
    created: list[Json] = []
    refused: list[Json] = []
    settled: list[str] = []
    done = {id(outcome.action): outcome for outcome in execution.outcomes}
    for action in flattened(plan.actions):
        outcome = done.get(id(action))
        if isinstance(action, Delete):
            if action.uid and (
                outcome is None
                or outcome.note == ALREADY_GONE
                or (outcome.error is not None and not outcome.uncertain)
            ):
                settled.append(action.uid)
            continue
        if not isinstance(action, Create):
            continue
        if outcome is None:
            refused.append(action.body)
        elif outcome.error is None:
            obj = cache.get(outcome.target)
            if obj is not None:
                created.append(obj)
        elif not outcome.uncertain:
            refused.append(action.body)
    return created, refused, settled


# -- the Kubernetes writes ------------------------------------------------------------------


async def _create(action: Create, context: ExecutionContext) -> Executed:
    try:
        created = await context.api.create(action.body)
    except KubeError as error:
        if not error.already_exists:
            raise
        context.cache.remember(await context.api.get(action.target))
        return Executed(note="already exists", stale=True)
    context.cache.remember(created, writer=context.key)
    name = str(metadata_of(created).get("name") or action.target.name)
    return Executed(target=action.target._replace(name=name))


async def _delete(action: Delete, context: ExecutionContext) -> Executed:
    target = action.target
    try:
        answer = await context.api.delete(
            target,
            uid=action.uid,
            resource_version=action.resource_version,
            propagation=action.propagation,
        )
    except KubeError as error:
        if not error.not_found:
            raise
        context.cache.remember_gone(target)
        return Executed(note=ALREADY_GONE)
    if answer.get("kind") == target.kind and metadata_of(answer).get("deletionTimestamp"):
        context.cache.remember(answer, writer=context.key)
        return Executed(note="terminating")
    context.cache.remember_gone(target)
    return Executed()


async def _update(action: Patch | Replace, context: ExecutionContext) -> Executed:
    target = action.target
    try:
        if isinstance(action, Patch):
            body = _conditional(action, context) if action.conditional else action.patch
            written = await context.api.patch(target, body, subresource=action.subresource)
        else:
            written = await context.api.replace(action.body)
    except KubeError as error:
        if error.not_found:
            context.cache.remember_gone(target)
            return Executed(note="gone", stale=True)
        if error.conflict and action.on_conflict == "refresh":
            context.cache.remember(await context.api.get(target))
            return Executed(note="changed meanwhile; read again", stale=True)
        raise
    context.cache.remember(written, writer=context.key)
    return Executed()


def _conditional(action: Patch, context: ExecutionContext) -> Json:
    known = context.cache.get(action.target)
    version = metadata_of(known).get("resourceVersion") if known is not None else None
    if not version:
        raise ActionFailed(f"no known version of {action.target} to make the patch conditional on")
    metadata = {**(action.patch.get("metadata") or {}), "resourceVersion": str(version)}
    return {**action.patch, "metadata": metadata}


async def _refresh(action: Refresh, context: ExecutionContext) -> Executed:
    try:
        found = await context.api.get(action.target)
    except KubeError as error:
        if not error.not_found:
            raise
        context.cache.remember_gone(action.target)
        return Executed(note="not found", stale=True)
    context.cache.remember(found)
    return Executed(note=f"at {metadata_of(found).get('resourceVersion')}", stale=True)


async def _exec(action: Exec, context: ExecutionContext) -> Executed:
    target = action.target
    try:
        result = await context.api.exec(
            target.namespace, target.name, action.container, action.command
        )
    except KubeError as error:
        return Executed(note=f"exec in {action.container} refused: {error}")
    if result.succeeded:
        return Executed(note=f"exec in {action.container}: exit 0")
    ended = f"exit {result.exit_code}" if result.exit_code is not None else result.message
    return Executed(note=f"exec in {action.container}: {ended}")


async def _record(action: Record, context: ExecutionContext) -> Executed:
    if context.metrics is None:
        return Executed(note="no metrics here")
    try:
        value = action.value
        if action.since is not None:
            passed = (datetime.now(UTC) - action.since).total_seconds()
            if passed < 0:
                return Executed(note=f"{action.metric}: the start is in the future; not recorded")
            value = passed * context.metrics.spec(action.metric).per_second
        context.metrics.record(action.metric, action.labels, value)
    except MetricsError as error:
        raise ActionFailed(str(error)) from error
    return Executed(note=f"recorded {value:g} on {action.metric}")


RUNTIME_EXECUTORS: Mapping[type, Executor] = {
    Create: _create,
    Patch: _update,
    Replace: _update,
    Delete: _delete,
    Refresh: _refresh,
    Record: _record,
    Exec: _exec,
}
"""The executors of the Kubernetes writes, ``Refresh``, ``Record`` and ``Exec``; the worker adds
``Ack`` and its own kinds."""
