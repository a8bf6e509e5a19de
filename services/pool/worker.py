"""The pool worker as the reconciler runtime sees it: what it follows, what wakes what, and its
three reconcilers.

``SandboxWarmPool`` keys are reconciled by :func:`~services.pool.core.plan.plan_pool` (fill,
replenish, rollout, stuck GC, scale-down), with the runtime's expectations of its creates and
deletes (``expects = True``): the pool never counts a lagging view of its own writes short, even
across a restart or a failover, because the expectations live on the bus.

``Sandbox`` keys are reconciled by :func:`~services.pool.core.members.plan_member`: the warm
queues' producer side, each member's entry enqueued or purged.

OpenSandbox ``Pool`` keys are reconciled by
:func:`~services.pool.core.opensandbox.plan.plan_open_pool`: the Pool's Pods and their
allocation to BatchSandboxes, with the allocation ledger as the Pool's memo and the
expectations of its Pod creates. A Pool is woken by its own changes, by those of the Pods it
controls and by those of the BatchSandboxes whose ``poolRef`` names it (before and after the
change, so a sandbox that leaves a Pool wakes it too; ``poolRef: "*"`` names no Pool yet). Its
wakes are coalesced like a SandboxWarmPool's: a pass reads every Pod and sandbox of the Pool.

Following upstream's watches (spec/agent-sandbox.md §4.1): a pool's change wakes it; a
Sandbox's change wakes the pool that controls it, the pool whose label it carries (an orphan
it may adopt) and, when the Sandbox is adoptable before or after the change, its own member key
(its queue entry goes in when it becomes adoptable and out when it stops being; the changes of a
member on its way to Ready, or of one a claim holds, are nothing to its entry, and a restart
reconciles every key that holds an entry); a template's change wakes every pool in its
namespace that references it; a Pod's change wakes the pool of the Sandbox that controls it
(the Unschedulable hold reads it). Sandboxes are indexed by the pool label, pools by template.
A pool's wakes are coalesced over :data:`POOL_COALESCE`: each pass reads every member.

The pool worker reports the depth of each warm queue (``sandbus_warm_queue_depth``, labels
namespace, template_hash and pool; :mod:`~services.pool.core.depths`), read from the warm
stream's info at each scrape. Here rather than in the claim worker: it fills the queues, it
runs active-passive, so one replica reports each queue (the claim worker runs on every replica,
and a sum over them would count every queue once per replica), and its cache holds every pool,
so an empty queue reports 0 instead of vanishing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Final

from nats.js import JetStreamContext

from api.agents import GROUP
from api.keys import LABEL_WARM_POOL_SANDBOX, name_hash
from api.opensandbox import GROUP as OPENSANDBOX_GROUP
from api.opensandbox import POOL_REF_AUTO_ASSIGN
from events.subjects import WARM_SUBJECTS
from services.pool.core.depths import warm_queue_depths
from services.pool.core.members import (
    MemberMemo,
    MemberObservation,
    adoptable_pool,
    observe_member,
    plan_member,
)
from services.pool.core.observation import PoolMemo, PoolObservation, PoolSettings, observe_pool
from services.pool.core.opensandbox.ledger import PoolLedger
from services.pool.core.opensandbox.observation import (
    OpenPoolObservation,
    observe_open_pool,
    pool_ref,
)
from services.pool.core.opensandbox.plan import plan_open_pool
from services.pool.core.plan import plan_pool
from services.runtime.bus import BusConfig
from services.runtime.cache import Json, ObjectCache, ObjectKey, controller_of, key_of, labels_of
from services.runtime.reconcile import Plan
from services.runtime.reconcile.warm import WARM_EXECUTORS
from services.runtime.reconcile.worker import Gauge, Observed, WorkerDefinition

__all__ = [
    "WARM_QUEUE_DEPTH",
    "WATCHED_KINDS",
    "WORKER_NAME",
    "MemberReconciler",
    "OpenPoolReconciler",
    "PoolReconciler",
    "pool_worker",
    "read_warm_queue_depths",
    "wakes",
]

WORKER_NAME = "pool"
POOL_COALESCE = 0.25
"""Seconds a pool woken by an event waits, so that its members' changes (hundreds during a
fill, one per adoption under a stream of claims) are served by one pass instead of one each: a
pass reads every member. At 50 ms a pool of 150 under 20 claims/s planned once per claim, 12.5 ms
of the pool worker's CPU per claim; at 0.25 s a few adoptions share a pass: 11 ms (``python -m
bench sustained --rates 20``; the echoes of the pool's own creates still wake it within
:data:`~services.runtime.reconcile.worker.ECHO_COALESCE`). A refill starts at most 0.25 s
later, against the seconds a new Sandbox takes to be Ready."""
OPEN_POOL_COALESCE = 0.01
"""The same for an OpenSandbox Pool, shorter: its wakes include the BatchSandboxes waiting for
an allocation, and a BatchSandbox of 100 from a Pool of 100 was allocated in 42 ms with this
instead of 89 ms with :data:`POOL_COALESCE` (bench/batch_allocation.py, 5 ms writes)."""
WATCHED_KINDS = ("SandboxWarmPool", "SandboxTemplate", "Sandbox", "Pod", "Pool", "BatchSandbox")
WARM_QUEUE_DEPTH: Final = "sandbus_warm_queue_depth"


@dataclass(frozen=True)
class PoolReconciler:
    settings: PoolSettings = field(default_factory=PoolSettings)
    kind: str = field(default="SandboxWarmPool", init=False)
    expects: ClassVar[bool] = True
    memo_type: ClassVar[type] = PoolMemo

    def observe(self, key: ObjectKey, observed: Observed) -> PoolObservation:
        return observe_pool(
            key,
            observed.cache,
            settings=self.settings,
            expectations=observed.expectations,
            memo=observed.memo,
            last_error=observed.last_error,
        )

    def plan(self, inputs: PoolObservation, now: datetime) -> Plan:
        return plan_pool(inputs, now)


@dataclass(frozen=True)
class MemberReconciler:
    kind: str = field(default="Sandbox", init=False)
    memo_type: ClassVar[type] = MemberMemo

    def observe(self, key: ObjectKey, observed: Observed) -> MemberObservation:
        return observe_member(key, observed.cache, observed.memo)

    def plan(self, inputs: MemberObservation, now: datetime) -> Plan:
        return plan_member(inputs, now)


@dataclass(frozen=True)
class OpenPoolReconciler:
    """OpenSandbox's Pool: its Pods, and the allocation of them to BatchSandboxes."""

    kind: str = field(default="Pool", init=False)
    expects: ClassVar[bool] = True
    memo_type: ClassVar[type] = PoolLedger

    def observe(self, key: ObjectKey, observed: Observed) -> OpenPoolObservation:
        return observe_open_pool(
            key,
            observed.cache,
            ledger=observed.memo,
            expectations=observed.expectations,
            last_error=observed.last_error,
        )

    def plan(self, inputs: OpenPoolObservation, now: datetime) -> Plan:
        return plan_open_pool(inputs, now)


