"""controller-runtime's and client-go's series, recorded for every reconciler beside sandbus's
own, under upstream's names and labels, so agent-sandbox's dashboards and alerts find them."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import aiohttp
import pytest

from events.envelope import ObjectKey
from services.runtime.endpoint import serve_metrics
from services.runtime.kube import KubeError
from services.runtime.metrics import BUILD_INFO, Metrics
from services.runtime.reconcile.actions import Plan
from services.runtime.reconcile.controller_series import (
    ControllerSeries,
    MeteredQueue,
    controller_name,
)
from tests.support.fakeapi import ScriptedApi
from tests.support.samples import obj
from tests.unit.runtime.toys import WIDGET, PodPerWidget, Scripted, make_worker, worker

TOY = "toy-widget"
"""The toy worker's Widget reconciler: no upstream controller, so ``<worker>-<kind>``."""

UPSTREAM_SERIES = (
    "controller_runtime_reconcile_total",
    "controller_runtime_reconcile_errors_total",
    "controller_runtime_reconcile_time_seconds",
    "controller_runtime_active_workers",
    "controller_runtime_max_concurrent_reconciles",
    "workqueue_depth",
    "workqueue_adds_total",
    "workqueue_queue_duration_seconds",
    "workqueue_work_duration_seconds",
    "workqueue_retries_total",
    "workqueue_unfinished_work_seconds",
    "workqueue_longest_running_processor_seconds",
    "agent_sandbox_build_info",
)
"""Every series name agent-sandbox v1.0.2's dashboards and alerts select."""


def results(metrics: Metrics, controller: str = TOY) -> dict[str, float]:
    found = {}
    for result in ("success", "error", "requeue", "requeue_after"):
        labels = {"controller": controller, "result": result}
        found[result] = metrics.value("controller_runtime_reconcile_total", labels, "_total") or 0
    return found


def queue_value(metrics: Metrics, name: str, suffix: str = "", controller: str = TOY) -> float:
    value = metrics.value(name, {"name": controller, "controller": controller}, suffix)
    return value or 0.0


@pytest.mark.parametrize(
    ("worker_name", "kind", "controller"),
    [
        ("claim", "SandboxClaim", "sandboxclaim"),
        ("sandbox", "Sandbox", "sandbox"),
        ("sandbox", "SandboxTemplate", "sandboxtemplate"),
        ("pool", "SandboxWarmPool", "sandboxwarmpool"),
        ("claim", "BatchSandbox", "batchsandbox"),
        ("pool", "Pool", "pool"),
        ("snapshot", "SandboxSnapshot", "sandboxsnapshot"),
        # reconcilers upstream has no controller for
        ("pool", "Sandbox", "pool-sandbox"),
        ("claim", "SandboxWarmPool", "claim-sandboxwarmpool"),
    ],
)
def test_each_reconciler_is_named_as_upstream_names_its_controller(
    worker_name: str, kind: str, controller: str
) -> None:
    assert controller_name(worker_name, kind) == controller


async def test_a_pass_counts_under_its_result_and_is_timed() -> None:
    """controller-runtime's results: ``requeue`` (again at once), ``requeue_after`` (later),
    ``success`` (nothing asked for); every pass is timed, every non-success one is a retry."""
    w = worker(PodPerWidget(), ScriptedApi())
    await w.reconcile(WIDGET)  # creates the Pod, comes back at once
    assert results(w.metrics) == {"success": 0, "error": 0, "requeue": 1, "requeue_after": 0}
    await w.reconcile(WIDGET)  # has its Pod: again in 30 s
    assert results(w.metrics) == {"success": 0, "error": 0, "requeue": 1, "requeue_after": 1}
    w.cache.observe("deleted", obj("Widget", "w"))
    await w.reconcile(WIDGET)  # gone: nothing to come back for
    assert results(w.metrics) == {"success": 1, "error": 0, "requeue": 1, "requeue_after": 1}

    timed = {"controller": TOY}
    assert w.metrics.value("controller_runtime_reconcile_time_seconds", timed, "_count") == 3
    bucket = {**timed, "le": "60.0"}
    assert w.metrics.value("controller_runtime_reconcile_time_seconds", bucket, "_bucket") == 3
    errors = w.metrics.value("controller_runtime_reconcile_errors_total", timed, "_total")
    assert errors in (None, 0)
    assert queue_value(w.metrics, "workqueue_retries", "_total") == 2
    # sandbus's own series stay
    own = {"worker": "toy", "kind": "Widget", "result": "ok"}
    assert w.metrics.value("sandbus_reconcile", own, "_total") == 3


