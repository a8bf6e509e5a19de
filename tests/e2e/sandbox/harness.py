"""What the sandbox worker's end-to-end tests share: reading what the Sandboxes own through the
API (not the bus)."""

from __future__ import annotations

from kubernetes_asyncio import client as k8s

from tests.support.samples import NS


async def pods_of_sandboxes(core: k8s.CoreV1Api) -> dict[str, int]:
    """Sandbox name → how many Pods it controls (read through the API, not the bus)."""
    owners: dict[str, int] = {}
    for pod in (await core.list_namespaced_pod(NS)).items:
        for ref in pod.metadata.owner_references or ():
            if ref.kind == "Sandbox" and ref.controller:
                owners[ref.name] = owners.get(ref.name, 0) + 1
    return owners
