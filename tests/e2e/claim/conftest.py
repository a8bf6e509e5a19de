"""Fixtures of the SDK tests (test_sdk*.py): the official Kubernetes client and the published
agent-sandbox SDK, both on the kubeconfig `sandbus up` wrote (the ``sandbus_up`` fixture,
tests/e2e/conftest.py).

The SDK and the ``kubernetes`` client it depends on are optional (the ``sdk`` extra), so they
are imported inside the fixtures: the other tests of this directory run without them, and the
SDK tests skip themselves (``pytest.importorskip``) before they ask for these.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from k8s_agent_sandbox import SandboxClient
    from k8s_agent_sandbox.sandbox import Sandbox
    from kubernetes import client as k8s


@pytest.fixture
def kube(sandbus_up: Path) -> Iterator[k8s.ApiClient]:
    """The official client on the kubeconfig `sandbus up` wrote: the test's own reads."""
    from kubernetes import config as k8s_config

    with k8s_config.new_client_from_config(
        config_file=str(sandbus_up / "kubeconfig"), persist_config=False
    ) as api:
        yield api


@pytest.fixture
def sdk(sandbus_up: Path) -> Iterator[SandboxClient[Sandbox]]:
    """The SDK as a user points it at a kubeconfig file: its own ApiClient (K8sHelper would
    otherwise try the in-cluster config, then $KUBECONFIG as read when ``kubernetes`` was
    imported). The default connection config (a kubectl tunnel to the router) stays unused:
    the SDK connects to a sandbox only for commands and files."""
    from k8s_agent_sandbox import SandboxClient
    from kubernetes import config as k8s_config

    api = k8s_config.new_client_from_config(
        config_file=str(sandbus_up / "kubeconfig"), persist_config=False
    )
    client: SandboxClient[Sandbox] = SandboxClient(api_client=api)
    with api, client:
        yield client
