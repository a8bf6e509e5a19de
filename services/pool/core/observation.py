"""What the pool planner looks at, read from the worker's cache into one value.

Everything :func:`~services.pool.core.plan.plan_pool` decides from: the pool, its template, the
Sandboxes that carry the pool's label (members, adopted orphans, foreign ones it must ignore),
the Pods of those members (for the Unschedulable hold and the scheduling gates), the creates and
deletes the runtime still expects to see, the pool's memo (refill tokens, replenish hold, the
not-progressing reason last announced) and the pool worker's settings. ``observe_pool`` is the
only reader of the cache.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from api.keys import LABEL_WARM_POOL_SANDBOX, name_hash
from api.objects import Json
from events.envelope import ObjectKey
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.expectations import Expectations

__all__ = ["PoolMemo", "PoolObservation", "PoolSettings", "observe_pool"]


class PoolSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The pool worker's flags (upstream's names in the comments)."""

    max_batch: int = 300
    """--sandbox-warm-pool-max-batch-size: creates or deletes per pass."""
    readiness_grace: float = 300.0
    """--sandbox-warm-pool-readiness-grace-period: how long a member may stay not Ready."""
    unschedulable_recheck: float = 60.0
    """--sandbox-warm-pool-unschedulable-recheck-interval."""
    replenish_delay: float = 0.0
    """--sandbox-warm-pool-replenish-delay: hold a refill this long after the pool shrank."""
    max_refill_rate: float = 0.0
    """--sandbox-warm-pool-max-refill-rate: creates per second (0: unlimited)."""
    eviction: bool = True
    """--enable-warm-pool-eviction: members carry the autoscaler's safe-to-evict marker."""


class PoolMemo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """What a pool's passes hand to each other (kept per pool on the bus by the runtime)."""

    not_progressing: bool = False
    """Written by earlier versions: WarmPoolNotProgressing was reported for Unschedulable members
    and not yet cleared (read as ``stalled="Unschedulable"``, never written now)."""
    stalled: str | None = None
    """The reason of the ``Progressing=False`` condition the last WarmPoolNotProgressing Event
    announced (None: progressing), so that each appearance or change of reason is announced
    once, even before the status write comes back on the bus."""
    tokens: float | None = None
    tokens_at: datetime | None = None
    """The refill bucket: tokens left, and when it was last filled (None: full)."""
    hold_since: datetime | None = None
    hold_members: int | None = None
    """The replenish hold: since when the pool has been short, and how many members it had
    then (a further drop re-arms the hold)."""
    next_member: int = 0
    """How many member names this pool has handed out (the next one's number)."""
    refused: str | None = None
    """The API server's words for the last of this pool's Sandbox creates it refused, kept until
    a pass that creates is followed by one without an error, or the pool needs no creates."""
    creating: bool = False
    """While ``refused`` is kept: whether the pass that wrote this memo created Sandboxes."""
    failing: bool = False
    """``refused`` holds the words of creates that keep failing for a reason that passes (a 5xx,
    a timeout…), reported once the failures persist, not of a refusal."""


class PoolObservation(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    pool: Json | None
    template: Json | None = None
    members: tuple[Json, ...] = ()
    """Sandboxes labelled for this pool, by name."""
    expectations: Expectations | None = None
    memo: PoolMemo | None = None
    settings: PoolSettings = PoolSettings()
    last_error: str | None = None
    failure_persists: bool = False
    """The passes have failed in a row for a while (``Observed.failure_persists``)."""


def observe_pool(
    key: ObjectKey,
    cache: ObjectCache,
    *,
    settings: PoolSettings,
    expectations: Expectations | None = None,
    memo: PoolMemo | None = None,
    last_error: str | None = None,
    failure_persists: bool = False,
) -> PoolObservation:
    pool = cache.get(key)
    if pool is None:
        return PoolObservation(namespace=key.namespace, name=key.name, pool=None)
    spec: Any = pool.get("spec") or {}
    ref = str((spec.get("sandboxTemplateRef") or {}).get("name") or "")
    template = cache.get(ObjectKey("SandboxTemplate", key.namespace, ref)) if ref else None
    members = tuple(
        cache.by_label("Sandbox", key.namespace, LABEL_WARM_POOL_SANDBOX, name_hash(key.name))
    )
    return PoolObservation(
        namespace=key.namespace,
        name=key.name,
        pool=pool,
        template=template,
        members=members,
        expectations=expectations,
        memo=memo,
        settings=settings,
        last_error=last_error,
        failure_persists=failure_persists,
    )
