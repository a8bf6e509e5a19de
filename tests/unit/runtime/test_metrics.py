"""A worker's metrics: declaring them, recording through ``Record`` actions, and the
``/metrics`` endpoint serving them in the Prometheus text format."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest

from events.envelope import ObjectKey
from services.runtime.cache import ObjectCache
from services.runtime.endpoint import READINESS, metrics_endpoint, serve_metrics
from services.runtime.metrics import (
    RECONCILES,
    Metrics,
    MetricsError,
    MetricSpec,
    metrics_address,
)
from services.runtime.reconcile.actions import Plan, Record
from services.runtime.reconcile.executing import (
    RUNTIME_EXECUTORS,
    ExecutionContext,
    execute,
)

KEY = ObjectKey("SandboxClaim", "default", "c1")
COUNT = MetricSpec("things_total", "counter", "Things.", ("kind",))
LATENCY = MetricSpec("wait_ms", "histogram", "Waits.", ("kind",), (10.0, 100.0), per_second=1000)


def test_counters_and_histograms_record_under_their_labels() -> None:
    metrics = Metrics([COUNT, LATENCY])
    metrics.record("things_total", {"kind": "a"})
    metrics.record("things_total", {"kind": "a"}, 2)
    metrics.record("wait_ms", {"kind": "a"}, 42)
    assert metrics.value("things_total", {"kind": "a"}, "_total") == 3
    assert metrics.value("wait_ms", {"kind": "a"}, "_count") == 1
    assert metrics.value("wait_ms", {"kind": "a", "le": "10.0"}, "_bucket") == 0
    assert metrics.value("wait_ms", {"kind": "a", "le": "100.0"}, "_bucket") == 1
    text = metrics.exposition().decode()
    assert 'things_total{kind="a"} 3.0' in text
    assert "things_created" not in text, "no _created series"
    assert RECONCILES in text, "every worker's own metrics are declared"


@pytest.mark.parametrize(
    ("name", "labels", "value", "problem"),
    [
        ("nothing", {}, 1, "no metric nothing"),
        ("things_total", {"other": "x"}, 1, "takes the labels"),
        ("things_total", {}, 1, "takes the labels"),
        ("things_total", {"kind": "a"}, -1, "cannot go down"),
    ],
)
def test_what_was_not_declared_is_refused(
    name: str, labels: dict[str, str], value: float, problem: str
) -> None:
    with pytest.raises(MetricsError, match=problem):
        Metrics([COUNT]).record(name, labels, value)


def test_a_metric_declared_twice_must_be_the_same() -> None:
    metrics = Metrics([COUNT])
    metrics.declare([COUNT])
    with pytest.raises(MetricsError, match="declared twice"):
        metrics.declare([MetricSpec("things_total", "counter", "Other help.")])


async def run(metrics: Metrics | None, *actions: Record) -> list[tuple[str, str | None]]:
    context = ExecutionContext(api=None, cache=ObjectCache(), metrics=metrics)  # type: ignore[arg-type]
    done = await execute(Plan(actions=actions), RUNTIME_EXECUTORS, context)
    return [(outcome.note, outcome.error) for outcome in done.outcomes]


async def test_a_record_since_a_moment_observes_the_time_passed_in_the_metrics_unit() -> None:
    metrics = Metrics([LATENCY])
    started = datetime.now(UTC) - timedelta(seconds=0.05)
    ((note, error),) = await run(metrics, Record("wait_ms", {"kind": "a"}, KEY, since=started))
    assert error is None and note.startswith("recorded")
    observed = metrics.value("wait_ms", {"kind": "a"}, "_sum")
    assert observed is not None and 50 <= observed < 5_000


async def test_a_start_in_the_future_records_nothing() -> None:
    """Upstream skips a negative webhook latency rather than observing nonsense."""
    metrics = Metrics([LATENCY])
    later = datetime.now(UTC) + timedelta(minutes=5)
    ((note, error),) = await run(metrics, Record("wait_ms", {"kind": "a"}, KEY, since=later))
    assert error is None and "future" in note
    assert metrics.value("wait_ms", {"kind": "a"}, "_count") is None


async def test_an_undeclared_record_fails_the_action_and_no_metrics_is_no_failure() -> None:
    ((_, error),) = await run(Metrics(), Record("nothing", {}, KEY))
    assert error is not None and "no metric nothing" in error
    ((note, error),) = await run(None, Record("nothing", {}, KEY))
    assert error is None and note == "no metrics here"


@pytest.mark.parametrize(
    ("text", "address"),
    [(":8080", ("0.0.0.0", 8080)), ("127.0.0.1:9100", ("127.0.0.1", 9100)), ("", None)],
)
def test_the_address_setting(text: str, address: tuple[str, int] | None) -> None:
    assert metrics_address({"SANDBUS_METRICS_ADDRESS": text}) == address


@pytest.mark.parametrize("text", ["8080", "host:", "host:port", ":99999"])
def test_a_bad_address_is_refused_with_the_setting_named(text: str) -> None:
    with pytest.raises(MetricsError, match="SANDBUS_METRICS_ADDRESS"):
        metrics_address({"SANDBUS_METRICS_ADDRESS": text})


async def test_the_endpoint_serves_the_text_format() -> None:
    metrics = Metrics([COUNT])
    metrics.record("things_total", {"kind": "b"})
    runner = await serve_metrics(metrics, "127.0.0.1", 0)
    try:
        host, port = runner.addresses[0][:2]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://{host}:{port}/metrics") as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain")
                assert 'things_total{kind="b"} 1.0' in await response.text()
            async with session.get(f"http://{host}:{port}/other") as missing:
                assert missing.status == 404
    finally:
        await runner.cleanup()


async def test_services_of_one_process_share_one_endpoint_until_the_last_leaves() -> None:
    """``sandbus up`` runs every worker in one process: the second cannot bind the port again,
    so it joins the first's endpoint, which stays up until both have left."""
    metrics = Metrics([COUNT])
    runner = await serve_metrics(Metrics(), "127.0.0.1", 0)
    port = runner.addresses[0][1]
    await runner.cleanup()  # a port known to be free now
    url = f"http://127.0.0.1:{port}/metrics"
    async with aiohttp.ClientSession() as session:
        async with metrics_endpoint(metrics, "127.0.0.1", port):
            async with metrics_endpoint(metrics, "127.0.0.1", port), session.get(url) as response:
                assert response.status == 200
            async with session.get(url) as response:
                assert response.status == 200, "the first service still serves"
        with pytest.raises(aiohttp.ClientConnectionError):
            async with session.get(url):
                pass


