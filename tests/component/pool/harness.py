"""What the pools' component tests share (and the claim tests that make a warm pool): the
objects they create, SandboxTemplates, SandboxWarmPools and OpenSandbox Pools; reading back the
conditions and Events a pool says why with; and a real ``kubectl`` for the cluster.

A plain module, not a test module, so that a test in any directory can import it.
"""

from __future__ import annotations

from services.runtime.kube import KubeApi
from tests.support.events import events_about
from tests.support.samples import NS, Json

WARM_POOL_VERSION = "extensions.agents.x-k8s.io/v1beta1"
"""The apiVersion of SandboxTemplates and SandboxWarmPools."""
OPEN_POOL_VERSION = "sandbox.opensandbox.io/v1alpha1"
"""The apiVersion of OpenSandbox Pools."""


def template_body(name: str, container: Json) -> Json:
    """A SandboxTemplate whose Pods run ``container``."""
    return {
        "apiVersion": WARM_POOL_VERSION,
        "kind": "SandboxTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"podTemplate": {"spec": {"containers": [container]}}},
    }


def warm_pool_body(name: str, template: str, replicas: int) -> Json:
    """A SandboxWarmPool of ``replicas`` Sandboxes made from ``template``."""
    return {
        "apiVersion": WARM_POOL_VERSION,
        "kind": "SandboxWarmPool",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}},
    }


def open_pool_body(name: str, container: Json, capacity: tuple[int, int, int, int]) -> Json:
    """An OpenSandbox Pool whose Pods run ``container``, with ``capacity`` as (bufferMin,
    bufferMax, poolMin, poolMax)."""
    buffer_min, buffer_max, pool_min, pool_max = capacity
    return {
        "apiVersion": OPEN_POOL_VERSION,
        "kind": "Pool",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "template": {"spec": {"containers": [container]}},
            "capacitySpec": {
                "bufferMin": buffer_min,
                "bufferMax": buffer_max,
                "poolMin": pool_min,
                "poolMax": pool_max,
            },
        },
    }


def progressing(pool: Json | None) -> Json | None:
    """A SandboxWarmPool's Progressing condition, whatever its status, or None."""
    for each in ((pool or {}).get("status") or {}).get("conditions") or ():
        if each.get("type") == "Progressing":
            return dict(each)
    return None


def true_condition(obj: Json | None, kind: str) -> Json | None:
    """The condition of type ``kind`` of ``obj`` while its status is True, or None."""
    for each in ((obj or {}).get("status") or {}).get("conditions") or ():
        if each.get("type") == kind and each.get("status") == "True":
            return dict(each)
    return None


async def warm_pool_events(kube: KubeApi, name: str, reason: str) -> list[Json]:
    """The Events of ``reason`` about the SandboxWarmPool ``name``."""
    return await events_about(kube, "SandboxWarmPool", name, reason=reason)


async def open_pool_warnings(kube: KubeApi, name: str) -> list[Json]:
    """The Warning Events about the OpenSandbox Pool ``name``."""
    return await events_about(kube, "Pool", name, type="Warning")
