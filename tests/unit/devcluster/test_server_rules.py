"""Pure rules of the development cluster, case by case: deletion plans, names, ages, selectors of
the store's history. (The wire-level behaviour is in tests/component/devcluster.)"""

from __future__ import annotations

from datetime import UTC, datetime
from random import Random

import pytest

from devtools.cluster.apirules.builtins import builtin_types
from devtools.cluster.apirules.deletion import gc_finalizers, plan_delete
from devtools.cluster.apirules.errors import StatusError
from devtools.cluster.apirules.meta import GENERATE_ALPHABET, generate_name, qualified_name_errors
from devtools.cluster.apirules.resources import ResourceType
from devtools.cluster.http.tables import human_duration, negotiate
from devtools.cluster.storage.store import Store, TooOld

NOW = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
TYPES = {t.storage: t for t in builtin_types()}


def obj(**meta: object) -> dict:
    return {"metadata": {"name": "x", "uid": "u1", "resourceVersion": "5", **meta}, "spec": {}}


def test_generate_name_cuts_the_prefix_to_58() -> None:
    name = generate_name("a" * 100, Random(1))
    assert len(name) == 63 and name.startswith("a" * 58)
    assert set(name[58:]) <= set(GENERATE_ALPHABET)


@pytest.mark.parametrize(
    ("value", "ok"),
    [("app", True), ("example.com/app", True), ("-bad", False), ("a/b/c", False), ("/x", False)],
)
def test_qualified_names(value: str, ok: bool) -> None:
    assert (qualified_name_errors(value) == []) is ok


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (5, "5s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (10 * 3600, "10h"),
        (3 * 86400 + 3600, "3d1h"),
        (30 * 86400, "30d"),
    ],
)
def test_human_duration(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


def test_negotiate_prefers_the_first_acceptable_clause() -> None:
    assert negotiate("application/json;as=Table;v=v1;g=meta.k8s.io,application/json") == (
        "Table",
        "v1",
    )
    assert negotiate("application/json") == ("json", "")
    assert negotiate("application/json;as=Other;g=meta.k8s.io,application/json") == ("json", "")


def test_gc_finalizers_follow_the_policy() -> None:
    assert gc_finalizers(False, {}, {"propagationPolicy": "Foreground"}) == (
        True,
        ["foregroundDeletion"],
    )
    assert gc_finalizers(False, {}, {"propagationPolicy": "Orphan"}) == (True, ["orphan"])
    assert gc_finalizers(True, {}, {}) == (True, ["orphan"])
    assert gc_finalizers(True, {"finalizers": ["orphan"]}, {"propagationPolicy": "Background"}) == (
        True,
        [],
    )
    assert gc_finalizers(False, {"finalizers": ["a/b"]}, {}) == (False, ["a/b"])


def test_plan_for_an_object_without_finalizers_removes_it() -> None:
    plan = plan_delete(TYPES["configmaps"], obj(), {}, now=NOW)
    assert (plan.write, plan.remove, plan.pending) == (False, True, False)


def test_plan_for_an_object_with_finalizers_marks_it() -> None:
    plan = plan_delete(TYPES["configmaps"], obj(finalizers=["a/b"], generation=3), {}, now=NOW)
    assert (plan.write, plan.remove) == (True, False)
    assert plan.obj["metadata"]["deletionTimestamp"] == "2030-01-01T12:00:00Z"
    assert plan.obj["metadata"]["deletionGracePeriodSeconds"] == 0
    assert plan.obj["metadata"]["generation"] == 4


def test_plan_for_a_scheduled_pod_is_graceful_and_can_only_shorten() -> None:
    pods = TYPES["pods"]
    pod = obj()
    pod["spec"] = {"nodeName": "n1", "terminationGracePeriodSeconds": 30}
    first = plan_delete(pods, pod, {}, now=NOW)
    assert (first.write, first.remove) == (True, False)
    assert first.obj["metadata"]["deletionTimestamp"] == "2030-01-01T12:00:30Z"
    longer = plan_delete(pods, first.obj, {"gracePeriodSeconds": 60}, now=NOW)
    assert longer.pending
    now_gone = plan_delete(pods, first.obj, {"gracePeriodSeconds": 0}, now=NOW)
    assert (now_gone.write, now_gone.remove) == (True, True)
    assert now_gone.obj["metadata"]["deletionTimestamp"] == "2030-01-01T12:00:00Z"


def test_plan_checks_preconditions() -> None:
    with pytest.raises(StatusError) as caught:
        plan_delete(TYPES["configmaps"], obj(), {"preconditions": {"uid": "other"}}, now=NOW)
    assert caught.value.code == 409


def test_store_rebuilds_past_states_and_reports_trimmed_history() -> None:
    store = Store(history_size=2)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}}
    store.create("configmaps", dict(cm, data={"v": "1"}))
    store.update("configmaps", dict(cm, data={"v": "2"}))
    store.update("configmaps", dict(cm, data={"v": "3"}))
    assert store.items_at("configmaps", "n", 2)[0]["data"] == {"v": "2"}
    with pytest.raises(TooOld):
        store.items_at("configmaps", "n", 0)
    store.delete("configmaps", "n", "a")
    assert store.items_at("configmaps", None, 3)[0]["data"] == {"v": "3"}
    assert store.items("configmaps") == []


def test_noop_update_does_not_bump() -> None:
    store = Store()
    created = store.create("configmaps", {"metadata": {"name": "a"}, "data": {}})
    again = store.update("configmaps", {"metadata": {"name": "a"}, "data": {}})
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert store.resource_version == 1


def test_resource_type_names() -> None:
    jobs: ResourceType = TYPES["jobs.batch"]
    assert (jobs.qualified, jobs.api_version, jobs.list_kind) == (
        "jobs.batch",
        "batch/v1",
        "JobList",
    )
