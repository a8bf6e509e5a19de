"""Re-running a recorded decision through today's planner: does it still decide the same?

A worker records each decision with its inputs by reference (:class:`events.types.DecisionInputs`:
the resourceVersion of every object its observe read, plus the memo, expectations, messages and
previous error) and the digest of what the plan decided. Everything else is on the event log:
each referenced object is the event on its subject whose object has that resourceVersion. So a
decision can be made again, with the planner of the code that runs now:

1. rebuild a cache holding exactly the objects the decision read (:func:`rebuilt_cache`);
2. run the reconciler's ``observe`` on it and compare the digest of what it read (by
   reference, as the worker digests a pass) with the recorded one: equal means the inputs were
   rebuilt from the same objects at the same versions (a reference the log no longer holds, or
   a reconciler whose observe now reads other objects, shows here);
3. run ``plan`` with the decision's time as ``now`` and compare :func:`plan_digest` with the
   recorded one: equal is "same decision"; otherwise the re-run's actions are shown beside the
   recorded ones.

That is the debugging question "would this still happen with the fix?" answered from the log,
without a cluster. All of it is pure; :mod:`.commands` reads the log and prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from api.objects import Json, metadata_of
from events.envelope import ObjectKey
from events.ids import inputs_digest
from events.types import DecisionMade
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.actions import Plan, plan_digest
from services.runtime.reconcile.expectations import Expectations
from services.runtime.reconcile.recording import decision_inputs
from services.runtime.worker_api import Observed, WorkerDefinition

__all__ = ["Rerun", "VersionIndex", "rebuilt_cache", "rerun", "rerun_lines"]

VersionIndex = Mapping[ObjectKey, Mapping[str, Json]]
"""What the event log holds of the referenced objects: key → resourceVersion → object."""


@dataclass(frozen=True)
class Rerun:
    decision: DecisionMade
    same: bool
    inputs_rebuilt: bool
    missing: tuple[str, ...] = ()
    """References the event log no longer holds (or never held: an object no watcher sees)."""
    plan: Plan | None = None
    error: str | None = None
    """Why the decision could not be re-run at all."""


def _key(kind: str, namespace: str | None, name: str) -> ObjectKey:
    return ObjectKey(kind, namespace or "", name)


def rebuilt_cache(
    decision: DecisionMade, definition: WorkerDefinition, index: VersionIndex
) -> tuple[ObjectCache, tuple[str, ...]]:
    """A cache with the objects the decision read, and the references not found."""
    cache = ObjectCache(label_indexes=definition.label_indexes)
    missing: list[str] = []
    inputs = decision.data.inputs
    for ref in inputs.observed if inputs else ():
        if ref.resource_version is None:
            continue  # looked up and not there: an empty cache says the same
        key = _key(ref.kind, ref.namespace, ref.name)
        obj = index.get(key, {}).get(ref.resource_version)
        if obj is None:
            missing.append(f"{key}@{ref.resource_version}")
        else:
            cache.observe("added", obj, kind=key.kind)
    return cache, tuple(missing)


def rerun(decision: DecisionMade, definition: WorkerDefinition, index: VersionIndex) -> Rerun:
    data = decision.data
    key = _key(data.key.kind, data.key.namespace, data.key.name)
    reconciler = next((r for r in definition.reconcilers if r.kind == key.kind), None)
    if reconciler is None:
        return Rerun(decision, False, False, error=f"{definition.name} reconciles no {key.kind}")
    if data.inputs is None or not data.plan_digest:
        return Rerun(decision, False, False, error="recorded before decisions kept their inputs")
    cache, missing = rebuilt_cache(decision, definition, index)
    memo: Any = reconciler.memo_of(data.inputs.memo)
    expectations = (
        msgspec.convert(data.inputs.expectations, Expectations)
        if data.inputs.expectations
        else None
    )
    observed = Observed(
        cache=cache,
        last_error=data.inputs.last_error,
        failure_persists=data.inputs.failure_persists,
        memo=memo,
        expectations=expectations,
        messages=data.inputs.messages,
    )
    now: datetime = decision.time
    try:
        with cache.recording() as reads:
            inputs = reconciler.observe(key, observed)
        recorded = decision_inputs(observed, reads)
        rebuilt = inputs_digest({"inputs": recorded, "now": now}) == data.inputs_digest
        plan = reconciler.plan(inputs, now)
    except Exception as error:
        return Rerun(decision, False, False, missing, error=f"the planner raised {error!r}")
    return Rerun(decision, plan_digest(plan) == data.plan_digest, rebuilt, missing, plan)


def rerun_lines(results: Iterable[Rerun]) -> list[str]:
    """One block per re-run decision, for a person."""
    lines: list[str] = []
    for result in results:
        data = result.decision.data
        when = result.decision.time.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        head = f"{when}  {data.worker} decision ({data.outcome})"
        if result.error is not None:
            lines.append(f"{head}: cannot re-run: {result.error}")
            continue
        verdict = "same decision" if result.same else "DIFFERENT decision"
        lines.append(f"{head}: {verdict}")
        if not result.inputs_rebuilt:
            lines.append("    note: the rebuilt inputs differ from the recorded ones")
        for reference in result.missing:
            lines.append(f"    note: {reference} is not on the event log")
        if result.same or result.plan is None:
            continue
        recorded = [f"{a.verb} {a.target}" for a in data.actions] or ["nothing"]
        again = [_describe(action) for action in result.plan.actions] or ["nothing"]
        lines.append(f"    recorded: {'; '.join(recorded)}; requeue {data.requeue_after_seconds}")
        lines.append(f"    now:      {'; '.join(again)}; requeue {result.plan.requeue_after}")
        if result.plan.reason:
            lines.append(f"    because:  {result.plan.reason}")
    return lines


def _describe(action: Any) -> str:
    target = action.target
    name = target.name or str(metadata_of(getattr(action, "body", {}) or {}).get("generateName"))
    return f"{action.verb} {ObjectKey(target.kind, target.namespace, name)}"
