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
   from its creationTimestamp) is deleted, unless its Pod is ``PodScheduled=False/
   Unschedulable``: that one is held, and the pool reports ``WarmPoolNotProgressing`` (an
   Event, once per transition; ``WarmPoolProgressing`` when it clears) and looks again after
   the recheck interval. Members still inside their grace bring the next pass forward to the
   earliest deadline (plus 2 s).
4. Status (replicas, readyReplicas, selector, observedGeneration), merge-patched only when it
   changed; zero values are written as absent, as upstream's omitempty clears them.
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
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from msgspec.structs import replace

from api.agents import EXTENSIONS_GROUP, VERSION
from api.keys import LABEL_LAUNCH_TYPE, LAUNCH_TYPE_WARM
from api.objects import Json, controller_of, is_ready, labels_of, metadata_of
from events.envelope import ObjectKey, key_of
from services.domain.agentsandbox.blueprint import pool_sandbox
from services.domain.agentsandbox.staleness import is_stale
from services.domain.agentsandbox.warmpool import pool_selector
from services.pool.core.observation import PoolMemo, PoolObservation, PoolSettings, pod_name_of
from services.runtime.kube_events import event_about
from services.runtime.reconcile.actions import Action, Create, Delete, Patch, Plan, Together

__all__ = [
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
    return (
        granted,
        PoolMemo(
            not_progressing=memo.not_progressing,
            tokens=left,
            tokens_at=now,
            hold_since=memo.hold_since,
            hold_members=memo.hold_members,
        ),
        wait,
    )


@dataclass
class _Members:
    active: list[Json]
    terminating: int
    writes: list[Action]
    deletes: list[Action]
    reasons: list[str]


def _created(obj: Mapping[str, Any]) -> datetime | None:
    stamp = metadata_of(obj).get("creationTimestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def _unschedulable(pod: Mapping[str, Any] | None) -> bool:
    for entry in ((pod or {}).get("status") or {}).get("conditions") or ():
        if entry.get("type") == "PodScheduled":
            return entry.get("status") == "False" and entry.get("reason") == "Unschedulable"
    return False


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
            found.deletes.append(
                Delete(key, uid=str(meta.get("uid")), why="stale: the template changed")
            )
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


def _status_patch(pool: Json, key: ObjectKey, active: list[Json]) -> Patch | None:
    meta = metadata_of(pool)
    ready = sum(1 for member in active if is_ready(member))
    wanted = {
        "replicas": len(active) or None,
        "readyReplicas": ready or None,
        "selector": pool_selector(str(meta.get("name"))),
        "observedGeneration": meta.get("generation"),
    }
    current = pool.get("status") or {}
    changes = {k: v for k, v in wanted.items() if current.get(k) != v}
    if not changes:
        return None
    return Patch(key, {"status": changes}, subresource="status", why="pool status")


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
    held = 0
    for member in list(members.active):
        if is_ready(member):
            continue
        created = _created(member)
        if created is None:
            continue
        deadline = created + timedelta(seconds=settings.readiness_grace)
        if now < deadline:
            requeue.append((deadline - now).total_seconds() + GRACE_SLACK)
            continue
        if _unschedulable(obs.pods.get(pod_name_of(member))):
            held += 1
            continue
        members.active.remove(member)
        meta = metadata_of(member)
        members.deletes.append(
            Delete(
                key_of(member, "Sandbox"),
                uid=str(meta.get("uid")),
                why=f"stuck: not Ready {settings.readiness_grace:g} s after it was created",
            )
        )
        members.terminating += 1
        members.reasons.append("stuck GC")

    actions: list[Action] = [*members.writes]
    status = _status_patch(pool, key, members.active)
    if status is not None:
        actions.append(status)

    events, memo = _progress_events(pool, held, memo, now)
    actions.extend(events)
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
    if obs.template is None:
        reasons.append("the template does not exist (yet): nothing created")
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
    return PoolMemo(
        not_progressing=memo.not_progressing, tokens=memo.tokens, tokens_at=memo.tokens_at
    )


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
        Delete(
            key_of(member, "Sandbox"),
            uid=str(metadata_of(member).get("uid")),
            why="scale down: not Ready first, then the newest",
        )
        for member in chosen
    ]


def _progress_events(
    pool: Json, held: int, memo: PoolMemo, now: datetime
) -> tuple[list[Action], PoolMemo]:
    """WarmPoolNotProgressing when members are held Unschedulable, once per transition, and
    WarmPoolProgressing when that clears."""
    if bool(held) == memo.not_progressing:
        return [], memo
    updated = replace(memo, not_progressing=bool(held))
    if held:
        note = f"{held} sandbox(es) cannot be scheduled; holding them instead of replacing them"
        event = event_about(
            pool,
            reason="WarmPoolNotProgressing",
            note=note,
            type="Warning",
            now=now,
            controller=CONTROLLER_NAME,
        )
    else:
        event = event_about(
            pool,
            reason="WarmPoolProgressing",
            note="every member can be scheduled again",
            type="Normal",
            now=now,
            controller=CONTROLLER_NAME,
        )
    return [Create(event, why=str(event["reason"]))], updated
