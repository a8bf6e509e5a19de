"""Fixtures for the development cluster's conformance suite.

Every test drives an in-process :class:`DevCluster` through the real client, kubernetes_asyncio,
configured from the kubeconfig the cluster writes (the path a controller takes), or through raw
aiohttp where the wire itself is under test. The cluster gets a small ``widgets.example.com``
CRD with every feature the rows exercise: status and scale subresources, a schema with bounds,
an enum, a default and an unknown-fields-preserving subtree, a printer column and a selectable
field. Latency is zero and no kubelet or garbage collector runs, so what a test sees is the API
server alone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

from services.devcluster import DevCluster, LatencyModel, WatchSettings

Json = dict[str, Any]
GROUP = "example.com"
VERSION = "v1"
PLURAL = "widgets"
MERGE = "application/merge-patch+json"

WIDGET_CRD: Json = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}
                ],
                "selectableFields": [{"jsonPath": ".spec.color"}],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "integer", "minimum": 0, "maximum": 10},
                                    "replicas": {"type": "integer", "default": 1},
                                    "color": {"type": "string", "enum": ["red", "blue"]},
                                    "extra": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "replicas": {"type": "integer"},
                                    "selector": {"type": "string"},
                                    "phase": {"type": "string"},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


def fast_watch() -> WatchSettings:
    return WatchSettings(
        bookmark_interval=60.0, bookmark_before_deadline=0.3, too_large_wait=0.3, idle_check=0.05
    )


@pytest.fixture
def crd_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "crds"
    directory.mkdir()
    (directory / "widgets.yaml").write_text(yaml.safe_dump(WIDGET_CRD))
    return directory


@pytest.fixture
async def cluster(crd_dir: Path) -> AsyncIterator[DevCluster]:
    async with DevCluster(
        port=0,
        crd_dirs=[crd_dir],
        latency=LatencyModel.zero(),
        controllers=[],
        watch=fast_watch(),
        too_large_wait=0.3,
    ) as running:
        yield running


@pytest.fixture
async def api(cluster: DevCluster, tmp_path: Path) -> AsyncIterator[k8s.ApiClient]:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    async with k8s.ApiClient(configuration) as client:
        yield client


@pytest.fixture
def core(api: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api)


@pytest.fixture
def custom(api: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api)


@pytest.fixture
async def http(cluster: DevCluster) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=cluster.url) as session:
        yield session


def widget(name: str = "w1", **spec: Any) -> Json:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec or {"size": 1},
    }


def pod(name: str, *, labels: dict[str, str] | None = None, **spec: Any) -> Json:
    spec.setdefault("containers", [{"name": "app", "image": "nginx:1.25"}])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


async def failure(call: Awaitable[Any]) -> tuple[int, Json]:
    """Await a client call that must fail; returns the HTTP status and the Status body."""
    with pytest.raises(ApiException) as caught:
        await call
    return caught.value.status, json.loads(caught.value.body)


async def until(cluster: DevCluster, predicate: Callable[[], bool], within: float = 5.0) -> None:
    """Wait (at most ``within`` seconds) until ``predicate`` holds, re-checking on every commit."""
    changed = asyncio.Event()
    subscription = cluster.store.subscribe(None, lambda change: changed.set())
    try:
        async with asyncio.timeout(within):
            while not predicate():
                changed.clear()
                await changed.wait()
    finally:
        subscription.close()


async def create_widget(custom: k8s.CustomObjectsApi, name: str = "w1", **spec: Any) -> Json:
    created: Json = await custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, widget(name, **spec)
    )
    return created