async def test_a_failed_pass_is_an_error_and_a_raising_planner_a_panic_too() -> None:
    api = ScriptedApi()
    api.errors[("create", "w")] = KubeError(422, "Invalid", 'Pod "w" is invalid')
    w = worker(PodPerWidget(), api)
    await w.reconcile(WIDGET)
    labels = {"controller": TOY}
    assert results(w.metrics)["error"] == 1
    assert w.metrics.value("controller_runtime_reconcile_errors_total", labels, "_total") == 1
    assert queue_value(w.metrics, "workqueue_retries", "_total") == 1
    assert w.metrics.value("controller_runtime_reconcile_panics_total", labels, "_total") in (
        None,
        0,
    )

    exploding = worker(PodPerWidget(explode=True), ScriptedApi())
    await exploding.reconcile(WIDGET)
    assert results(exploding.metrics)["error"] == 1
    panics = exploding.metrics.value("controller_runtime_reconcile_panics_total", labels, "_total")
    assert panics == 1


async def test_a_pass_slowed_down_without_an_error_is_a_requeue() -> None:
    """A planner that writes on every pass is backed off: upstream's rate-limited Requeue."""
    w = worker(PodPerWidget(always_write=True), ScriptedApi(obj("Widget", "w")))
    for _ in range(3):
        await w.reconcile(WIDGET)
    assert results(w.metrics) == {"success": 0, "error": 0, "requeue": 3, "requeue_after": 0}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def series(clock: Clock) -> tuple[Metrics, ControllerSeries[ObjectKey]]:
    metrics = Metrics()
    s: ControllerSeries[ObjectKey] = ControllerSeries(
        metrics, "claim", ["SandboxClaim"], concurrency=4, kind_of=lambda k: k.kind, clock=clock
    )
    s.start()
    return metrics, s


def gauge(metrics: Metrics, family: str, labels: dict[str, str]) -> float | None:
    return metrics.value(family, labels)


async def test_the_work_queue_counts_adds_depth_and_durations() -> None:
    clock = Clock()
    metrics, s = series(clock)
    queue: MeteredQueue[ObjectKey] = MeteredQueue(s.book, base_delay=0.01, max_delay=1.0)
    claim = "sandboxclaim"
    first, second = (ObjectKey("SandboxClaim", "ns", n) for n in ("a", "b"))
    front = {"name": claim, "controller": claim, "priority": "0"}
    background = {**front, "priority": "-100"}

    queue.add(first)
    queue.add(first)  # already waiting: not another add
    queue.add(second, background=True)
    assert queue_value(metrics, "workqueue_adds", "_total", claim) == 2
    assert (
        gauge(metrics, "workqueue_depth", front),
        gauge(metrics, "workqueue_depth", background),
    ) == (1, 1)
    queue.add(second)  # asked for by a change: to the front lane
    assert (
        gauge(metrics, "workqueue_depth", front),
        gauge(metrics, "workqueue_depth", background),
    ) == (2, 0)

    clock.now += 0.5
    key, _ = await queue.get()
    assert key == first
    assert queue_value(metrics, "workqueue_queue_duration_seconds", "_sum", claim) == 0.5
    assert gauge(metrics, "workqueue_depth", front) == 1
    clock.now += 2
    key, _ = await queue.get()
    clock.now += 1
    labels = {"name": claim, "controller": claim}
    assert gauge(metrics, "workqueue_unfinished_work_seconds", labels) == 3 + 1
    assert gauge(metrics, "workqueue_longest_running_processor_seconds", labels) == 3

    queue.add(first)  # while its pass runs: counted, as the pass to come
    assert queue_value(metrics, "workqueue_adds", "_total", claim) == 3
    assert gauge(metrics, "workqueue_depth", front) == 1
    queue.done(first)
    queue.done(second)
    assert queue_value(metrics, "workqueue_work_duration_seconds", "_count", claim) == 2
    assert queue_value(metrics, "workqueue_work_duration_seconds", "_sum", claim) == 3 + 1
    assert gauge(metrics, "workqueue_unfinished_work_seconds", labels) == 0
    key, _ = await queue.get()
    assert key == first and gauge(metrics, "workqueue_depth", front) == 0


