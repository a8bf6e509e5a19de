"""``plan_pool``: one reconcile of one SandboxWarmPool, as a pure function (docs/agent-sandbox.md
§4.2, upstream ``reconcilePool``).

In upstream's order:

1. No pool, or one being deleted: nothing (its members go with it through their owner
   references; the runtime's expectations for it lapse).
2. The members: every Sandbox labelled ``agents.x-k8s.io/warm-pool-sandbox=<NameHash(pool)>``
   (``filterActiveSandboxes``):

   - being deleted → skipped; *terminating* if this pool controls it;
   - controlled by this pool and awaiting a delete of ours (expectations) → terminating;
   - controlled by someone else (a claim adopted it) → ignored;
   - stale (:mod:`.staleness`), checked only when the template is known and the strategy is
     ``Recreate`` or the member is an orphan → deleted (uid precondition), terminating;
   - ours but missing ``launch-type=warm`` → patched (resourceVersion precondition);
   - an orphan that is not stale → adopted: this pool becomes its controller
     (resourceVersion precondition, so two adopters cannot both win);
   - the rest are *active*.
3. Stuck members: an active member not Ready for longer than the readiness grace (counted
   from its creationTimestamp, or from its Pod's scheduling when that came later) is deleted,
   except:

   - its Pod is ``PodScheduled=False/Unschedulable``: held, and the pool is not progressing
     (below) and looks again after the recheck interval;
   - its Pod waits on ``spec.schedulingGates`` (``PodScheduled=False/SchedulingGated``): left
     alone, whatever its age, as upstream v1.0.7 does; someone else lifts the gate, and the
     grace starts again when the Pod is scheduled.

   Upstream reads the member's Pod for both; the pool reads the member's own ``PodScheduled``
   condition, which the sandbox worker copies from its Pod (status, reason, message), so the
   pool worker needs no Pod of a Sandbox at all: at six Pod changes a claim, that was most of
   what it decoded, and every pass of a pool read each member's Pod;
   - it is ``Ready=False/InvalidConfiguration`` (or ``InvalidSpec``, the reason's former name):
     a replacement from the same template would be just as invalid, so it is held, and the
     pool is not progressing; once the template changes (the member is stale, whatever the
     update strategy) it is deleted at once, and its replacement comes from the fixed template.

   Members still inside their grace bring the next pass forward to the earliest deadline (plus
   2 s).
4. Status (replicas, readyReplicas, selector, observedGeneration, conditions), merge-patched
   only when it changed; zero values are written as absent, as upstream's omitempty clears them.
5. Creates, when active + terminating < desired and the template exists: at most
   ``max_batch``, in slow-start batches of 1, 2, 4, … (:func:`slow_start`), each batch's creates
   at the same time, the plan stopping at the first batch that fails. Never while the runtime
   still expects creates or deletes of this pool to show on the bus (the expectations gate
   against a lagging view, upstream #1215), nor in a pass that deletes. Shaped, when
   configured, by a replenish hold and a refill token bucket (:func:`take_tokens`).
6. Excess deletes, when active > desired and nothing is expected: not-Ready first, then newest;
   each with a uid precondition, in slow-start batches.

A template that does not exist is not an error: no creates and no staleness checks, members
kept. Every pass says which of fill, replenish, rollout, stuck GC or scale-down it did.

A pool that cannot make progress says why (issues #29 and #32, docs/conditions.md §3): a
``Progressing`` condition with status ``False`` (the shape upstream's #1326 proposes) and a
reason, in order of precedence: ``TemplateNotFound`` (the template does not exist and members
are wanted: upstream #1572 reports it), ``FailedCreate`` (the API server refuses its Sandbox
creates: its own words, kept from the pass that met the refusal until a create goes through),
``InvalidConfiguration`` (its members made from the current template are invalid; one message
for the pool, the first such member's), and ``Unschedulable`` (members held unschedulable past
their grace). The condition is removed once
the cause is gone. Each appearance or change of reason is announced by a Warning Event of
upstream's reason ``WarmPoolNotProgressing``, its note ``<reason>: <message>``, written after the
status; its end by a Normal ``WarmPoolProgressing``. The memo remembers what was announced, so a
pass that runs before its own status write is back on the bus announces nothing twice.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from msgspec.structs import replace

from api.agents import EXTENSIONS_GROUP, REASON_INVALID_CONFIGURATION, VERSION
from api.keys import LABEL_LAUNCH_TYPE, LAUNCH_TYPE_WARM
from api.objects import Json, condition_of, controller_of, is_ready, labels_of, metadata_of
from events.envelope import ObjectKey, key_of
from services.domain.agentsandbox.blueprint import pool_sandbox
from services.domain.agentsandbox.staleness import is_stale
from services.domain.agentsandbox.warmpool import pool_selector
from services.pool.core.observation import PoolMemo, PoolObservation, PoolSettings
from services.runtime.kube_events import event_about
from services.runtime.reconcile.actions import Action, Create, Delete, Patch, Plan, Together
from services.runtime.reconcile.failures import reportable
from services.runtime.times import parse_time

__all__ = [
    "CONDITION_PROGRESSING",
    "CONTROLLER_NAME",
    "EXPECTATIONS_RECHECK",
    "GRACE_SLACK",
    "member_name",
    "plan_pool",
    "slow_start",
    "take_tokens",
]

CONTROLLER_NAME = "sandboxwarmpool-controller"
GRACE_SLACK = 2.0
"""Seconds after a member's grace deadline that the pool looks again."""
EXPECTATIONS_RECHECK = 30.0
"""Seconds to look again while waiting for the bus to show our own writes (they also wake the
pool as they arrive; this bounds a wait for one that never comes)."""
CONDITION_PROGRESSING = "Progressing"
"""The pool's condition while it cannot make progress (status False); absent otherwise."""
_INVALID_REASONS = frozenset({REASON_INVALID_CONFIGURATION, "InvalidSpec"})
"""A member's Ready=False reasons for a spec its controller cannot act on (``InvalidSpec``: the
reason's name in earlier versions of sandbus)."""