def _controlling_pool(obj: Json, namespace: str) -> ObjectKey | None:
    owner = controller_of(obj)
    if owner is None or owner.get("kind") != "SandboxWarmPool":
        return None
    return ObjectKey("SandboxWarmPool", namespace, str(owner.get("name") or ""))


def _group(reference: Mapping[str, object]) -> str:
    return str(reference.get("apiVersion") or "").split("/")[0]


def wakes(kind: str, obj: Json, cache: ObjectCache) -> Iterator[ObjectKey]:
    key = key_of(obj, kind)
    if kind == "SandboxWarmPool":
        yield key
    elif kind == "SandboxTemplate":
        for pool in cache.objects("SandboxWarmPool", key.namespace):
            ref = ((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name")
            if ref == key.name:
                yield key_of(pool, "SandboxWarmPool")
    elif kind == "Sandbox":
        if adoptable_pool(obj) is not None:
            yield key  # the runtime asks again with the state before the change
        owner = _controlling_pool(obj, key.namespace)
        if owner is not None:
            yield owner
        labelled = labels_of(obj).get(LABEL_WARM_POOL_SANDBOX)
        if labelled:
            for candidate in cache.objects("SandboxWarmPool", key.namespace):
                pool_key = key_of(candidate, "SandboxWarmPool")
                if name_hash(pool_key.name) == labelled and pool_key != owner:
                    yield pool_key
    elif kind in ("Pool", "BatchSandbox"):
        ref = key.name if kind == "Pool" else pool_ref(obj)
        if ref and ref != POOL_REF_AUTO_ASSIGN:
            yield ObjectKey("Pool", key.namespace, ref)
    elif kind == "Pod":
        sandbox_ref = controller_of(obj)
        if sandbox_ref is not None and _group(sandbox_ref) == OPENSANDBOX_GROUP:
            if sandbox_ref.get("kind") == "Pool":
                yield ObjectKey("Pool", key.namespace, str(sandbox_ref.get("name") or ""))
            return
        if sandbox_ref is None or sandbox_ref.get("kind") != "Sandbox":
            return
        if _group(sandbox_ref) != GROUP:
            return
        name = str(sandbox_ref.get("name") or "")
        sandbox = cache.get(ObjectKey("Sandbox", key.namespace, name))
        owning = _controlling_pool(sandbox, key.namespace) if sandbox is not None else None
        if owning is not None:
            yield owning


async def read_warm_queue_depths(
    js: JetStreamContext, bus: BusConfig, cache: ObjectCache
) -> dict[tuple[str, ...], float]:
    """Every warm queue's depth: one stream-info request for the counts of all the queues'
    subjects (the pools are the worker's cache)."""
    info = await js.stream_info(bus.warm_stream, subjects_filter=WARM_SUBJECTS[0])
    depths = warm_queue_depths(info.state.subjects or {}, cache.objects("SandboxWarmPool"))
    return {key: float(depth) for key, depth in depths.items()}


WARM_QUEUE_GAUGE: Final = Gauge(
    WARM_QUEUE_DEPTH,
    "Entries on each warm queue (adoptable sandboxes offered to claims, those taken and not "
    "yet acked included), read from the warm stream at each scrape.",
    ("namespace", "template_hash", "pool"),
    read_warm_queue_depths,
)


def pool_worker(settings: PoolSettings | None = None) -> WorkerDefinition:
    return WorkerDefinition(
        name=WORKER_NAME,
        reconcilers=(
            PoolReconciler(settings or PoolSettings()),
            MemberReconciler(),
            OpenPoolReconciler(),
        ),
        watched_kinds=WATCHED_KINDS,
        wakes=wakes,
        label_indexes=(("Sandbox", LABEL_WARM_POOL_SANDBOX),),
        executors=WARM_EXECUTORS,
        coalesce={"SandboxWarmPool": POOL_COALESCE, "Pool": OPEN_POOL_COALESCE},
        gauges=(WARM_QUEUE_GAUGE,),
    )
