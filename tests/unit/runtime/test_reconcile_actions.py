"""Merge patches and plan execution against a scripted API server."""

from __future__ import annotations

from typing import Any

import pytest

from api.patching.merge import merge_patch
from events.envelope import ObjectKey
from services.runtime.cache import ObjectCache
from services.runtime.kube import KubeError
from services.runtime.reconcile.actions import Create, Delete, Patch, Plan, Replace
from services.runtime.reconcile.executing import execute
from tests.support.fakeapi import ScriptedApi, apply_merge_patch
from tests.support.samples import obj
from tests.unit.runtime.toys import kube_writes


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({}, {}),
        ({"a": 1}, {"a": 1}),
        ({"a": 1}, {"a": 2, "b": [1, 2]}),
        ({"a": {"x": 1, "y": 2}}, {"a": {"x": 1}}),
        ({"a": [1, 2, 3]}, {"a": [3]}),
        ({"a": {"x": 1}}, {"a": "flat"}),
        ({"a": 1, "b": 2}, {}),
        ({"labels": {"k": "v"}}, {"labels": {"k": "v", "n": "w"}}),
        ({"s": {"podIPs": ["1"], "nodeName": "n"}}, {"s": {"podIPs": ["2"]}}),
    ],
)
def test_merge_patch_turns_old_into_new(old: dict[str, Any], new: dict[str, Any]) -> None:
    patch = merge_patch(old, new)
    assert apply_merge_patch(old, patch) == new
    if old == new:
        assert patch == {}


def test_merge_patch_leaves_out_nulls_inside_new_objects() -> None:
    assert merge_patch({}, {"a": {"b": None, "c": 1}}) == {"a": {"c": 1}}


# --- execution --------------------------------------------------------------------------------


POD = ObjectKey("Pod", "ns", "p")


async def test_each_answer_goes_into_the_cache() -> None:
    api = ScriptedApi(obj("Service", "s"))
    cache = ObjectCache()
    plan = Plan(
        actions=(
            Create(obj("Pod", "p")),
            Patch(ObjectKey("Service", "ns", "s"), {"metadata": {"labels": {"a": "b"}}}),
            Delete(ObjectKey("ConfigMap", "ns", "gone")),
        )
    )
    done = await execute(plan, *kube_writes(api, cache))
    assert done.error is None and not done.stale
    assert [o.note for o in done.outcomes] == ["", "", "already gone"]
    assert cache.get(POD)["metadata"]["resourceVersion"] == "101"  # type: ignore[index]
    assert cache.get(ObjectKey("Service", "ns", "s"))["metadata"]["labels"] == {"a": "b"}  # type: ignore[index]


async def test_already_exists_reads_the_object_and_stops_the_plan() -> None:
    api = ScriptedApi(obj("Pod", "p", spec={"theirs": True}))
    cache = ObjectCache()
    plan = Plan(actions=(Create(obj("Pod", "p")), Create(obj("Service", "s"))))
    done = await execute(plan, *kube_writes(api, cache))
    assert done.stale and done.error is None
    assert [o.note for o in done.outcomes] == ["already exists"]
    assert cache.get(POD)["spec"] == {"theirs": True}  # type: ignore[index]
    assert ("create", "s") not in api.calls


async def test_a_patch_of_a_vanished_object_stops_the_plan_and_forgets_it() -> None:
    api = ScriptedApi()
    cache = ObjectCache()
    cache.observe("added", obj("Pod", "p"))
    done = await execute(
        Plan(actions=(Patch(POD, {"x": 1}), Create(obj("Pod", "q")))), *kube_writes(api, cache)
    )
    assert done.stale and POD not in cache
    assert ("create", "q") not in api.calls


async def test_a_failure_stops_the_plan_and_says_where() -> None:
    api = ScriptedApi(obj("Service", "s"))
    api.errors[("replace", "s")] = KubeError(409, "Conflict", "the object has been modified")
    cache = ObjectCache()
    plan = Plan(actions=(Replace(obj("Service", "s")), Create(obj("Pod", "p"))))
    done = await execute(plan, *kube_writes(api, cache))
    assert done.error == "update Service/ns/s: Conflict (409): the object has been modified"
    assert done.outcomes[0].error is not None and len(done.outcomes) == 1
    assert POD not in cache


async def test_a_terminating_delete_answer_is_kept() -> None:
    class Graceful(ScriptedApi):
        async def delete(self, key: ObjectKey, **_: Any) -> dict[str, Any]:
            found = self.store[key]
            found["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            return self._bump(found)

    api = Graceful(obj("Pod", "p"))
    cache = ObjectCache()
    done = await execute(Plan(actions=(Delete(POD),)), *kube_writes(api, cache))
    assert done.outcomes[0].note == "terminating"
    assert cache.get(POD)["metadata"]["deletionTimestamp"]  # type: ignore[index]


def test_kube_errors_tell_the_answers_apart() -> None:
    assert KubeError(404, "NotFound", "").not_found
    assert KubeError(409, "AlreadyExists", "").already_exists
    assert KubeError(409, "Conflict", "").conflict
    assert not KubeError(409, "AlreadyExists", "").conflict


async def test_a_conflict_can_mean_read_again_and_plan_anew() -> None:
    """A conditional write that lost a race: with on_conflict="refresh" the object is read
    again into the cache and the plan stops, to be made again on the fresh state."""
    api = ScriptedApi(obj("Service", "s", rv="9", spec={"theirs": True}))
    api.errors[("patch", "s")] = KubeError(409, "Conflict", "the object has been modified")
    cache = ObjectCache()
    cache.observe("added", obj("Service", "s", rv="3"))
    key = ObjectKey("Service", "ns", "s")
    stale_patch = {"metadata": {"resourceVersion": "3", "labels": {"a": "b"}}}
    refreshing = Plan(actions=(Patch(key, stale_patch, on_conflict="refresh"),))
    done = await execute(refreshing, *kube_writes(api, cache))
    assert done.stale and done.error is None
    assert cache.get(key)["metadata"]["resourceVersion"] == "9"  # type: ignore[index]
    failing = Plan(actions=(Patch(key, stale_patch),))
    done = await execute(failing, *kube_writes(api, cache))
    assert done.error is not None and "Conflict" in done.error
