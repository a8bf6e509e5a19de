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

Following upstream's watches, declared as rules (:data:`wakes`): a pool's change wakes it; a
Sandbox's change wakes the pool that controls it, the pool whose label it carries (an orphan
it may adopt) and, when the Sandbox is adoptable before or after the change, its own member key
(its queue entry goes in when it becomes adoptable and out when it stops being; the changes of a
member on its way to Ready, or of one a claim holds, are nothing to its entry, and a restart
reconciles every key that holds an entry); a template's change wakes every pool in its
namespace that references it. Sandboxes are indexed by the pool label, pools by template.

The only Pods it follows are the OpenSandbox Pools' (:func:`_pools_pod`). A SandboxWarmPool's
Unschedulable hold and scheduling gates read each member's ``PodScheduled`` condition, which the
sandbox worker copies from the member's Pod; upstream's pool controller reads the Pods, and here
they were most of the events this worker decoded (six Pod changes a claim, against four of its
Sandboxes). Pods are followed on demand: only once an OpenSandbox Pool is in the cache, and
its passes wait for them to be loaded; until then no Pod change reaches this worker at all.
A pool's wakes are coalesced over :data:`POOL_COALESCE`: each pass reads every member.

The pool worker reports the depth of each warm queue (``sandbus_warm_queue_depth``, labels
namespace, template_hash and pool; :mod:`~services.pool.core.depths`), read from the warm
stream's info at each scrape. Here rather than in the claim worker: it fills the queues, it
runs active-passive, so one replica reports each queue (the claim worker runs on every replica,
and a sum over them would count every queue once per replica), and its cache holds every pool,
so an empty queue reports 0 instead of vanishing.
"""

from __future__ import annotations

from typing import Final

from nats.js import JetStreamContext

from api.keys import LABEL_WARM_POOL_SANDBOX, name_hash
from api.objects import Json, labels_of, metadata_of
from api.opensandbox import GROUP as OPENSANDBOX_GROUP
from api.opensandbox import POOL_REF_AUTO_ASSIGN
from events.envelope import ObjectKey
from events.subjects import WARM_SUBJECTS
from services.domain.agentsandbox.warmpool import adoptable_pool, template_ref_name
from services.pool.core.depths import warm_queue_depths
from services.pool.core.members import MemberMemo, MemberObservation, observe_member, plan_member
from services.pool.core.observation import PoolMemo, PoolObservation, PoolSettings, observe_pool
from services.pool.core.opensandbox.ledger import PoolLedger
from services.pool.core.opensandbox.observation import (
    OpenPoolObservation,
    observe_open_pool,
    pool_ref,
)
from services.pool.core.opensandbox.plan import plan_open_pool
from services.pool.core.plan import plan_pool
from services.runtime.worker_api import (
    WARM_EXECUTORS,
    BusConfig,
    Gauge,
    ObjectCache,
    Observed,
    Reconciler,
    Wakes,
    WorkerDefinition,
    controller_name,
    wake_named,
    wake_owner,
    wake_referrers,
    wake_self,
)

__all__ = [
    "WARM_QUEUE_DEPTH",
    "WATCHED_KINDS",
    "WORKER_NAME",
    "member_reconciler",
    "open_pool_reconciler",
    "pool_reconciler",
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
:data:`~services.runtime.reconcile.waking.ECHO_COALESCE`). A refill starts at most 0.25 s
later, against the seconds a new Sandbox takes to be Ready."""
OPEN_POOL_COALESCE = 0.01
"""The same for an OpenSandbox Pool, shorter: its wakes include the BatchSandboxes waiting for
an allocation, and a BatchSandbox of 100 from a Pool of 100 was allocated in 42 ms with this
instead of 89 ms with :data:`POOL_COALESCE` (bench/batch_allocation.py, 5 ms writes)."""
WATCHED_KINDS = ("SandboxWarmPool", "SandboxTemplate", "Sandbox", "Pod", "Pool", "BatchSandbox")
WARM_QUEUE_DEPTH: Final = "sandbus_warm_queue_depth"


