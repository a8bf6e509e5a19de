"""Merge patches and plan execution against a scripted API server."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.runtime.cache import ObjectCache, ObjectKey
from services.runtime.kube import KubeError
from services.runtime.reconcile import Create, Delete, Patch, Plan, Replace, merge_patch
from services.runtime.reconcile.executing import RUNTIME_EXECUTORS, ExecutionContext, execute


def kube_writes(api: Any, cache: ObjectCache) -> tuple[Any, ExecutionContext]:
    """The runtime's own executors and a context for them: ``execute(plan, *kube_writes(...))``."""
    return RUNTIME_EXECUTORS, ExecutionContext(api, cache)


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, written out independently of the code under test."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


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


def obj(kind: str, name: str, rv: str = "1", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid", "resourceVersion": rv},
        **extra,
    }


class ScriptedApi:
    """A KubeApi stand-in: a store plus errors to raise, by (verb, name)."""

    def __init__(self, *objs: dict[str, Any]) -> None:
        self.store = {
            ObjectKey(o["kind"], "ns", o["metadata"]["name"]): copy.deepcopy(o) for o in objs
        }
        self.errors: dict[tuple[str, str], KubeError] = {}
        self.calls: list[tuple[str, str]] = []
        self.version = 100

    def _fail(self, verb: str, name: str) -> None:
        self.calls.append((verb, name))
        error = self.errors.get((verb, name))
        if error is not None:
            raise error

    def _bump(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(body)

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        self._fail("create", body["metadata"]["name"])
        key = ObjectKey(body["kind"], "ns", body["metadata"]["name"])
        if key in self.store:
            raise KubeError(409, "AlreadyExists", f"{key} already exists")
        self.store[key] = copy.deepcopy(body)
        return self._bump(self.store[key])

    async def get(self, key: ObjectKey) -> dict[str, Any]:
        self._fail("get", key.name)
        if key not in self.store:
            raise KubeError(404, "NotFound", str(key))
        return copy.deepcopy(self.store[key])

    async def patch(
        self, key: ObjectKey, patch: dict[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]:
        self._fail("patch", key.name)
        if key not in self.store:
            raise KubeError(404, "NotFound", str(key))
        self.store[key] = apply_merge_patch(self.store[key], patch)
        return self._bump(self.store[key])

    async def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        self._fail("replace", body["metadata"]["name"])
        key = ObjectKey(body["kind"], "ns", body["metadata"]["name"])
        self.store[key] = copy.deepcopy(body)
        return self._bump(self.store[key])

    async def delete(self, key: ObjectKey, **_: Any) -> dict[str, Any]:
        self._fail("delete", key.name)
        if key not in self.store:
            raise KubeError(404, "NotFound", str(key))
        del self.store[key]
        return {"kind": "Status", "status": "Success"}


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