def slow_start(count: int) -> list[int]:
    """Batch sizes 1, 2, 4, … adding up to ``count`` (upstream ``slowStartBatch``)."""
    sizes: list[int] = []
    size = 1
    while count > 0:
        sizes.append(min(size, count))
        count -= sizes[-1]
        size *= 2
    return sizes


def _batched(actions: list[Action]) -> list[Action]:
    out: list[Action] = []
    start = 0
    for size in slow_start(len(actions)):
        group = tuple(actions[start : start + size])
        start += size
        out.append(group[0] if size == 1 else Together(group, why=f"a batch of {size}"))
    return out


def take_tokens(
    memo: PoolMemo, rate: float, wanted: int, now: datetime
) -> tuple[int, PoolMemo, float | None]:
    """From the refill bucket (``rate`` creates a second, holding at most one second's worth,
    full when new): how many of ``wanted`` creates may go now, the bucket after, and in how
    many seconds the next token comes (None: no wait)."""
    if rate <= 0 or wanted <= 0:
        return wanted, memo, None
    capacity = max(rate, 1.0)
    tokens = capacity if memo.tokens is None or memo.tokens_at is None else memo.tokens
    if memo.tokens_at is not None:
        elapsed = max((now - memo.tokens_at).total_seconds(), 0.0)
        tokens = min(capacity, tokens + elapsed * rate)
    granted = min(wanted, math.floor(tokens))
    left = tokens - granted
    wait = None if granted == wanted else max((1.0 - (left % 1.0)) / rate, 0.001)
    return granted, replace(memo, tokens=left, tokens_at=now), wait


@dataclass
class _Members:
    active: list[Json]
    terminating: int
    writes: list[Action]
    deletes: list[Action]
    reasons: list[str]

    def replace(self, member: Json, *, why: str, reason: str) -> None:
        """Delete an active ``member`` (its uid as the precondition): a new one takes its
        place; ``reason`` goes into the pass's reasons."""
        self.active.remove(member)
        self.deletes.append(delete_member(member, why))
        self.terminating += 1
        self.reasons.append(reason)


def delete_member(member: Json, why: str) -> Delete:
    """Delete ``member`` as the pool saw it: its uid and resourceVersion are the preconditions.
    A claim may have adopted it since (the adoption patch moves its resourceVersion): then the
    API refuses the delete (409), and the next pass sees it is no member any more, instead of
    taking a Sandbox from under its claim."""
    meta = metadata_of(member)
    return Delete(
        key_of(member, "Sandbox"),
        uid=str(meta.get("uid")),
        resource_version=str(meta.get("resourceVersion") or "") or None,
        why=why,
    )


