"""Rows 12, 19 (the API side) and 22 (graceful deletion) of docs/devcluster.md §2."""

from __future__ import annotations

import aiohttp
from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster
from tests.component.devcluster.samples import (
    GROUP,
    MERGE,
    PLURAL,
    VERSION,
    create_widget,
    failure,
    pod,
    widget,
)


async def delete_widget(custom: k8s.CustomObjectsApi, name: str = "w1", **kw: object) -> dict:
    result: dict = await custom.delete_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, name, **kw
    )
    return result


async def test_delete_without_finalizers_returns_success_status(
    cluster: DevCluster, custom: k8s.CustomObjectsApi
) -> None:
    """Row 12 (store.go finalizeDelete): a CR goes at once; the answer is a Success Status whose
    details name the plural as kind and carry the uid."""
    created = await create_widget(custom)
    answer = await delete_widget(custom)
    assert answer == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": "w1",
            "group": "example.com",
            "kind": "widgets",
            "uid": created["metadata"]["uid"],
        },
    }
    assert cluster.store.get("widgets.example.com", "default", "w1") is None
    assert cluster.store.history()[-1].type == "DELETED"


async def test_finalizers_hold_the_object_until_the_last_is_removed(
    cluster: DevCluster, custom: k8s.CustomObjectsApi
) -> None:
    """Row 12: DELETE with finalizers sets deletionTimestamp (+ grace 0), answers 200 with the
    object and emits MODIFIED; a repeated DELETE is a no-op; removing the last finalizer
    deletes it (DELETED)."""
    body = widget("w1")
    body["metadata"]["finalizers"] = ["example.com/a", "example.com/b"]
    await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    answer = await delete_widget(custom)
    assert answer["kind"] == "Widget"
    assert answer["metadata"]["deletionTimestamp"]
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 0
    assert answer["metadata"]["generation"] == 2  # markAsDeleting bumps a set generation
    again = await delete_widget(custom)
    assert again["metadata"]["resourceVersion"] == answer["metadata"]["resourceVersion"]
    await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w1",
        {"metadata": {"finalizers": ["example.com/b"]}},
        _content_type=MERGE,
    )
    assert cluster.store.get("widgets.example.com", "default", "w1") is not None
    last = await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "w1",
        {"metadata": {"finalizers": None}},
        _content_type=MERGE,
    )
    assert last["metadata"]["name"] == "w1"
    assert cluster.store.get("widgets.example.com", "default", "w1") is None
    types = [c.type for c in cluster.store.history() if c.name == "w1"]
    assert types == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]


async def test_no_new_finalizers_once_deleting(custom: k8s.CustomObjectsApi) -> None:
    """Row 12 (ValidateObjectMetaUpdate): adding a finalizer after deletionTimestamp is 422."""
    body = widget("w1")
    body["metadata"]["finalizers"] = ["example.com/a"]
    await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    await delete_widget(custom)
    status, error = await failure(
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            "w1",
            {"metadata": {"finalizers": ["example.com/a", "example.com/new"]}},
            _content_type=MERGE,
        )
    )
    assert status == 422
    assert error["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: no new finalizers can be added if the object is being deleted, "
            'found new finalizers []string{"example.com/new"}',
            "field": "metadata.finalizers",
        }
    ]


