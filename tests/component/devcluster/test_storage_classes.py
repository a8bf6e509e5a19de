"""Row 28 of docs/devcluster.md §2: the default StorageClass and DefaultStorageClass admission.

Like kind or k3s, the cluster starts with a default StorageClass ``standard`` (local-path,
WaitForFirstConsumer); a PersistentVolumeClaim created without ``spec.storageClassName`` gets
it, one with an explicit ``""`` or another class keeps its own. Nothing binds claims: they stay
Pending, as WaitForFirstConsumer claims do until a Pod uses them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client as k8s

from devtools.cluster import DevCluster, LatencyModel, SimulationSettings
from tests.component.devcluster.samples import MERGE, failure
from tests.support.kubectl import KUBECTL, Kubectl

DEFAULT_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def claim(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            **spec,
        },
    }


def storage_class(name: str, provisioner: str = "example.com/fast", **extra: Any) -> Any:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, **extra.pop("metadata", {})},
        "provisioner": provisioner,
        **extra,
    }


@pytest.fixture
def storage(api: k8s.ApiClient) -> k8s.StorageV1Api:
    return k8s.StorageV1Api(api)


async def test_the_cluster_starts_with_a_default_storage_class(
    storage: k8s.StorageV1Api,
) -> None:
    """Row 28: ``standard``, marked default, local-path's provisioner, server defaults."""
    classes = (await storage.list_storage_class()).items
    assert [sc.metadata.name for sc in classes] == ["standard"]
    standard = classes[0]
    assert standard.metadata.annotations == {DEFAULT_ANNOTATION: "true"}
    assert standard.provisioner == "rancher.io/local-path"
    assert standard.reclaim_policy == "Delete"
    assert standard.volume_binding_mode == "WaitForFirstConsumer"


async def test_a_claim_without_a_class_gets_the_default(core: k8s.CoreV1Api) -> None:
    """Row 28 (DefaultStorageClass admission): absent or null → the default; ``""`` and a named
    class are kept. The claims stay Pending."""
    absent = await core.create_namespaced_persistent_volume_claim("default", claim("absent"))
    null = await core.create_namespaced_persistent_volume_claim(
        "default", claim("null", storageClassName=None)
    )
    empty = await core.create_namespaced_persistent_volume_claim(
        "default", claim("empty", storageClassName="")
    )
    named = await core.create_namespaced_persistent_volume_claim(
        "default", claim("named", storageClassName="fast")
    )
    assert absent.spec.storage_class_name == "standard"
    assert null.spec.storage_class_name == "standard"
    assert empty.spec.storage_class_name == ""
    assert named.spec.storage_class_name == "fast"
    assert absent.status.phase == "Pending"
    stored = await core.read_namespaced_persistent_volume_claim("absent", "default")
    assert stored.spec.storage_class_name == "standard"


async def test_the_newest_default_class_wins_and_none_means_no_class(
    core: k8s.CoreV1Api, storage: k8s.StorageV1Api
) -> None:
    """Row 28 (GetDefaultClass): with two default classes the newest wins (then the smaller
    name); with none, the claim keeps no class."""
    await storage.create_storage_class(
        storage_class("a-fast", metadata={"annotations": {DEFAULT_ANNOTATION: "true"}})
    )
    picked = await core.create_namespaced_persistent_volume_claim("default", claim("c1"))
    # Newer than ``standard``, or (creation timestamps are whole seconds) as new and smaller.
    assert picked.spec.storage_class_name == "a-fast"
    await storage.delete_storage_class("a-fast")
    await storage.delete_storage_class("standard")
    unset = await core.create_namespaced_persistent_volume_claim("default", claim("c2"))
    assert unset.spec.storage_class_name is None


async def test_storage_class_rules(storage: k8s.StorageV1Api) -> None:
    """Row 28 (storage validation): provisioner required; defaults; parameters, provisioner and
    reclaimPolicy immutable."""
    status, error = await failure(
        storage.create_storage_class(storage_class("bad", provisioner=""))
    )
    assert status == 422
    assert error["message"] == (
        'StorageClass.storage.k8s.io "bad" is invalid: provisioner: Required value'
    )
    created = await storage.create_storage_class(storage_class("fast", parameters={"a": "b"}))
    assert (created.reclaim_policy, created.volume_binding_mode) == ("Delete", "Immediate")
    status, error = await failure(
        storage.patch_storage_class(
            "fast", {"provisioner": "example.com/other"}, _content_type=MERGE
        )
    )
    assert status == 422
    assert error["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: updates to provisioner are forbidden.",
            "field": "provisioner",
        }
    ]
    patched = await storage.patch_storage_class(
        "fast", {"allowVolumeExpansion": True}, _content_type=MERGE
    )
    assert patched.allow_volume_expansion is True


@pytest.fixture
async def kubectl(tmp_path: Path) -> AsyncIterator[Kubectl]:
    if not KUBECTL.exists():
        pytest.skip(f"no kubectl at {KUBECTL}")
    settings = SimulationSettings(kubelet=False)
    async with DevCluster(port=0, latency=LatencyModel.zero(), simulation=settings) as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        home = tmp_path / "home"
        home.mkdir()
        yield Kubectl(kubeconfig, tmp_path / "kube-cache", home)


async def test_kubectl_shows_the_default_class(kubectl: Kubectl) -> None:
    """Row 28 through kubectl: ``get sc`` marks the default; a claim applied without a class
    shows it."""
    out = await kubectl.ok("get", "storageclass")
    header, row = out.splitlines()
    assert header.split() == [
        "NAME",
        "PROVISIONER",
        "RECLAIMPOLICY",
        "VOLUMEBINDINGMODE",
        "ALLOWVOLUMEEXPANSION",
        "AGE",
    ]
    assert row.split()[:6] == [
        "standard",
        "(default)",
        "rancher.io/local-path",
        "Delete",
        "WaitForFirstConsumer",
        "false",
    ]
    await kubectl.ok("apply", "-f", "-", stdin=yaml.safe_dump(claim("data")))
    stored = await kubectl.json("get", "pvc", "data", "-o", "json")
    assert stored["spec"]["storageClassName"] == "standard"
    assert stored["status"]["phase"] == "Pending"
