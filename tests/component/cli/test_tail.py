"""`sandbus events tail`: follows the log live, filtered, and stops cleanly on a signal."""

from __future__ import annotations

import asyncio
import contextlib
import io
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from nats.js import JetStreamContext

from devtools.natsd import NatsServer
from events.codec import decode_event
from events.types import ObjectEvent
from services.cli.history.core.instants import format_instant
from services.runtime.bus import ensure_bus, publish_event
from tests.component.cli.commands import parser, publish_all, publish_garbage
from tests.support.waiting import until
from tests.unit.cli.histories import adoption_story, at, change, decision, ref, sandbox

DEADLINE = 10.0
"""Seconds to wait for what a tail prints: the output streams have no event to await."""


@dataclass
class Tail:
    out: io.StringIO
    err: io.StringIO

    @property
    def lines(self) -> list[str]:
        return self.out.getvalue().splitlines()

    async def wait_for_output(self, text: str) -> None:
        await until(
            lambda: text in self.out.getvalue(), within=DEADLINE, interval=0.01, what=repr(text)
        )


@contextlib.asynccontextmanager
async def tailing(argv: list[str], nats_url: str) -> AsyncIterator[Tail]:
    """Run `sandbus events tail <argv>` in-process until the block ends, then cancel it."""
    args = parser().parse_args(["events", "tail", *argv, "--nats", nats_url])
    tail = Tail(io.StringIO(), io.StringIO())
    task = asyncio.create_task(args.run(args, out=tail.out, err=tail.err))
    await until(
        lambda: "following" in tail.err.getvalue() or task.done(),
        within=DEADLINE,
        interval=0.01,
        what="tail to start",
    )
    assert not task.done(), tail.err.getvalue()
    try:
        yield tail
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_tail_prints_what_is_published_after_it_started(
    js: JetStreamContext, nats_url: str
) -> None:
    await publish_all(js, [change("added", sandbox("before", 1), 1)])
    async with tailing([], nats_url) as tail:
        await publish_all(js, [change("modified", sandbox("a", 2, ready="True"), 2)])
        await tail.wait_for_output("Sandbox/default/a")
    assert tail.lines == ["2026-05-04T10:03:03.002Z  modified  Sandbox/default/a  rv 2  Ready=True"]


async def test_tail_filters_by_kind_on_the_server(js: JetStreamContext, nats_url: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "a", "namespace": "default", "uid": "pod-a", "resourceVersion": "3"},
        "status": {"phase": "Running"},
    }
    async with tailing(["--kind", "sandboxes"], nats_url) as tail:
        # In log order the pod comes first: had it passed the filter, it would be printed
        # before the sandbox line that the test waits for.
        await publish_all(js, [change("added", pod, 1), change("added", sandbox("a", 4), 2)])
        await tail.wait_for_output("Sandbox/default/a")
    assert len(tail.lines) == 1
    assert "Pod" not in tail.out.getvalue()


async def test_tail_shows_decisions_only_when_asked(js: JetStreamContext, nats_url: str) -> None:
    events = [
        decision("sandbox", ref("Sandbox", "a"), 1, reason="pod missing"),
        change("added", sandbox("a", 1), 2),
    ]
    async with tailing([], nats_url) as without, tailing(["--decisions"], nats_url) as with_:
        await publish_all(js, events)
        await without.wait_for_output("added")
        await with_.wait_for_output("added")
    assert [line.split()[1] for line in without.lines] == ["added"]
    assert [line.split()[1] for line in with_.lines] == ["decision", "added"]
    assert "sandbox: applied: pod missing" in with_.lines[0]


async def test_tail_json_prints_the_raw_cloudevents(js: JetStreamContext, nats_url: str) -> None:
    event = change("added", sandbox("a", 1), 1)
    async with tailing(["--json", "--name", "a"], nats_url) as tail:
        await publish_all(js, [event])
        await tail.wait_for_output("\n")
    assert [decode_event(line) for line in tail.lines] == [event]


async def test_tail_since_starts_in_the_past_and_keeps_following(
    js: JetStreamContext, nats_url: str
) -> None:
    story = adoption_story()
    await publish_all(js, story[:6])
    async with tailing(
        ["--json", "--decisions", "--since", format_instant(at(10.017))], nats_url
    ) as tail:
        await until(
            lambda: len(tail.lines) == 3,
            within=DEADLINE,
            interval=0.01,
            what="the three events since 10.017",
        )
        await publish_all(js, story[6:])
        await until(
            lambda: len(tail.lines) == 5, within=DEADLINE, interval=0.01, what="the two new events"
        )
    assert [decode_event(line).id for line in tail.lines] == [e.id for e in story[3:]]


async def test_tail_reports_garbage_and_keeps_going(js: JetStreamContext, nats_url: str) -> None:
    async with tailing([], nats_url) as tail:
        seq = await publish_garbage(js, "sandbus.events.sandbox.default.a", b"]")
        await publish_all(js, [change("added", sandbox("a", 1), 1)])
        await tail.wait_for_output("Sandbox/default/a")
    assert f"warning: seq {seq} on sandbus.events.sandbox.default.a is not a valid event" in (
        tail.err.getvalue()
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_the_sandbus_command_follows_and_exits_cleanly_on_a_signal(
    js: JetStreamContext, nats_url: str, signum: signal.Signals
) -> None:
    sandbus = Path(sys.executable).parent / "sandbus"
    process = await asyncio.create_subprocess_exec(
        str(sandbus),
        "events",
        "tail",
        "--kind",
        "Sandbox",
        "--nats",
        nats_url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        started = await asyncio.wait_for(process.stderr.readline(), DEADLINE)
        assert started.startswith(b"following sandbus.events.sandbox.*.*"), started
        await publish_all(js, [change("added", sandbox("a", 1), 1)])
        line = await asyncio.wait_for(process.stdout.readline(), DEADLINE)
        assert b"added     Sandbox/default/a  rv 1" in line
        process.send_signal(signum)
        assert await asyncio.wait_for(process.wait(), DEADLINE) == 0
        assert await process.stderr.read() == b""  # no traceback
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_tail_survives_a_nats_restart_without_a_gap(nats_server: NatsServer) -> None:
    async with await nats.connect(nats_server.url) as client:
        js = client.jetstream()
        await ensure_bus(js)
        async with tailing(["--json"], nats_server.url) as tail:
            first = change("added", sandbox("a", 1), 1)
            await publish_all(js, [first])
            await until(
                lambda: len(tail.lines) == 1,
                within=DEADLINE,
                interval=0.01,
                what="the event before the restart",
            )
            await asyncio.to_thread(nats_server.restart)
            later = [change("added", sandbox(f"b{i}", 2 + i), 2) for i in range(3)]
            for event in later:
                await _publish_when_back(js, event)
            await until(
                lambda: len(tail.lines) == 4,
                within=DEADLINE,
                interval=0.01,
                what="the events after the restart",
            )
    assert [decode_event(line).id for line in tail.lines] == [first.id] + [e.id for e in later]
    assert "nats: reconnected" in tail.err.getvalue()


async def _publish_when_back(js: JetStreamContext, event: ObjectEvent) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while True:
        try:
            await publish_event(js, event, ack_timeout=1.0)
            return
        except (nats.errors.TimeoutError, nats.errors.ConnectionReconnectingError):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)
