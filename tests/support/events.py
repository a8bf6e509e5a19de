"""Reading the Kubernetes Events sandbus wrote about an object, as a user lists them."""

from __future__ import annotations

from services.runtime.kube import KubeApi
from tests.support.samples import NS, Json


async def events_about(
    kube: KubeApi,
    kind: str,
    name: str | None = None,
    *,
    reason: str | None = None,
    type: str | None = None,
    namespace: str = NS,
) -> list[Json]:
    """The Events about the ``kind`` named ``name`` (any, when None), of ``reason`` and
    ``type`` when given."""
    return [
        event
        for event in await kube.list("Event", namespace)
        if (event.get("regarding") or {}).get("kind") == kind
        and (name is None or (event.get("regarding") or {}).get("name") == name)
        and (reason is None or event.get("reason") == reason)
        and (type is None or event.get("type") == type)
    ]