async def test_a_worker_reports_its_concurrency_and_the_passes_in_flight() -> None:
    seen: list[float | None] = []
    reconciler = Scripted()
    w = make_worker(reconciler)

    def plan(inputs: Any) -> Plan:
        seen.append(gauge(w.metrics, "controller_runtime_active_workers", {"controller": TOY}))
        return Plan()

    reconciler.plan_with = plan
    w.series.start()
    assert (
        gauge(w.metrics, "controller_runtime_max_concurrent_reconciles", {"controller": TOY}) == 16
    )
    assert gauge(w.metrics, "controller_runtime_active_workers", {"controller": TOY}) == 0
    task = asyncio.create_task(w._work())
    try:
        w.queue.add(WIDGET)
        async with asyncio.timeout(2):
            await w.settled()
    finally:
        w.queue.shutdown()
        async with asyncio.timeout(2):
            await task
    assert seen == [1]
    assert gauge(w.metrics, "controller_runtime_active_workers", {"controller": TOY}) == 0
    assert queue_value(w.metrics, "workqueue_adds", "_total") == 1
    assert queue_value(w.metrics, "workqueue_work_duration_seconds", "_count") == 1
    w.series.stop()
    assert gauge(w.metrics, "controller_runtime_active_workers", {"controller": TOY}) is None


def test_every_registry_says_which_build_it_is() -> None:
    text = Metrics().exposition().decode()
    (line,) = [line for line in text.splitlines() if line.startswith(BUILD_INFO + "{")]
    assert line.endswith(" 1.0")
    labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
    assert set(labels) == {
        "git_version",
        "git_commit",
        "build_date",
        "go_version",
        "compiler",
        "platform",
    }
    assert labels["git_version"].startswith("v")


async def test_a_running_worker_s_endpoint_serves_every_series_upstream_s_dashboards_select() -> (
    None
):
    w = worker(PodPerWidget(), ScriptedApi())

    async def load() -> dict[object, object]:
        return {}

    async def follow(_: object) -> None:
        await asyncio.Event().wait()

    w.memos.load = load  # type: ignore[method-assign,assignment]
    w.feed.run = follow  # type: ignore[method-assign,assignment]
    running = asyncio.create_task(w.run())
    runner = await serve_metrics(w.metrics, "127.0.0.1", 0)
    try:
        w.queue.add(WIDGET)
        async with asyncio.timeout(5):
            await w.settled()
        host, port = runner.addresses[0][:2]
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://{host}:{port}/metrics") as response,
        ):
            assert response.status == 200
            text = await response.text()
    finally:
        await runner.cleanup()
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(5):
                await running
    names = set(re.findall(r"^([a-zA-Z_:][\w:]*)[{ ]", text, re.MULTILINE))
    missing = [n for n in UPSTREAM_SERIES if n not in names and f"{n}_bucket" not in names]
    assert not missing, f"not served: {missing}"
    assert f'controller_runtime_reconcile_total{{controller="{TOY}",result="requeue"}} 1.0' in text
    assert f'workqueue_adds_total{{controller="{TOY}",name="{TOY}"}}' in text
    assert f'controller_runtime_max_concurrent_reconciles{{controller="{TOY}"}} 16.0' in text
