"""What the claim worker's end-to-end tests share: claims, their outcome, the one-to-one
check, and the workers and warm queue they run with."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats

from api.keys import LABEL_LAUNCH_TYPE, name_hash
from api.objects import Json
from events.subjects import warm_queue_filter
from services.runtime.kube import KubeApi
from tests.e2e.services import service
from tests.e2e.world import members, ready_members
from tests.support.samples import NS, is_ready


def claim_body(name: str, pool: str, **spec: Any) -> Json:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"warmPoolRef": {"name": pool}, **spec},
    }


def claim_ready(claim: Json) -> bool:
    """Is the claim Ready, and bound to a Sandbox?"""
    return is_ready(claim) and bool((claim.get("status") or {}).get("sandbox"))


async def claims_ready(kube: KubeApi, names: set[str]) -> bool:
    claims = {c["metadata"]["name"]: c for c in await kube.list("SandboxClaim", NS)}
    return all(name in claims and claim_ready(claims[name]) for name in names)


async def bindings(kube: KubeApi) -> dict[str, str]:
    """Claim → the Sandbox its status names; asserts one-to-one against the Sandboxes'
    controllers: every bound Sandbox is controlled by exactly its claim, no Sandbox by two."""
    claims = await kube.list("SandboxClaim", NS)
    sandboxes = {s["metadata"]["name"]: s for s in await kube.list("Sandbox", NS)}
    bound: dict[str, str] = {}
    for claim in claims:
        name = ((claim.get("status") or {}).get("sandbox") or {}).get("name")
        if name:
            bound[claim["metadata"]["name"]] = name
    twice = [name for name, count in Counter(bound.values()).items() if count > 1]
    assert not twice, f"sandboxes bound to two claims: {twice}"
    controlled: Counter[str] = Counter()
    for sandbox in sandboxes.values():
        for ref in sandbox["metadata"].get("ownerReferences") or ():
            if ref.get("controller") and ref.get("kind") == "SandboxClaim":
                controlled[ref["name"]] += 1
    many = [claim for claim, count in controlled.items() if count > 1]
    assert not many, f"claims controlling more than one Sandbox: {many}: " + str(
        [
            (s["metadata"]["name"], (s["metadata"].get("labels") or {}).get(LABEL_LAUNCH_TYPE))
            for s in sandboxes.values()
            for ref in s["metadata"].get("ownerReferences") or ()
            if ref.get("controller") and ref.get("name") in many
        ]
    )
    for claim, sandbox in bound.items():
        refs = sandboxes[sandbox]["metadata"].get("ownerReferences") or ()
        assert [r["name"] for r in refs if r.get("controller")] == [claim], (claim, sandbox)
    return bound


async def launch_types(kube: KubeApi, sandboxes: set[str]) -> Counter[str]:
    return Counter(
        (s["metadata"].get("labels") or {}).get(LABEL_LAUNCH_TYPE, "?")
        for s in await kube.list("Sandbox", NS)
        if s["metadata"]["name"] in sandboxes
    )


async def claim_decisions(url: str, name: str) -> list[dict[str, Any]]:
    """The ``data`` of every decision the claim worker recorded about claim ``name``."""
    import msgspec
    import nats

    from events.subjects import encode_token
    from services.runtime.streams import read_to_end

    connection = await nats.connect(url)
    try:
        subject = f"sandbus.decisions.claim.sandboxclaim.{encode_token(NS)}.{encode_token(name)}"
        return [
            msgspec.json.decode(msg.data)["data"]
            async for msg in read_to_end(connection.jetstream(), "SANDBUS_EVENTS", [subject])
        ]
    finally:
        await connection.close()


async def recent_decisions(url: str, names: list[str], last: int = 6) -> str:
    """The claim worker's last decisions about ``names``, for a failure's message."""
    import msgspec
    import nats

    from events.subjects import encode_token
    from services.runtime.streams import read_to_end

    connection = await nats.connect(url)
    lines: list[str] = []
    try:
        js = connection.jetstream()
        for name in names:
            found: list[str] = []
            subject = (
                f"sandbus.decisions.claim.sandboxclaim.{encode_token(NS)}.{encode_token(name)}"
            )
            async for msg in read_to_end(js, "SANDBUS_EVENTS", [subject]):
                data = msgspec.json.decode(msg.data)["data"]
                actions = [
                    f"{a['verb']}: {a.get('detail')}{' !' + a['error'] if a.get('error') else ''}"
                    for a in data.get("actions") or ()
                ]
                found.append(
                    f"  {data.get('outcome')} {data.get('reason')} {actions} "
                    f"err={data.get('error')} next={data.get('requeueAfterSeconds')}"
                )
            lines.append(f"{name}:\n" + "\n".join(found[-last:]))
    finally:
        await connection.close()
    return "\n".join(lines)


CLAIM_ENV = {"SANDBUS_CLAIM_REPLICA_TTL": "1", "SANDBUS_CLAIM_ACK_WAIT": "2"}


async def not_ready(kube: KubeApi, names: set[str]) -> list[str]:
    claims = {c["metadata"]["name"]: c for c in await kube.list("SandboxClaim", NS)}
    return sorted(n for n in names if n not in claims or not claim_ready(claims[n]))


async def queue_depth(url: str, pool: str) -> int:
    connection = await nats.connect(url)
    try:
        info = await connection.jetstream().stream_info(
            "SANDBUS_WARM", subjects_filter=warm_queue_filter(NS, name_hash("tpl"), pool)
        )
        return sum((info.state.subjects or {}).values())
    finally:
        await connection.close()


async def queue_matches_pool(url: str, kube: KubeApi, pool: str, size: int) -> bool:
    """The pool is full and Ready, and its queue holds exactly those members."""
    ready = await ready_members(kube, pool)
    return ready == size == len(await members(kube, pool)) and await queue_depth(url, pool) == ready


async def create_claims(kube: KubeApi, names: list[str], pool: str) -> None:
    await asyncio.gather(*(kube.create(claim_body(name, pool)) for name in names))


@asynccontextmanager
async def workers(url: str, kubeconfig: Path, logs: Path) -> AsyncIterator[None]:
    async with (
        service("watcher", url, kubeconfig, logs),
        service("sandbox", url, kubeconfig, logs),
        service("pool", url, kubeconfig, logs),
    ):
        yield
