"""A SandboxWarmPool that cannot make progress says why, on the object (issues #29 and #32,
docs/conditions.md §3), against the real thing: the development cluster, a nats-server with the
bus, the watcher, the sandbox worker and the pool worker, all in this process, a real API
client, and a real ``kubectl describe``.

- A pool whose template does not exist: ``Progressing=False/TemplateNotFound`` naming the
  template and what to do, and one Warning ``WarmPoolNotProgressing`` (upstream's Event reason,
  #1572); once the template is created the pool fills, the condition goes and a Normal
  ``WarmPoolProgressing`` says so.
- A pool whose template makes invalid Sandboxes (a container without an image): its members
  are Ready=False/InvalidConfiguration, and the pool says so once, with their message:
  ``Progressing=False/InvalidConfiguration``; once the template has an image the invalid members
  are replaced, the pool fills, and the condition goes.
"""

from __future__ import annotations

from pathlib import Path

from api.keys import LABEL_WARM_POOL_SANDBOX, name_hash
from events.envelope import ObjectKey
from services.runtime.kube import KubeApi
from tests.component.pool.harness import (
    progressing,
    template_body,
    warm_pool_body,
    warm_pool_events,
)
from tests.support.kubectl import kubectl_for
from tests.support.samples import NS, Json
from tests.support.stack import (
    api_client,
    bounded,
    cluster_and_watcher,
    pool_worker_running,
    sandbox_worker_running,
)
from tests.support.waiting import until

WITHIN = 20.0


async def members_of(kube: KubeApi, pool: str) -> list[Json]:
    return [
        s
        for s in await kube.list("Sandbox", NS)
        if (s["metadata"].get("labels") or {}).get(LABEL_WARM_POOL_SANDBOX) == name_hash(pool)
        and not s["metadata"].get("deletionTimestamp")
    ]


async def filled(kube: KubeApi, name: str, replicas: int) -> Json | None:
    """The pool, once it has ``replicas`` Ready members and no Progressing condition."""
    pool = await kube.get(ObjectKey("SandboxWarmPool", NS, name))
    status = (pool or {}).get("status") or {}
    if status.get("readyReplicas") == replicas and progressing(pool) is None:
        return pool
    return None


async def test_a_pool_whose_template_is_missing_says_so_until_it_exists(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
        sandbox_worker_running(cluster, js, bus, tmp_path),
        pool_worker_running(cluster, js, bus, tmp_path),
    ):
        kube = KubeApi(client, field_manager="e2e-test")
        name, template = "waits-for-tpl", "later-tpl"
        await kube.create(warm_pool_body(name, template, 2))

        async def stalled() -> Json | None:
            return progressing(await kube.get(ObjectKey("SandboxWarmPool", NS, name)))

        found = await until(stalled, within=WITHIN)
        assert (found["status"], found["reason"]) == ("False", "TemplateNotFound")
        assert found["message"] == (
            f'SandboxTemplate "{template}" not found in namespace "{NS}": create it, or set '
            "spec.sandboxTemplateRef.name to a template that exists; until then the pool "
            "creates no sandboxes"
        )

        async def warned() -> list[Json]:
            return await warm_pool_events(kube, name, "WarmPoolNotProgressing")

        (event,) = await until(warned, within=WITHIN)
        assert event["type"] == "Warning"
        assert event["note"] == f"TemplateNotFound: {found['message']}"

        described = await kubectl_for(cluster, tmp_path).ok(
            "describe", "sandboxwarmpool", name, "-n", NS
        )
        print(f"\n$ kubectl describe sandboxwarmpool {name}\n{described}")
        assert "Progressing" in described and "TemplateNotFound" in described
        assert f'SandboxTemplate "{template}" not found' in described
        assert "WarmPoolNotProgressing" in described

        # The template appears: the pool fills, the condition goes, a Normal Event says so.
        await kube.create(template_body(template, {"name": "app", "image": "python:3.12"}))
        pool = await until(lambda: filled(kube, name, 2), within=WITHIN)
        assert "conditions" not in (pool.get("status") or {})

        async def progressing_again() -> list[Json]:
            return await warm_pool_events(kube, name, "WarmPoolProgressing")

        (normal,) = await until(progressing_again, within=WITHIN)
        assert normal["type"] == "Normal"
        assert len(await warned()) == 1, "one Warning for the one transition"


async def test_a_pool_whose_template_makes_invalid_sandboxes_says_so_until_it_is_fixed(
    nats_url: str, tmp_path: Path
) -> None:
    async with (
        cluster_and_watcher(nats_url, tmp_path) as (cluster, _, js, bus),
        bounded(api_client(cluster, tmp_path, "test"), "the test's API client") as client,
        sandbox_worker_running(cluster, js, bus, tmp_path),
        pool_worker_running(cluster, js, bus, tmp_path),
    ):
        kube = KubeApi(client, field_manager="e2e-test")
        name, template = "bad-tpl-pool", "no-image"
        await kube.create(template_body(template, {"name": "app"}))
        await kube.create(warm_pool_body(name, template, 2))

        async def stalled() -> Json | None:
            found = progressing(await kube.get(ObjectKey("SandboxWarmPool", NS, name)))
            # Both members: the message counts them.
            return found if found and "(2 of 2 member(s)" in found["message"] else None

        found = await until(stalled, within=WITHIN)
        assert (found["status"], found["reason"]) == ("False", "InvalidConfiguration")
        assert found["message"] == (
            f'SandboxTemplate "{template}" makes sandboxes that cannot run (2 of 2 member(s) '
            "Ready=False/InvalidConfiguration): spec.podTemplate.spec.containers[0] has no "
            "image. Fix the template; the pool then replaces these members"
        )
        members = await members_of(kube, name)
        assert len(members) == 2, "no churn: the invalid members are held, not replaced"

        async def warned() -> list[Json]:
            return await warm_pool_events(kube, name, "WarmPoolNotProgressing")

        (event,) = await until(warned, within=WITHIN)
        assert event["type"] == "Warning"
        assert event["note"].startswith("InvalidConfiguration: ")
        assert "has no image" in event["note"]

        kubectl = kubectl_for(cluster, tmp_path)
        described = await kubectl.ok("describe", "sandboxwarmpool", name, "-n", NS)
        print(f"\n$ kubectl describe sandboxwarmpool {name}\n{described}")
        assert "InvalidConfiguration" in described and "has no image" in described
        member = members[0]["metadata"]["name"]
        described = await kubectl.ok("describe", "sandbox", member, "-n", NS)
        assert "has no image" in described, "each member says why too"

        # The template is fixed: the invalid members are replaced, the condition goes.
        await kube.patch(
            ObjectKey("SandboxTemplate", NS, template),
            {
                "spec": {
                    "podTemplate": {
                        "spec": {"containers": [{"name": "app", "image": "python:3.12"}]}
                    }
                }
            },
        )
        await until(lambda: filled(kube, name, 2), within=WITHIN)
        now = {m["metadata"]["uid"] for m in await members_of(kube, name)}
        assert not now & {m["metadata"]["uid"] for m in members}, "the invalid ones went"

        async def progressing_again() -> list[Json]:
            return await warm_pool_events(kube, name, "WarmPoolProgressing")

        await until(progressing_again, within=WITHIN)
        assert len(await warned()) == 1, "one Warning for the one transition"
