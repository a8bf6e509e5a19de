"""Reading the Kubernetes Events sandbus wrote about an object, as a user lists them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.runtime.kube import KubeApi
from tests.support.kubectl import kubectl_for
from tests.support.samples import NS, Json
from tests.support.waiting import until


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


async def warned_and_described(
    kube: KubeApi,
    cluster: Any,
    tmp_path: Path,
    kind: str,
    name: str,
    *,
    condition: str,
    reason: str,
    message: str,
    within: float,
) -> None:
    """What a user sees of a problem condition raised on an object: one Warning Event of
    ``reason`` whose note is ``<condition>: <message>``, and ``kubectl describe`` naming both
    (printed, for the closing notes)."""

    async def warned() -> list[Json]:
        return await events_about(kube, kind, name, reason=reason, type="Warning")

    (event,) = await until(warned, within=within)
    assert event["note"] == f"{condition}: {message}"
    resource = kind.lower()
    described = await kubectl_for(cluster, tmp_path).ok("describe", resource, name, "-n", NS)
    print(f"\n$ kubectl describe {resource} {name}\n{described}")
    assert condition in described and reason in described
