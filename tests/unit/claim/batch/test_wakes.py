"""Which BatchSandbox a change wakes in the claim worker (services/claim/worker.py): itself,
the Pods it controls, the Pods a Pool gave it (by its ``alloc-status``), and its Pool, which
wakes those naming it and those waiting for a ``"*"``. Upstream's Pool-owned Pods wake no
BatchSandbox at all (docs/opensandbox.md §3.1, §9.24); ours do, so a pooled sandbox's status
follows its Pods at once instead of on a timer."""

from __future__ import annotations

import copy

from api.objects import Json
from events.envelope import ObjectKey
from services.claim.worker import ClaimWakes
from services.runtime.cache import ObjectCache
from tests.unit.claim.batch.world import NS, POOL, batch_sandbox, pod, pool


def cache_of(*objects: Json) -> ObjectCache:
    cache = ObjectCache()
    for obj in objects:
        cache.observe("added", copy.deepcopy(obj))
    return cache


def woken(kind: str, obj: Json, cache: ObjectCache) -> list[str]:
    return sorted(key.name for key in ClaimWakes()(kind, obj, cache))


TEMPLATE_MODE = batch_sandbox("bs-t")
POOLED = batch_sandbox("bs-p", pool_ref=POOL, alloc=["pool-a-a"])
PREFIXED = batch_sandbox("bs-q", pool_ref=POOL, alloc=["pool-a-ab"])
AUTO = batch_sandbox("bs-star", pool_ref="*")
ELSEWHERE = batch_sandbox("bs-other", pool_ref="pool-z", alloc=["pool-z-a"])
ALL = (TEMPLATE_MODE, POOLED, PREFIXED, AUTO, ELSEWHERE)


def test_a_batch_sandbox_wakes_itself() -> None:
    cache = cache_of(*ALL)
    assert list(ClaimWakes()("BatchSandbox", POOLED, cache)) == [
        ObjectKey("BatchSandbox", NS, "bs-p")
    ]


def test_a_pod_it_controls_wakes_it() -> None:
    cache = cache_of(*ALL)
    assert woken("Pod", pod("bs-t-0", owner=TEMPLATE_MODE), cache) == ["bs-t"]


def test_a_pool_pod_wakes_the_sandbox_whose_alloc_status_names_it() -> None:
    """By its whole name: ``pool-a-a`` does not wake the holder of ``pool-a-ab``."""
    cache = cache_of(*ALL)
    assert woken("Pod", pod("pool-a-a", owner=pool()), cache) == ["bs-p"]
    assert woken("Pod", pod("pool-a-c", owner=pool()), cache) == []


def test_a_pool_wakes_the_sandboxes_naming_it_and_those_waiting_for_any() -> None:
    cache = cache_of(*ALL)
    assert woken("Pool", pool(), cache) == ["bs-p", "bs-q", "bs-star"]


def test_a_pod_of_no_batch_sandbox_wakes_none() -> None:
    cache = cache_of(*ALL)
    assert woken("Pod", pod("loose-0"), cache) == []
    replica_set = {"kind": "ReplicaSet", "metadata": {"name": "rs", "uid": "uid-rs"}}
    assert woken("Pod", pod("rs-0", owner=replica_set), cache) == []
