"""End to end: a template's image changes under two SandboxWarmPools, one under each update
strategy, with the watcher, the sandbox worker and the pool worker as their own processes.

What must hold (upstream ``TestReconcilePool_TemplateUpdateRollout``, docs/agent-sandbox.md
§4.5): under ``Recreate`` every member is replaced by one with the new image; under
``OnReplenish`` no member is replaced, and only the members made after some were deleted carry
the new image.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from events.envelope import ObjectKey
from services.runtime.kube import KubeApi
from tests.e2e.services import log_tails, service
from tests.e2e.world import (
    Json,
    cluster_world,
    creates_of,
    members,
    pool_body,
    ready_members,
    template_body,
)
from tests.support.samples import NS
from tests.support.waiting import until

pytestmark = pytest.mark.slow

SIZE = 5
OLD, NEW = "python:3.12", "python:3.13"


def image_of(sandbox: Json) -> str:
    return str(sandbox["spec"]["podTemplate"]["spec"]["containers"][0]["image"])


async def images(kube: KubeApi, pool: str) -> dict[str, str]:
    """The pool's members, name → image."""
    return {s["metadata"]["name"]: image_of(s) for s in await members(kube, pool)}


async def test_recreate_replaces_every_member_and_on_replenish_only_the_replenished(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    async with cluster_world(tmp_path) as (nats_server, _, kube, kubeconfig, history):
        url = nats_server.url
        try:
            async with (
                service("watcher", url, kubeconfig, logs),
                service("sandbox", url, kubeconfig, logs),
                service("pool", url, kubeconfig, logs),
            ):
                await kube.create(template_body(image=OLD))
                await kube.create(pool_body("recreate", SIZE, strategy="Recreate"))
                await kube.create(pool_body("replenish", SIZE, strategy="OnReplenish"))

                async def both_full() -> bool:
                    return (
                        await ready_members(kube, "recreate") == SIZE
                        and await ready_members(kube, "replenish") == SIZE
                    )

                await until(both_full, within=60, interval=0.2)
                recreated_before = await images(kube, "recreate")
                replenished_before = await images(kube, "replenish")
                assert set(recreated_before.values()) == {OLD}
                assert set(replenished_before.values()) == {OLD}

                await kube.patch(
                    ObjectKey("SandboxTemplate", NS, "tpl"),
                    {
                        "spec": {
                            "podTemplate": {"spec": {"containers": [{"name": "app", "image": NEW}]}}
                        }
                    },
                )

                # Recreate: every member replaced, the new ones Ready.
                async def rolled() -> dict[str, str]:
                    now = await images(kube, "recreate")
                    done = (
                        len(now) == SIZE
                        and set(now.values()) == {NEW}
                        and await ready_members(kube, "recreate") == SIZE
                    )
                    return now if done else {}

                recreated = await until(rolled, within=60, interval=0.2)
                assert not set(recreated) & set(recreated_before), "the old names are gone"
                assert creates_of(history, "recreate") == 2 * SIZE

                # OnReplenish: the template change reached this pool too (the same template,
                # the same pass of the worker), and nothing was replaced.
                assert await images(kube, "replenish") == replenished_before
                assert creates_of(history, "replenish") == SIZE

                # Two members go; their replacements are made from the new template.
                gone = sorted(replenished_before)[:2]
                for name in gone:
                    await kube.delete(ObjectKey("Sandbox", NS, name))

                async def replenished() -> dict[str, str]:
                    now = await images(kube, "replenish")
                    done = (
                        len(now) == SIZE
                        and not set(now) & set(gone)
                        and await ready_members(kube, "replenish") == SIZE
                    )
                    return now if done else {}

                after = await until(replenished, within=60, interval=0.2)
                kept = {name: after[name] for name in after if name in replenished_before}
                new = {name: after[name] for name in after if name not in replenished_before}
                assert kept == {n: OLD for n in replenished_before if n not in gone}
                assert list(new.values()) == [NEW, NEW]
                assert creates_of(history, "replenish") == SIZE + 2
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None