async def test_propagation_policies_set_gc_finalizers(custom: k8s.CustomObjectsApi) -> None:
    """Row 19 (store.go deletionFinalizersForGarbageCollection): Foreground adds
    foregroundDeletion, Orphan adds orphan; both leave the object for the GC to finish."""
    await create_widget(custom, "fg")
    await create_widget(custom, "or")
    foreground = await delete_widget(custom, "fg", propagation_policy="Foreground")
    orphan = await delete_widget(custom, "or", propagation_policy="Orphan")
    assert foreground["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert orphan["metadata"]["finalizers"] == ["orphan"]
    assert foreground["metadata"]["deletionTimestamp"] and orphan["metadata"]["deletionTimestamp"]


async def test_orphan_dependents_false_answers_202(http: aiohttp.ClientSession) -> None:
    """Row 19 (handlers/delete.go): 202 Accepted when not deleted at once and the caller set
    orphanDependents=false explicitly."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"
    body = widget("w1")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    await http.post(path, json=body)
    async with http.delete(f"{path}/w1", json={"orphanDependents": False}) as response:
        assert response.status == 202


async def test_more_than_one_controller_reference_is_422(core: k8s.CoreV1Api) -> None:
    """Row 19: at most one ownerReference may have controller: true."""
    body = pod("p1")
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": n, "uid": n, "controller": True}
        for n in ("a", "b")
    ]
    status, error = await failure(core.create_namespaced_pod("default", body))
    assert status == 422
    assert error["details"]["causes"][0]["field"] == "metadata.ownerReferences"
    assert "Only one reference can have Controller set to true" in error["message"]


async def test_batch_v1_jobs_orphan_by_default_with_a_warning(http: aiohttp.ClientSession) -> None:
    """Row 19 (job strategy DefaultGarbageCollectionPolicy): deleting a batch/v1 Job without a
    policy orphans its pods, and the server says so in a Warning header."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            }
        },
    }
    path = "/apis/batch/v1/namespaces/default/jobs"
    async with http.post(path, json=job) as response:
        assert response.status == 201
    async with http.delete(f"{path}/j") as response:
        assert response.status == 200
        body = await response.json()
        assert "child pods are preserved by default" in response.headers["Warning"]
    assert body["metadata"]["finalizers"] == ["orphan"]


async def test_delete_preconditions(custom: k8s.CustomObjectsApi) -> None:
    """Row 12 (rest.BeforeDelete): a mismatched uid precondition is a 409 Conflict."""
    await create_widget(custom)
    status, error = await failure(
        delete_widget(custom, body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid="x")))
    )
    assert status == 409
    assert error["message"].startswith(
        'Operation cannot be fulfilled on Widget.example.com "w1": the UID in the precondition (x)'
    )


async def test_delete_of_missing_object_is_404(custom: k8s.CustomObjectsApi) -> None:
    """Row 13: NotFound."""
    status, error = await failure(delete_widget(custom, "nope"))
    assert (status, error["message"]) == (404, 'widgets.example.com "nope" not found')


async def test_unscheduled_pod_goes_at_once_returning_the_pod(
    cluster: DevCluster, core: k8s.CoreV1Api
) -> None:
    """Row 22: an unscheduled pod is deleted at once (grace 0); Pods return the object; the
    graceful update is visible as MODIFIED before DELETED."""
    await core.create_namespaced_pod("default", pod("p1"))
    answer = await core.delete_namespaced_pod("p1", "default")
    assert answer.kind == "Pod"
    assert answer.metadata.deletion_grace_period_seconds == 0
    assert cluster.store.get("pods", "default", "p1") is None
    assert [c.type for c in cluster.store.history() if c.name == "p1"] == [
        "ADDED",
        "MODIFIED",
        "DELETED",
    ]


async def test_scheduled_pod_is_deleted_gracefully(
    cluster: DevCluster, core: k8s.CoreV1Api
) -> None:
    """Row 22 (pod strategy CheckGracefulDelete): a scheduled pod only gets deletionTimestamp =
    now + terminationGracePeriodSeconds and deletionGracePeriodSeconds; a later DELETE with a
    shorter period shortens it; grace 0 removes it."""
    await core.create_namespaced_pod("default", pod("p1", nodeName="node-1"))
    first = await core.delete_namespaced_pod("p1", "default")
    assert first.metadata.deletion_grace_period_seconds == 30
    assert cluster.store.get("pods", "default", "p1") is not None
    again = await core.delete_namespaced_pod("p1", "default")
    assert again.metadata.resource_version == first.metadata.resource_version
    shorter = await core.delete_namespaced_pod("p1", "default", grace_period_seconds=10)
    assert shorter.metadata.deletion_grace_period_seconds == 10
    delta = first.metadata.deletion_timestamp - shorter.metadata.deletion_timestamp
    assert delta.total_seconds() == 20
    await core.delete_namespaced_pod("p1", "default", grace_period_seconds=0)
    assert cluster.store.get("pods", "default", "p1") is None


async def test_delete_collection_by_label(cluster: DevCluster, core: k8s.CoreV1Api) -> None:
    """deletecollection deletes what a list with the same selectors returns."""
    for name, tier in (("a", "web"), ("b", "web"), ("c", "db")):
        await core.create_namespaced_pod("default", pod(name, labels={"tier": tier}))
    await core.delete_collection_namespaced_pod("default", label_selector="tier=web")
    left = await core.list_namespaced_pod("default")
    assert [p.metadata.name for p in left.items] == ["c"]