def _created(obj: Mapping[str, Any]) -> datetime | None:
    stamp = metadata_of(obj).get("creationTimestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def _pod_scheduled(member: Json) -> Mapping[str, Any]:
    """The member's ``PodScheduled`` condition, its Pod's as the sandbox worker copied it ({}:
    no Pod, or none yet)."""
    return condition_of(member, "PodScheduled") or {}


def _waiting_to_schedule(member: Json, reason: str) -> bool:
    scheduled = _pod_scheduled(member)
    return scheduled.get("status") == "False" and scheduled.get("reason") == reason


def _grace_from(member: Json) -> datetime | None:
    """When a member's readiness grace starts: its creation, or its Pod's scheduling when that
    came later (a Pod that waited on scheduling gates gets its whole grace once let go)."""
    created = _created(member)
    scheduled = _pod_scheduled(member)
    if created is None or scheduled.get("status") != "True":
        return created
    at = parse_time(scheduled.get("lastTransitionTime"))
    return max(created, at) if at is not None and at.tzinfo is not None else created


def _invalid(member: Json) -> str | None:
    """The message of a member's ``Ready=False/InvalidConfiguration`` (None: not invalid)."""
    ready = condition_of(member, "Ready") or {}
    if ready.get("status") == "False" and ready.get("reason") in _INVALID_REASONS:
        return str(ready.get("message") or "its spec cannot be acted on")
    return None


def _owner_ref(pool: Json) -> Json:
    meta = metadata_of(pool)
    return {
        "apiVersion": f"{EXTENSIONS_GROUP}/{VERSION}",
        "kind": "SandboxWarmPool",
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _sort_members(members: tuple[Json, ...]) -> Iterator[Json]:
    return iter(sorted(members, key=lambda m: str(metadata_of(m).get("name"))))


def _filter(obs: PoolObservation, pool: Json, recreate: bool) -> _Members:
    uid = str(metadata_of(pool).get("uid") or "")
    pending_deletes = (
        {e.uid for e in obs.expectations.entries if e.verb == "delete"}
        if obs.expectations
        else set()
    )
    found = _Members([], 0, [], [], [])
    for member in _sort_members(obs.members):
        meta = metadata_of(member)
        key = key_of(member, "Sandbox")
        owner = controller_of(member)
        ours = owner is not None and owner.get("uid") == uid
        if meta.get("deletionTimestamp"):
            found.terminating += ours
            continue
        if ours and meta.get("uid") in pending_deletes:
            found.terminating += 1
            continue
        if owner is not None and not ours:
            continue
        orphan = owner is None
        stale = (
            obs.template is not None
            and (recreate or orphan)
            and is_stale(member, obs.template, orphan=orphan)
        )
        if stale:
            found.deletes.append(delete_member(member, "stale: the template changed"))
            found.terminating += ours
            found.reasons.append("rollout")
            continue
        if orphan:
            found.writes.append(
                Patch(
                    key,
                    {
                        "metadata": {
                            "resourceVersion": meta.get("resourceVersion"),
                            "ownerReferences": [
                                *(meta.get("ownerReferences") or []),
                                _owner_ref(pool),
                            ],
                            "labels": {LABEL_LAUNCH_TYPE: LAUNCH_TYPE_WARM},
                        }
                    },
                    why="adopt an orphan of this pool",
                    on_conflict="refresh",
                )
            )
        elif labels_of(member).get(LABEL_LAUNCH_TYPE) != LAUNCH_TYPE_WARM:
            found.writes.append(
                Patch(
                    key,
                    {
                        "metadata": {
                            "resourceVersion": meta.get("resourceVersion"),
                            "labels": {LABEL_LAUNCH_TYPE: LAUNCH_TYPE_WARM},
                        }
                    },
                    why="mark a member as warm",
                    on_conflict="refresh",
                )
            )
        found.active.append(member)
    return found


def _not_progressing(
    obs: PoolObservation,
    pool: Json,
    desired: int,
    active: list[Json],
    held: list[str],
    invalid: list[str],
    memo: PoolMemo,
    settings: PoolSettings,
) -> tuple[str, str] | None:
    """Why the pool cannot make progress, as (reason, message) for a person; None: it can."""
    ref = str(((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name") or "")
    if obs.template is None:
        if desired <= 0:
            return None  # a pool scaled to zero needs no template (as upstream #1572)
        kept = f"; it keeps its {len(active)} member(s)" if active else ""
        return (
            "TemplateNotFound",
            f'SandboxTemplate "{ref}" not found in namespace "{obs.namespace}": create it, or '
            "set spec.sandboxTemplateRef.name to a template that exists; until then the pool "
            f"creates no sandboxes{kept}",
        )
    if memo.refused is not None and memo.failing:
        return (
            "FailedCreate",
            f"the pool's Sandbox creates keep failing: {memo.refused}. The pool tries again "
            "with backoff; if it lasts, look at the API server",
        )
    if memo.refused is not None:
        return (
            "FailedCreate",
            f"the API server refuses the pool's Sandboxes: {memo.refused}. Fix what refuses "
            "them (the template, a quota, an admission policy); the pool tries again with "
            "backoff",
        )
    if invalid:
        return (
            REASON_INVALID_CONFIGURATION,
            f'SandboxTemplate "{ref}" makes sandboxes that cannot run ({len(invalid)} of '
            f"{len(active)} member(s) Ready=False/{REASON_INVALID_CONFIGURATION}): "
            f"{invalid[0]}. Fix the template; the pool then replaces these members",
        )
    if held:
        why = next((message for message in held if message), "")
        return (
            "Unschedulable",
            f"{len(held)} member(s) cannot be scheduled"
            + (f" ({why})" if why else "")
            + ": the pool holds them instead of replacing them, and looks again every "
            f"{settings.unschedulable_recheck:g} s",
        )
    return None


def _refusal(
    last_error: str | None, memo: PoolMemo, *, persists: bool, creating: bool, short: bool
) -> PoolMemo:
    """The memo with the API server's words for the pool's Sandbox creates it refuses (a 4xx
    answer to the previous pass's create), or for creates that keep failing (any other failure,
    once the passes have failed in a row for a while: ``persists``), the member's name left out
    so that the words stay the same from one retry to the next; kept until a pass that creates
    is followed by one without an error, or the pool is short of nothing."""
    failed = reportable(last_error, persists=persists)
    if failed is not None and failed.verb == "create" and failed.target.kind == "Sandbox":
        answer = f" ({failed.reason}, {failed.code})" if failed.code is not None else ""
        refused: str | None = failed.anonymous() + answer
        failing = not failed.refused
    else:
        refused, failing = memo.refused, memo.failing
        if refused is not None and (not short or (memo.creating and last_error is None)):
            refused = None
    kept = refused is not None
    return replace(memo, refused=refused, creating=creating and kept, failing=failing and kept)


def _metav1_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(pool: Json, stalled: tuple[str, str] | None, now: datetime) -> list[Json] | None:
    """The pool's conditions with ``Progressing`` set to False for ``stalled``, or removed
    (None: no conditions at all). Conditions of other types are kept as they are."""
    current = list((pool.get("status") or {}).get("conditions") or ())
    before = next((c for c in current if c.get("type") == CONDITION_PROGRESSING), None)
    others = [c for c in current if c.get("type") != CONDITION_PROGRESSING]
    if stalled is None:
        return others or None
    reason, message = stalled
    since = (
        before.get("lastTransitionTime")
        if before is not None and before.get("status") == "False"
        else None
    )
    condition = {
        "type": CONDITION_PROGRESSING,
        "status": "False",
        "observedGeneration": metadata_of(pool).get("generation"),
        "lastTransitionTime": since or _metav1_time(now),
        "reason": reason,
        "message": message,
    }
    return [*others, condition]


def _status_patch(
    pool: Json,
    key: ObjectKey,
    active: list[Json],
    stalled: tuple[str, str] | None,
    now: datetime,
) -> Patch | None:
    meta = metadata_of(pool)
    ready = sum(1 for member in active if is_ready(member))
    wanted = {
        "replicas": len(active) or None,
        "readyReplicas": ready or None,
        "selector": pool_selector(str(meta.get("name"))),
        "observedGeneration": meta.get("generation"),
        "conditions": _conditions(pool, stalled, now),
    }
    current = pool.get("status") or {}
    changes = {k: v for k, v in wanted.items() if current.get(k) != v}
    if not changes:
        return None
    why = "pool status"
    if "conditions" in changes:
        why += ", and why it cannot make progress" if stalled else ", and that it can again"
    return Patch(key, {"status": changes}, subresource="status", why=why)


def plan_pool(obs: PoolObservation, now: datetime) -> Plan:
    key = ObjectKey("SandboxWarmPool", obs.namespace, obs.name)
    pool = obs.pool
    if pool is None or metadata_of(pool).get("deletionTimestamp"):
        return Plan(reason="the pool is gone; its members go with it")
    settings: PoolSettings = obs.settings
    memo = obs.memo or PoolMemo()
    spec: Any = pool.get("spec") or {}
    desired = spec.get("replicas")
    desired = 1 if desired is None else int(desired)
    recreate = (spec.get("updateStrategy") or {}).get("type") == "Recreate"

    members = _filter(obs, pool, recreate)
    requeue: list[float] = []
    held: list[str] = []
    """The scheduler's messages of the members held Unschedulable."""
    invalid: list[str] = []
    """The messages of the members made invalid by the current template."""
    for member in list(members.active):
        if is_ready(member):
            continue
        problem = _invalid(member)
        if problem is not None:
            if obs.template is None or not is_stale(member, obs.template, orphan=False):
                invalid.append(problem)
                continue
            members.replace(
                member,
                why="invalid, and made from an earlier template: one from the current "
                "template replaces it",
                reason="rollout",
            )
            continue
        if _waiting_to_schedule(member, "SchedulingGated"):
            continue  # someone else lifts the gate; the member's change wakes the pool
        start = _grace_from(member)
        if start is None:
            continue
        deadline = start + timedelta(seconds=settings.readiness_grace)
        if now < deadline:
            requeue.append((deadline - now).total_seconds() + GRACE_SLACK)
            continue
        if _waiting_to_schedule(member, "Unschedulable"):
            held.append(str(_pod_scheduled(member).get("message") or ""))
            continue
        members.replace(
            member,
            why=f"stuck: not Ready {settings.readiness_grace:g} s after it was created",
            reason="stuck GC",
        )

    actions: list[Action] = [*members.writes]
    status_at = len(actions)
    """The status and its Events go here, before the creates: a create refused again ends the
    pass, and the condition that says so would never be written."""
    if held:
        requeue.append(settings.unschedulable_recheck)

    current = len(members.active)
    names = {str(metadata_of(member).get("name")) for member in members.active}
    expected = obs.expectations
    waiting = expected.pending_names("Sandbox") - names if expected else set()
    unnamed = (
        expected.pending("Sandbox") - len(expected.pending_names("Sandbox")) if expected else 0
    )
    total = current + members.terminating + len(waiting) + unnamed
    reasons = list(dict.fromkeys(members.reasons))
    deletes = list(members.deletes)

    creates: list[Action] = []
    if expected:
        requeue.append(EXPECTATIONS_RECHECK)  # the bus wakes us sooner; this bounds the wait
    if obs.template is not None and expected is not None:
        # Creates of ours that got no answer (the worker died, the request timed out): the
        # same name again either makes the member or answers AlreadyExists, never a second one.
        body = pool_sandbox(pool, obs.template, eviction=settings.eviction)
        lost = sorted(expected.unanswered("Sandbox") - names)
        creates.extend(
            Create(_named(body, name), why="a create without an answer, again") for name in lost
        )
        if lost:
            reasons.append(f"{len(lost)} create(s) without an answer issued again")
    if total < desired and obs.template is not None and not deletes:
        missing = min(desired - total, settings.max_batch)
        if expected:
            reasons.append(f"{missing} short, waiting to see our own writes first")
        else:
            missing, memo, wait = _shape(missing, current, desired, memo, settings, now)
            if wait is not None:
                requeue.append(wait)
            if missing > 0:
                body = pool_sandbox(pool, obs.template, eviction=settings.eviction)
                taken = set(names) | {str(metadata_of(m).get("name")) for m in obs.members}
                fresh, memo = _fresh_names(pool, memo, missing, taken)
                creates.extend(Create(_named(body, name), why="fill the pool") for name in fresh)
                reasons.append(_why_create(pool, current, desired))
    elif total >= desired:
        memo = _no_hold(memo)
    actions.extend(_batched(creates))

    if current > desired and not expected:
        deletes.extend(_excess(members.active, current - desired, settings.max_batch))
        reasons.append("scale-down")
    actions.extend(_batched(deletes))

    memo = _refusal(
        obs.last_error,
        memo,
        persists=obs.failure_persists,
        creating=bool(creates),
        short=total < desired,
    )
    stalled = _not_progressing(obs, pool, desired, members.active, held, invalid, memo, settings)
    status = _status_patch(pool, key, members.active, stalled, now)
    events, memo = _progress_events(pool, stalled, memo, now)
    actions[status_at:status_at] = [*([status] if status is not None else []), *events]
    if obs.template is None:
        reasons.append("the template does not exist (yet): nothing created")
    if stalled is not None:
        reasons.append(f"not progressing: {stalled[0]}")
    summary = f"{current} active, {members.terminating} terminating, {desired} desired"
    return Plan(
        actions=tuple(actions),
        requeue_after=min(requeue) if requeue else None,
        reason="; ".join([summary, *reasons]),
        memo=memo if memo != PoolMemo() else None,
    )


_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""The characters of the API server's generated name suffixes (no vowels, no look-alikes)."""
_MAX_PREFIX = 58
"""A generated name's prefix is cut to 58 characters, leaving 5 for the suffix (63 in all)."""


def member_name(pool: Json, number: int) -> str:
    """The name of this pool's ``number``-th member: ``<pool>-`` and five characters, like a
    name the API server generates, but chosen here, from the pool's uid and the number, so that
    a create whose answer was lost can be issued again under the same name."""
    meta = metadata_of(pool)
    digest = hashlib.sha256(f"{meta.get('uid')}/{number}".encode()).digest()
    suffix = "".join(_ALPHABET[byte % len(_ALPHABET)] for byte in digest[:5])
    return f"{meta.get('name')!s}-"[:_MAX_PREFIX] + suffix


def _fresh_names(
    pool: Json, memo: PoolMemo, count: int, taken: set[str]
) -> tuple[list[str], PoolMemo]:
    names: list[str] = []
    number = memo.next_member
    while len(names) < count:
        name = member_name(pool, number)
        number += 1
        if name not in taken:
            names.append(name)
    return names, replace(memo, next_member=number)


def _named(body: Json, name: str) -> Json:
    metadata = {k: v for k, v in body["metadata"].items() if k != "generateName"}
    return {**body, "metadata": {**metadata, "name": name}}


def _why_create(pool: Json, current: int, desired: int) -> str:
    status = pool.get("status") or {}
    had = int(status.get("replicas") or 0)
    return "replenish" if had >= desired or (current and had > current) else "fill"


def _no_hold(memo: PoolMemo) -> PoolMemo:
    if memo.hold_since is None:
        return memo
    return replace(memo, hold_since=None, hold_members=None)


def _shape(
    missing: int, current: int, desired: int, memo: PoolMemo, settings: PoolSettings, now: datetime
) -> tuple[int, PoolMemo, float | None]:
    """The replenish hold, then the token bucket: how many creates now, and when to look again."""
    if settings.replenish_delay > 0:
        rearmed = memo.hold_since is None or (
            memo.hold_members is not None and current < memo.hold_members
        )
        since = now if rearmed else memo.hold_since
        assert since is not None
        memo = replace(memo, hold_since=since, hold_members=current)
        left = (since + timedelta(seconds=settings.replenish_delay) - now).total_seconds()
        if left > 0:
            return 0, memo, left
    return take_tokens(memo, settings.max_refill_rate, missing, now)


def _excess(active: list[Json], count: int, max_batch: int) -> list[Action]:
    """Which members go when the pool is too big: not Ready first, then the newest."""

    def order(member: Json) -> tuple[bool, float]:
        created = _created(member)
        return (is_ready(member), -(created.timestamp() if created else 0.0))

    chosen = sorted(active, key=order)[: min(count, max_batch)]
    return [
        delete_member(member, "scale down: not Ready first, then the newest") for member in chosen
    ]


def _progress_events(
    pool: Json, stalled: tuple[str, str] | None, memo: PoolMemo, now: datetime
) -> tuple[list[Action], PoolMemo]:
    """A Warning ``WarmPoolNotProgressing`` when the pool stops progressing or its reason
    changes, a Normal ``WarmPoolProgressing`` when it progresses again; once each, by the memo
    (an earlier version's ``not_progressing`` stands for ``Unschedulable``)."""
    announced = memo.stalled or ("Unschedulable" if memo.not_progressing else None)
    reason = stalled[0] if stalled is not None else None
    updated = replace(memo, stalled=reason, not_progressing=False)
    if reason == announced:
        return [], updated
    if stalled is not None:
        event = event_about(
            pool,
            reason="WarmPoolNotProgressing",
            note=f"{stalled[0]}: {stalled[1]}",
            type="Warning",
            now=now,
            controller=CONTROLLER_NAME,
        )
    else:
        event = event_about(
            pool,
            reason="WarmPoolProgressing",
            note=f"the pool makes progress again ({announced} is resolved)",
            type="Normal",
            now=now,
            controller=CONTROLLER_NAME,
        )
    return [Create(event, why=str(event["reason"]))], updated
