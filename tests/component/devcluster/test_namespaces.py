"""Row 21 of docs/devcluster.md §2: namespace lifecycle."""

from __future__ import annotations

from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster
from tests.component.devcluster.samples import GROUP, MERGE, PLURAL, VERSION, failure, pod, widget
from tests.support.waiting import until


async def wait_gone(cluster: DevCluster, resource: str, namespace: str, name: str) -> None:
    await until(
        lambda: cluster.store.get(resource, namespace, name) is None,
        within=5.0,
        what=f"{resource} {namespace}/{name} to be gone",
    )


async def test_initial_namespaces_exist(core: k8s.CoreV1Api) -> None:
    """Row 21: default, kube-system, kube-public and kube-node-lease are pre-created, Active,
    with the kubernetes finalizer and the metadata.name label."""
    listed = await core.list_namespace()
    assert [n.metadata.name for n in listed.items] == [
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
    ]
    default = listed.items[0]
    assert default.status.phase == "Active"
    assert default.spec.finalizers == ["kubernetes"]
    assert default.metadata.labels == {"kubernetes.io/metadata.name": "default"}


async def test_create_in_missing_namespace_is_404(core: k8s.CoreV1Api) -> None:
    """Row 21 (NamespaceLifecycle admission): namespaces "x" not found."""
    status, error = await failure(core.create_namespaced_pod("nowhere", pod("p")))
    assert status == 404
    assert error["message"] == 'namespaces "nowhere" not found'
    assert error["details"] == {"name": "nowhere", "kind": "namespaces"}


async def test_create_in_terminating_namespace_is_403(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    """Row 21: a terminating namespace refuses new content with 403 Forbidden."""
    await core.create_namespace({"metadata": {"name": "doomed"}})
    body = widget("held")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    await custom.create_namespaced_custom_object(GROUP, VERSION, "doomed", PLURAL, body)
    await core.delete_namespace("doomed")
    terminating = await core.read_namespace("doomed")
    assert terminating.status.phase == "Terminating"
    assert terminating.metadata.deletion_timestamp is not None
    status, error = await failure(core.create_namespaced_pod("doomed", pod("p")))
    assert status == 403
    assert error["reason"] == "Forbidden"
    assert error["message"] == (
        'pods "p" is forbidden: unable to create new content in namespace doomed because it is '
        "being terminated"
    )
    assert error["details"]["causes"][0]["reason"] == "NamespaceTerminating"


async def test_deleting_a_namespace_deletes_its_contents(
    cluster: DevCluster, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    """Row 21 (namespace controller): contents are deleted, finalizers honoured, then the
    namespace goes."""
    await core.create_namespace({"metadata": {"name": "temp"}})
    await core.create_namespaced_pod("temp", pod("p"))
    await core.create_namespaced_config_map("temp", {"metadata": {"name": "c"}})
    body = widget("held")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    await custom.create_namespaced_custom_object(GROUP, VERSION, "temp", PLURAL, body)
    await core.delete_namespace("temp")
    await wait_gone(cluster, "pods", "temp", "p")
    await wait_gone(cluster, "configmaps", "temp", "c")
    held = await custom.get_namespaced_custom_object(GROUP, VERSION, "temp", PLURAL, "held")
    assert held["metadata"]["deletionTimestamp"]
    namespace = await core.read_namespace("temp")
    remaining = {c.type: c for c in namespace.status.conditions}
    assert remaining["NamespaceContentRemaining"].status == "True"
    await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "temp",
        PLURAL,
        "held",
        {"metadata": {"finalizers": None}},
        _content_type=MERGE,
    )
    await wait_gone(cluster, "namespaces", "", "temp")


async def test_immortal_namespaces_cannot_be_deleted(core: k8s.CoreV1Api) -> None:
    """Row 21 (NamespaceLifecycle): default, kube-system and kube-public are immortal."""
    status, error = await failure(core.delete_namespace("default"))
    assert status == 403
    assert (
        error["message"] == 'namespaces "default" is forbidden: this namespace may not be deleted'
    )


async def test_namespace_names_are_dns_labels(core: k8s.CoreV1Api) -> None:
    """Row 21: namespace names are RFC 1123 labels."""
    status, error = await failure(core.create_namespace({"metadata": {"name": "Bad.Name"}}))
    assert status == 422
    assert error["details"]["causes"][0]["field"] == "metadata.name"
