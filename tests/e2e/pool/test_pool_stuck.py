"""End to end: members that never become Ready, with the watcher, the sandbox worker and the
pool worker as their own processes, the readiness grace cut to 2 s.

What must hold (docs/agent-sandbox.md §4.2 step 5 and step 10, upstream
``TestReconcilePoolGCStuckSandboxes`` and ``TestReconcilePool_UnschedulableStuckGC``): a member
whose Pod runs but is never Ready is deleted once its grace is over, never before, and replaced,
one generation per grace at most; a member whose Pod cannot be scheduled is held, not churned,
and the pool says so with a ``WarmPoolNotProgressing`` Warning Event.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from api.keys import LABEL_WARM_POOL_SANDBOX, name_hash
from devtools.cluster.controllers.kubelet.config import FAIL_ANNOTATION
from services.runtime.kube import KubeApi
from tests.component.watcher.harness import ClusterHistory
from tests.e2e.services import log_tails, service
from tests.e2e.world import (
    Json,
    cluster_world,
    creates_of,
    members,
    pool_body,
    pool_status,
    template_body,
)
from tests.support.samples import NS
from tests.support.waiting import until

pytestmark = pytest.mark.slow

SIZE = 2
GRACE = 2.0
HELD_FOR = 8.0
"""Seconds past their grace that Unschedulable members must still be there."""
POOL_ENV = {
    "SANDBUS_POOL_READINESS_GRACE": f"{GRACE:g}",
    "SANDBUS_POOL_UNSCHEDULABLE_RECHECK": "1",
}


def lifetimes(history: ClusterHistory, pool: str) -> list[float]:
    """Seconds from ADDED to DELETED of each of the pool's members that is gone."""
    wanted = name_hash(pool)
    added: dict[str, float] = {}
    lived: list[float] = []
    for change in history.of(["Sandbox"]):
        if change.labels.get(LABEL_WARM_POOL_SANDBOX) != wanted:
            continue
        if change.type == "ADDED":
            added[change.uid] = change.at
        elif change.type == "DELETED" and change.uid in added:
            lived.append(change.at - added[change.uid])
    return lived


async def events_about(kube: KubeApi, pool: str, reason: str) -> list[Json]:
    return [
        event
        for event in await kube.list("Event", NS)
        if event.get("reason") == reason
        and (event.get("regarding") or {}).get("kind") == "SandboxWarmPool"
        and (event.get("regarding") or {}).get("name") == pool
    ]


async def test_stuck_members_are_replaced_after_their_grace_and_unschedulable_ones_held(
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
                service("pool", url, kubeconfig, logs, env=POOL_ENV),
            ):
                await kube.create(template_body("stuck-tpl", **{FAIL_ANNOTATION: "never-ready"}))
                await kube.create(template_body("held-tpl", **{FAIL_ANNOTATION: "unschedulable"}))
                started = time.monotonic()
                await kube.create(pool_body("stuck", SIZE, template="stuck-tpl"))
                await kube.create(pool_body("held", SIZE, template="held-tpl"))

                async def held_members() -> bool:
                    return len(await members(kube, "held")) == SIZE

                await until(held_members, within=30, interval=0.1)
                held_since = time.monotonic()

                async def replaced() -> bool:
                    return bool(lifetimes(history, "stuck")) and creates_of(history, "stuck") > SIZE

                await until(replaced, within=30, interval=0.1)

                # The held members outlive their grace by HELD_FOR seconds, while the stuck
                # pool goes on replacing its members.
                await asyncio.sleep(max(held_since + GRACE + HELD_FOR - time.monotonic(), 0.0))
                elapsed = time.monotonic() - started

                lived = lifetimes(history, "stuck")
                # creationTimestamp has whole seconds: a member may look up to 1 s older.
                assert min(lived) >= GRACE - 1.0, f"deleted before the grace was over: {lived}"
                creates = creates_of(history, "stuck")
                assert SIZE < creates <= SIZE * (1 + elapsed / (GRACE - 1.0)), creates
                assert len(await members(kube, "stuck")) == SIZE

                assert lifetimes(history, "held") == [], "an Unschedulable member was deleted"
                assert creates_of(history, "held") == SIZE
                assert len(await members(kube, "held")) == SIZE
                status = await pool_status(kube, "held")
                assert (status.get("replicas"), status.get("readyReplicas")) == (SIZE, None)

                warnings = await events_about(kube, "held", "WarmPoolNotProgressing")
                assert [event.get("type") for event in warnings] == ["Warning"], warnings
                assert await events_about(kube, "stuck", "WarmPoolNotProgressing") == []
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{log_tails(logs)}") from None