def pool_reconciler(settings: PoolSettings | None = None) -> Reconciler[PoolObservation]:
    settings = settings or PoolSettings()

    def observe(key: ObjectKey, observed: Observed) -> PoolObservation:
        return observe_pool(
            key,
            observed.cache,
            settings=settings,
            expectations=observed.expectations,
            memo=observed.memo,
            last_error=observed.last_error,
            failure_persists=observed.failure_persists,
        )

    return Reconciler("SandboxWarmPool", observe, plan_pool, memo_type=PoolMemo, expects=True)


def member_reconciler() -> Reconciler[MemberObservation]:
    def observe(key: ObjectKey, observed: Observed) -> MemberObservation:
        return observe_member(key, observed.cache, observed.memo)

    return Reconciler("Sandbox", observe, plan_member, memo_type=MemberMemo)


def open_pool_reconciler() -> Reconciler[OpenPoolObservation]:
    """OpenSandbox's Pool: its Pods, and the allocation of them to BatchSandboxes."""

    def observe(key: ObjectKey, observed: Observed) -> OpenPoolObservation:
        return observe_open_pool(
            key,
            observed.cache,
            ledger=observed.memo,
            expectations=observed.expectations,
            last_error=observed.last_error,
            failure_persists=observed.failure_persists,
        )

    return Reconciler("Pool", observe, plan_open_pool, memo_type=PoolLedger, expects=True)


def _uses_template(pool: Json, template: Json) -> bool:
    return template_ref_name(pool) == metadata_of(template).get("name")


def _labelled(sandbox: Json) -> bool:
    return bool(labels_of(sandbox).get(LABEL_WARM_POOL_SANDBOX))


def _labelled_with(pool: Json, sandbox: Json) -> bool:
    """The pool whose name hash the Sandbox's pool label carries (an orphan it may adopt)."""
    labelled = labels_of(sandbox).get(LABEL_WARM_POOL_SANDBOX)
    return name_hash(str(metadata_of(pool).get("name"))) == labelled


def _named_pool(sandbox: Json) -> str | None:
    ref = pool_ref(sandbox)
    return ref if ref != POOL_REF_AUTO_ASSIGN else None


def _pools_pod(pod: Json) -> bool:
    """The Pods the pool worker follows: those an OpenSandbox Pool controls."""
    return bool(controller_name(pod, "Pool", group=OPENSANDBOX_GROUP))


wakes = Wakes(
    wake_self(("SandboxWarmPool", "Pool")),
    wake_referrers("SandboxTemplate", "SandboxWarmPool", _uses_template),
    # A member's entry goes in when it becomes adoptable and out when it stops being: the
    # runtime asks again with the state before the change.
    wake_self("Sandbox", when=lambda sandbox: adoptable_pool(sandbox) is not None),
    wake_owner("Sandbox", "SandboxWarmPool"),
    wake_referrers("Sandbox", "SandboxWarmPool", _labelled_with, when=_labelled),
    wake_named("BatchSandbox", "Pool", _named_pool),
    wake_owner("Pod", "Pool", group=OPENSANDBOX_GROUP),
)


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
        reconcilers=(pool_reconciler(settings), member_reconciler(), open_pool_reconciler()),
        watched_kinds=WATCHED_KINDS,
        wakes=wakes,
        label_indexes=(("Sandbox", LABEL_WARM_POOL_SANDBOX),),
        executors=WARM_EXECUTORS,
        coalesce={"SandboxWarmPool": POOL_COALESCE, "Pool": OPEN_POOL_COALESCE},
        gauges=(WARM_QUEUE_GAUGE,),
        follows={"Pod": _pools_pod},
        on_demand={"Pod": ("Pool",)},
    )
