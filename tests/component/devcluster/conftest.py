"""Fixtures for the development cluster's conformance suite.

Every test drives an in-process :class:`DevCluster` through the real client, kubernetes_asyncio,
configured from the kubeconfig the cluster writes (the path a controller takes), or through raw
aiohttp where the wire itself is under test. The cluster gets a small ``widgets.example.com``
CRD with every feature the rows exercise: status and scale subresources, a schema with bounds,
an enum, a default and an unknown-fields-preserving subtree, a printer column and a selectable
field. Latency is zero and no kubelet or garbage collector runs, so what a test sees is the API
server alone. The CRD and the objects the tests build are in samples.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from devtools.cluster import DevCluster, LatencyModel
from tests.component.devcluster.samples import WIDGET_CRD, fast_watch


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
