"""What the OpenSandbox Pool planner looks at, read from the pool worker's cache into one value:
the Pool, the Pods it controls, the BatchSandboxes whose ``poolRef`` names it, its ledger (the
memo), and the creates and deletes the runtime still expects to see."""

from __future__ import annotations

import msgspec

from api.objects import Json, metadata_of
from events.envelope import ObjectKey
from services.pool.core.opensandbox.ledger import PoolLedger
from services.runtime.cache import ObjectCache
from services.runtime.reconcile.expectations import Expectations

__all__ = ["OpenPoolObservation", "observe_open_pool", "pool_ref"]


class OpenPoolObservation(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    pool: Json | None
    pods: tuple[Json, ...] = ()
    """The Pods this incarnation of the Pool controls, terminating ones included."""
    sandboxes: tuple[Json, ...] = ()
    """The BatchSandboxes of the namespace whose ``poolRef`` is the Pool's name, and those that
    hold its Pods while their ``poolRef`` names another Pool (an edited ``poolRef``: their
    Pods stay theirs until they release them, upstream #1433)."""
    ledger: PoolLedger | None = None
    expectations: Expectations | None = None
    last_error: str | None = None
    failure_persists: bool = False
    """The passes have failed in a row for a while (``Observed.failure_persists``)."""


def pool_ref(sandbox: Json) -> str:
    return str((sandbox.get("spec") or {}).get("poolRef") or "")


def observe_open_pool(
    key: ObjectKey,
    cache: ObjectCache,
    *,
    ledger: PoolLedger | None = None,
    expectations: Expectations | None = None,
    last_error: str | None = None,
    failure_persists: bool = False,
) -> OpenPoolObservation:
    pool = cache.get(key)
    holders = {h.uid for h in ledger.pods.values()} if ledger is not None else set()
    sandboxes = tuple(
        sandbox
        for sandbox in cache.objects("BatchSandbox", key.namespace)
        if pool_ref(sandbox) == key.name
        or (pool_ref(sandbox) and str(metadata_of(sandbox).get("uid") or "") in holders)
    )
    if pool is None:
        return OpenPoolObservation(
            namespace=key.namespace, name=key.name, pool=None, sandboxes=sandboxes
        )
    uid = str(metadata_of(pool).get("uid") or "")
    return OpenPoolObservation(
        namespace=key.namespace,
        name=key.name,
        pool=pool,
        pods=tuple(cache.owned_by("Pod", uid)) if uid else (),
        sandboxes=sandboxes,
        ledger=ledger,
        expectations=expectations,
        last_error=last_error,
        failure_persists=failure_persists,
    )
