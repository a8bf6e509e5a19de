"""The OpenSandbox Pool in the pool worker (``services.pool.worker``): which keys a change wakes,
against upstream's watches of its Pool controller (docs/opensandbox.md §2.1), and the
reconciler's wiring (its kind, its expectations, its memo type)."""

from __future__ import annotations

import copy

import msgspec

from api.objects import Json
from events.envelope import ObjectKey
from services.pool.core.opensandbox.ledger import PoolLedger
from services.pool.core.opensandbox.plan import plan_open_pool
from services.pool.worker import WATCHED_KINDS, pool_worker, wakes
from services.runtime.cache import ObjectCache
from services.runtime.worker_api import Observed
from tests.unit.pool.opensandbox.world import NOW, NS, POOL, ledger_of, pod, pool, sandbox

POOL_KEY = ObjectKey("Pool", NS, POOL)


def woken(kind: str, obj: Json) -> list[ObjectKey]:
    return list(wakes(kind, obj, ObjectCache()))


def test_a_pool_wakes_itself() -> None:
    """Upstream ``For(&Pool{})``. (Upstream filters by GenerationChangedPredicate, so a status
    or annotation change does not wake it; here every change does, and a pass that finds
    nothing to do writes nothing.)"""
    assert woken("Pool", pool()) == [POOL_KEY]


def test_a_pod_wakes_the_pool_that_controls_it() -> None:
    """Upstream ``Owns(&Pod{})``: by controller reference, in the Pod's namespace."""
    assert woken("Pod", pod("p")) == [POOL_KEY]


def test_a_pod_of_another_kind_or_group_wakes_no_pool() -> None:
    foreign = pod("p")
    foreign["metadata"]["ownerReferences"][0]["apiVersion"] = "example.com/v1"
    assert woken("Pod", foreign) == []
    batch = pod("p")
    batch["metadata"]["ownerReferences"][0]["kind"] = "BatchSandbox"
    assert woken("Pod", batch) == [], "a non-pooled BatchSandbox's Pod is not a Pool's"
    orphan = pod("p")
    del orphan["metadata"]["ownerReferences"]
    assert woken("Pod", orphan) == []


def test_a_batch_sandbox_wakes_the_pool_it_names() -> None:
    """Upstream's BatchSandbox watch: ``poolRef != ""`` maps to ``ns/poolRef``. ``"*"`` (auto
    assign) names no Pool yet, and upstream's request for a Pool named ``*`` is not made."""
    assert woken("BatchSandbox", sandbox("s")) == [POOL_KEY]
    assert woken("BatchSandbox", sandbox("s", pool_name="")) == []
    assert woken("BatchSandbox", sandbox("s", pool_name="*")) == []


def test_a_detached_batch_sandbox_wakes_its_old_pool() -> None:
    """Upstream's detach handler (old poolRef set, new one empty → the old Pool): the worker
    wakes the keys of the object before the change too, so the Pool sees it go."""
    before = sandbox("s")
    after = copy.deepcopy(before)
    after["spec"]["poolRef"] = ""
    woke = {*woken("BatchSandbox", after), *woken("BatchSandbox", before)}
    assert woke == {POOL_KEY}


def test_the_reconciler_keeps_a_ledger_and_expectations() -> None:
    """Kind ``Pool``, expectations of its Pod creates, and a memo converted back to
    :class:`PoolLedger` before it reaches the planner."""
    definition = pool_worker()
    (reconciler,) = [r for r in definition.reconcilers if r.plan is plan_open_pool]
    assert reconciler.kind == "Pool" and reconciler.expects is True
    assert reconciler.memo_type is PoolLedger
    assert {"Pool", "BatchSandbox", "Pod"} <= set(WATCHED_KINDS)
    assert definition.coalesce.get("Pool")
    cache = ObjectCache()
    for obj in (pool(), pod("pod1"), sandbox("s", alloc_status=["pod1"])):
        cache.observe("added", obj)
    memo = msgspec.convert(msgspec.to_builtins(ledger_of({"pod1": "s"})), PoolLedger)
    inputs = reconciler.observe(POOL_KEY, Observed(cache=cache, memo=memo))
    assert inputs.ledger == ledger_of({"pod1": "s"})
    planned = reconciler.plan(inputs, NOW)
    assert planned.memo.pods == ledger_of({"pod1": "s"}).pods
    msgspec.json.encode(inputs)  # a decision can record it
