"""Carrying out a plan: each action against the API server, each answer into the cache.

The answers a controller must tell apart, and what each does here:

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
- Anything else (Conflict from a precondition, Invalid, a 5xx, the server unreachable): the
  action failed, the plan stops there, and the key is retried with backoff. The error is kept
  for the next reconcile of that key, whose planner may report it (a status condition).

With a tracer, the actions of each step of the plan run inside that step's child span
(:class:`~.tracing.StepSpans`); a failed action marks its step's span as an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.trace import Tracer

from services.runtime.cache import ObjectCache, ObjectKey, metadata_of
from services.runtime.reconcile.actions import Action, Create, Delete, Patch, Plan, target_of
from services.runtime.reconcile.kube import KubeApi, KubeError
from services.runtime.reconcile.tracing import StepSpans

__all__ = ["ActionOutcome", "Execution", "execute", "verb_of"]


@dataclass(frozen=True)
class ActionOutcome:
    action: Action
    target: ObjectKey
    """For a create, the name the server gave (generateName)."""
    note: str = ""
    error: str | None = None


@dataclass(frozen=True)
class Execution:
    outcomes: tuple[ActionOutcome, ...] = ()
    error: str | None = None
    """The first failure; the actions after it were not attempted."""
    stale: bool = False
    """The API showed the plan was made on stale state: reconcile again now."""


def verb_of(action: Action) -> str:
    if isinstance(action, Create):
        return "create"
    if isinstance(action, Patch):
        return "patch status" if action.subresource == "status" else "patch"
    if isinstance(action, Delete):
        return "delete"
    return "update"


async def execute(
    plan: Plan, api: KubeApi, cache: ObjectCache, *, tracer: Tracer | None = None
) -> Execution:
    steps = StepSpans(tracer, plan)
    try:
        return await _execute(plan, api, cache, steps)
    finally:
        steps.close()


async def _execute(plan: Plan, api: KubeApi, cache: ObjectCache, steps: StepSpans) -> Execution:
    outcomes: list[ActionOutcome] = []
    for action in plan.actions:
        target = target_of(action)
        steps.enter(action.step)
        try:
            outcome, stop = await _execute_one(action, target, api, cache)
        except KubeError as error:
            outcomes.append(ActionOutcome(action, target, error=str(error)))
            failure = f"{verb_of(action)} {target}: {error}"
            steps.failed(failure)
            return Execution(tuple(outcomes), error=failure)
        outcomes.append(outcome)
        if stop:
            return Execution(tuple(outcomes), stale=True)
    return Execution(tuple(outcomes))


async def _execute_one(
    action: Action, target: ObjectKey, api: KubeApi, cache: ObjectCache
) -> tuple[ActionOutcome, bool]:
    """The outcome, and whether the plan must stop and be made again."""
    if isinstance(action, Create):
        try:
            created = await api.create(action.body)
        except KubeError as error:
            if not error.already_exists:
                raise
            cache.remember(await api.get(target))
            return ActionOutcome(action, target, note="already exists"), True
        cache.remember(created)
        name = str(metadata_of(created).get("name") or target.name)
        return ActionOutcome(action, target._replace(name=name)), False
    if isinstance(action, Delete):
        try:
            answer = await api.delete(
                target,
                uid=action.uid,
                resource_version=action.resource_version,
                propagation=action.propagation,
            )
        except KubeError as error:
            if not error.not_found:
                raise
            cache.remember_gone(target)
            return ActionOutcome(action, target, note="already gone"), False
        if answer.get("kind") == target.kind and metadata_of(answer).get("deletionTimestamp"):
            cache.remember(answer)
            return ActionOutcome(action, target, note="terminating"), False
        cache.remember_gone(target)
        return ActionOutcome(action, target), False
    try:
        if isinstance(action, Patch):
            written = await api.patch(target, action.patch, subresource=action.subresource)
        else:
            written = await api.replace(action.body)
    except KubeError as error:
        if error.not_found:
            cache.remember_gone(target)
            return ActionOutcome(action, target, note="gone"), True
        if error.conflict and action.on_conflict == "refresh":
            cache.remember(await api.get(target))
            return ActionOutcome(action, target, note="changed meanwhile; read again"), True
        raise
    cache.remember(written)
    return ActionOutcome(action, target), False
