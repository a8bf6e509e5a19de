"""What an operator reads in the watcher's log: leadership, recovery, relists with their reason
and counts, watch restarts, and the stop; never a line per event."""

from __future__ import annotations

import logging

import pytest
from kubernetes_asyncio import client as k8s
from nats.aio.client import Client

from devtools.cluster import DevCluster
from tests.component.watcher.harness import (
    ClusterHistory,
    burst,
    running_watcher,
    wait_caught_up,
    watcher_config,
)
from tests.support.waiting import until


async def test_the_log_tells_leadership_relists_and_restarts_but_not_events(
    cluster: DevCluster,
    client: k8s.ApiClient,
    nc: Client,
    history: ClusterHistory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    loggers = ("services.watcher", "services.runtime.election")  # the watcher, and its Lease
    for logger in loggers:
        caplog.set_level(logging.INFO, logger=logger)
    async with running_watcher(nc, client, watcher_config("logged")) as watcher:
        assert watcher.session is not None
        sandboxes = next(w for w in watcher.session.watchers if w.resource.kind == "Sandbox")

        async def expire() -> None:
            assert cluster.faults.break_watches("expire", resource="sandboxes") == 1

        async def abort() -> None:
            assert cluster.faults.break_watches("abort", resource="sandboxes") == 1

        await burst(client, 300, {100: expire, 200: abort})
        await wait_caught_up(nc.jetstream(), history, ["Sandbox"])

        async def relisted() -> bool:
            return sandboxes.stats.relists >= 2 and sandboxes.stats.broken >= 1

        await until(relisted, interval=0.1)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith(loggers)]
    text = "\n".join(lines)

    assert "logged leads default/sandbus-watcher" in text
    assert "logged recovered what was published: 0 objects" in text
    assert "Sandbox: relisted at resourceVersion" in text
    assert "(the session started): 0 objects selected" in text
    assert "NetworkPolicy: relisted at resourceVersion" in text
    assert "Sandbox: relisting: the watch expired" in text
    assert any(
        line.startswith("Sandbox: the watch stream broke") and "watching again from" in line
        for line in lines
    ), text
    assert "logged is stopping; ending its session" in text
    assert "logged released default/sandbus-watcher" in text
    # 300 changes, and a few dozen lines: nothing is logged per event.
    assert len(lines) < 60, text