async def test_services_starting_at_the_same_moment_bind_the_port_once() -> None:
    """What ``sandbus up`` does: every worker enters the endpoint at once; one binds."""
    runner = await serve_metrics(Metrics(), "127.0.0.1", 0)
    port = runner.addresses[0][1]
    await runner.cleanup()
    entered = asyncio.Event()
    inside = 0

    async def service() -> None:
        nonlocal inside
        async with metrics_endpoint(Metrics(), "127.0.0.1", port):
            inside += 1
            if inside == 3:
                entered.set()
            await entered.wait()

    await asyncio.wait_for(asyncio.gather(service(), service(), service()), timeout=10)
    assert inside == 3


async def test_a_port_in_use_fails_every_service_that_waits_for_it() -> None:
    blocker = await serve_metrics(Metrics(), "127.0.0.1", 0)
    port = blocker.addresses[0][1]
    try:
        with pytest.raises(OSError):
            async with metrics_endpoint(Metrics(), "127.0.0.1", port):
                pass
    finally:
        await blocker.cleanup()


async def test_liveness_and_readiness_answer_on_the_same_endpoint() -> None:
    """``/healthz`` answers while the process does; ``/readyz`` is 200 once every service of
    the process is ready, else 503 naming what each one waits for."""
    runner = await serve_metrics(Metrics(), "127.0.0.1", 0)
    host, port = runner.addresses[0][:2]
    waiting: list[str | None] = ["loading the state table"]
    READINESS.add("test-worker", lambda: waiting[0])
    try:
        async with aiohttp.ClientSession(base_url=f"http://{host}:{port}") as session:
            async with session.get("/healthz") as response:
                assert (response.status, await response.text()) == (200, "ok\n")
            async with session.get("/readyz") as response:
                assert response.status == 503
                assert await response.text() == "test-worker: loading the state table\n"
            waiting[0] = None
            async with session.get("/readyz") as response:
                assert (response.status, await response.text()) == (200, "ok\n")
    finally:
        READINESS.discard("test-worker")
        await runner.cleanup()


def test_counters_a_service_keeps_itself_are_read_at_each_scrape() -> None:
    """The watcher's publishing statistics: read when scraped, one counter per field; a
    service started again in the same process replaces its reader."""
    metrics = Metrics()
    stats = {"published": 3, "retries": 0}
    metrics.read_from("sandbus_watcher", "Publishing.", lambda: stats)
    text = metrics.exposition().decode()
    assert "sandbus_watcher_published_total 3.0" in text
    assert "sandbus_watcher_retries_total 0.0" in text
    stats["published"] = 5
    assert metrics.value("sandbus_watcher_published", {}, "_total") == 5
    metrics.read_from("sandbus_watcher", "Publishing.", lambda: {"published": 1})
    assert metrics.value("sandbus_watcher_published", {}, "_total") == 1


def test_the_workers_of_one_process_read_into_one_family_each() -> None:
    """``sandbus up``'s workers: one family per value with a sample per worker, so the text
    format has one TYPE line for each; a gauge reads the same way."""
    metrics = Metrics()
    for worker, handled in (("sandbox", 4), ("pool", 2)):
        metrics.read_from(
            "sandbus_events",
            "Handled.",
            lambda n=handled: {"handled": n},
            labels={"worker": worker},
        )
        metrics.read_from(
            "sandbus_events",
            "Lag.",
            lambda: {"pending": 7},
            labels={"worker": worker},
            kind="gauge",
        )
    text = metrics.exposition().decode()
    assert text.count("# TYPE sandbus_events_handled_total counter") == 1
    assert 'sandbus_events_handled_total{worker="sandbox"} 4.0' in text
    assert 'sandbus_events_handled_total{worker="pool"} 2.0' in text
    assert 'sandbus_events_pending{worker="pool"} 7.0' in text
    assert "# TYPE sandbus_events_pending gauge" in text
