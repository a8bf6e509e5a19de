"""``sandbus run watcher`` killed with SIGKILL in the middle of 1,000 changes, then started again.

The reference is the development cluster's own record of every commit. The duplicate window is
0.2 s, so a change published twice would be stored twice: "no id twice" is the watcher's doing,
not deduplication's. The rule for the gap is the issue's: what changed while no watcher ran
gets exactly one event, for its latest state; what was deleted gets a synthetic deletion.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from kubernetes_asyncio import client as k8s
from nats.aio.client import Client

from devtools.cluster import DevCluster
from tests.component.watcher.harness import (
    ClusterHistory,
    assert_consistent,
    burst,
    event_log,
    wait_caught_up,
    wait_publishing,
)
from tests.e2e.watcher.processes import WatcherProcess, lease_holder, wait_holder

pytestmark = pytest.mark.slow


async def test_sigkill_mid_burst_then_restart_loses_and_duplicates_nothing(
    cluster: DevCluster,
    client: k8s.ApiClient,
    nc: Client,
    history: ClusterHistory,
    start_watcher: Callable[[str], WatcherProcess],
) -> None:
    first = start_watcher("first")
    await wait_holder(cluster, "first")
    await wait_publishing(client, nc, "marker-first")
    t_kill = 0.0

    async def kill_first() -> None:
        nonlocal t_kill
        first.kill()
        t_kill = time.monotonic()

    # Phase 1 with the watcher up, SIGKILL mid-burst, phase 2 with no watcher at all.
    await burst(client, 600, {300: kill_first}, objects=60)
    t_down_end = time.monotonic()
    assert not first.alive
    logged_at_kill = await event_log(nc.jetstream())

    second = start_watcher("second")
    await wait_holder(cluster, "second")  # after the dead holder's lease expired
    t_ready = await wait_publishing(client, nc, "marker-second")
    await burst(client, 400, objects=40, seed=8, prefix="late")  # phase 3, the watcher up
    logged = await wait_caught_up(
        nc.jetstream(), history, ["Sandbox"], within=40.0, gap=(t_kill - 1.0, t_down_end)
    )
    assert second.alive, second.log()

    collapsed = assert_consistent(
        history, logged, ["Sandbox"], exact_before=t_kill - 1.0, exact_after=t_ready
    )
    assert len(logged_at_kill) > 100, "the kill did not come in the middle of the burst"
    assert collapsed > 0, "no change happened while the watcher was down"

    # The gap: one event per object that changed while down, for its latest state.
    down = [c for c in history.of(["Sandbox"]) if t_kill <= c.at < t_down_end]
    last_down = {c.object_id: c for c in down}
    down_ids = {(c.uid, c.rv) for c in down}
    for object_id, final in last_down.items():
        events = [e for e in logged if e.object_id == object_id and (e.uid, e.rv) in down_ids]
        if final.type == "DELETED":
            assert events == [], f"{object_id}: a change nobody watched was published"
        else:
            assert [(e.uid, e.rv) for e in events] == [(final.uid, final.rv)], object_id
    synthetic = [e for e in logged if e.event.data.synthetic]
    assert synthetic, "nothing published before the kill was deleted while down"
    assert all(e.change == "deleted" for e in synthetic)

    # SIGTERM, as Kubernetes stops a Pod: a clean exit that hands the Lease back.
    assert await asyncio.to_thread(second.terminate) == 0
    assert lease_holder(cluster) == ""
