"""`sandbus events replay`: history in log order, bounded, and loaded into SQLite."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from nats.js import JetStreamContext

from events.codec import decode_event
from events.types import Event
from services.cli.history.core.instants import format_instant
from tests.component.cli.commands import publish_all, publish_garbage, run_command
from tests.unit.cli.histories import adoption_story, at, change, sandbox


def _ids(events: list[Event]) -> list[str]:
    return [event.id for event in events]


async def test_replay_prints_the_whole_log_in_order_and_ends(
    js: JetStreamContext, nats_url: str
) -> None:
    story = adoption_story()
    await publish_all(js, story)
    result = await run_command(["events", "replay", "--decisions", "--json"], nats_url)
    assert result.code == 0, result.err
    assert [decode_event(line).id for line in result.lines] == _ids(story)


async def test_replay_without_decisions_prints_changes_as_lines(
    js: JetStreamContext, nats_url: str
) -> None:
    await publish_all(js, adoption_story())
    result = await run_command(["events", "replay", "--kind", "SandboxClaim"], nats_url)
    assert [line.split()[1:4] for line in result.lines] == [
        ["added", "SandboxClaim/default/c1", "rv"],
        ["modified", "SandboxClaim/default/c1", "rv"],
        ["modified", "SandboxClaim/default/c1", "rv"],
        ["deleted", "SandboxClaim/default/c1", "rv"],
    ]
    assert result.lines[2].endswith("rv 10  Ready=True")


async def test_since_and_until_select_by_observation_time(
    js: JetStreamContext, nats_url: str
) -> None:
    story = adoption_story()
    await publish_all(js, story)
    window = await run_command(
        [
            "events",
            "replay",
            "--decisions",
            "--json",
            "--since",
            format_instant(at(10.005)),
            "--until",
            format_instant(at(10.020)),
        ],
        nats_url,
    )
    assert [decode_event(line).id for line in window.lines] == _ids(story[2:5])
    # Everything was stored just now but observed in May 2026: "the last minute" is empty.
    recent = await run_command(["events", "replay", "--since", "1m"], nats_url)
    assert recent.code == 0
    assert recent.out == ""
    assert "no events in that range" in recent.err


async def test_since_seq_starts_at_a_stream_sequence(js: JetStreamContext, nats_url: str) -> None:
    story = adoption_story()
    await publish_all(js, story)
    result = await run_command(
        ["events", "replay", "--decisions", "--json", "--since-seq", "6"], nats_url
    )
    assert [decode_event(line).id for line in result.lines] == _ids(story[5:])


async def test_replay_of_an_empty_selection_ends_at_once(
    js: JetStreamContext, nats_url: str
) -> None:
    await publish_all(js, adoption_story())
    result = await run_command(["events", "replay", "--kind", "Pod"], nats_url)
    assert (result.code, result.out) == (0, "")


async def test_replay_reports_garbage_and_goes_on(js: JetStreamContext, nats_url: str) -> None:
    await publish_all(js, [change("added", sandbox("a", 1), 1)])
    seq = await publish_garbage(js, "sandbus.events.sandbox.default.a", b'{"specversion": "0.3"}')
    await publish_all(js, [change("modified", sandbox("a", 2), 2)])
    result = await run_command(["events", "replay"], nats_url)
    assert result.code == 0
    assert len(result.lines) == 2
    assert (
        f"warning: seq {seq} on sandbus.events.sandbox.default.a is not a valid event: "
        "attribute `specversion`: unsupported value '0.3'"
    ) in result.err


def _rows(path: Path, query: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(query).fetchall()


async def test_into_loads_events_and_decisions_idempotently(
    js: JetStreamContext, nats_url: str, tmp_path: Path
) -> None:
    story = adoption_story()
    await publish_all(js, story)
    garbage_seq = await publish_garbage(js, "sandbus.events.pod.default.x", b"nope")
    database = tmp_path / "history.db"

    first = await run_command(["events", "replay", "--into", str(database)], nats_url)
    assert first.code == 0, first.err
    assert "6 new events (0 already there), 2 new decisions (0 already there)" in first.out
    assert "sqlite3 " in first.out  # example queries follow

    changes = _rows(
        database,
        "SELECT seq, id, time, type, kind, namespace, name, uid, resource_version, synthetic "
        "FROM events ORDER BY seq",
    )
    expected = [
        (seq, event.id, event.time, event.type, event.kind, "default", event.name)
        for seq, event in enumerate(story, start=1)
        if not event.type.startswith("io.sandbus.decision")
    ]
    assert [row[:7] for row in changes] == [
        (seq, id_, time.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), type_, kind, ns, name)
        for seq, id_, time, type_, kind, ns, name in expected
    ]
    assert changes[0][7:] == ("uid-p-7xk2f", "5", 0)
    phases = _rows(
        database,
        "SELECT json_extract(data, '$.object.status.conditions[0].status') FROM events "
        "WHERE name = 'c1' AND change = 'modified' ORDER BY seq",
    )
    assert phases == [(None,), ("True",)]
    decisions = _rows(
        database, "SELECT seq, worker, kind, name, outcome FROM decisions ORDER BY seq"
    )
    assert decisions == [
        (3, "claim", "SandboxClaim", "c1", "applied"),
        (7, "sandbox", "Sandbox", "other", "noop"),
    ]
    touched = _rows(
        database,
        "SELECT d.worker, a.verb FROM decision_actions a JOIN decisions d "
        "ON d.id = a.decision_id AND d.time = a.decision_time "
        "WHERE a.target_kind = 'Sandbox' AND a.target_name = 'p-7xk2f' ORDER BY a.position",
    )
    assert touched == [("claim", "dequeue"), ("claim", "patch")]
    [(seq, reason, payload)] = _rows(database, "SELECT seq, reason, payload FROM unreadable")
    assert (seq, payload) == (garbage_seq, b"nope")
    assert str(reason).startswith("payload: not valid JSON")

    second = await run_command(["events", "replay", "--into", str(database)], nats_url)
    assert second.code == 0
    assert "0 new events (6 already there), 0 new decisions (2 already there)" in second.out
    for table, count in (
        ("events", 6),
        ("decisions", 2),
        ("decision_actions", 2),
        ("unreadable", 1),
    ):
        assert _rows(database, f"SELECT count(*) FROM {table}") == [(count,)], table


async def test_into_loads_only_the_window(
    js: JetStreamContext, nats_url: str, tmp_path: Path
) -> None:
    await publish_all(js, adoption_story())
    database = tmp_path / "window.db"
    result = await run_command(
        ["events", "replay", "--into", str(database), "--until", format_instant(at(10.017))],
        nats_url,
    )
    assert result.code == 0
    assert _rows(database, "SELECT count(*) FROM events") == [(3,)]
    assert _rows(database, "SELECT count(*) FROM decisions") == [(1,)]


async def test_json_output_is_the_stored_cloudevent(js: JetStreamContext, nats_url: str) -> None:
    event = change("added", sandbox("my.app", 1), 1)
    await publish_all(js, [event])
    result = await run_command(["events", "replay", "--json", "--name", "my.app"], nats_url)
    [line] = result.lines
    document = json.loads(line)
    assert document["specversion"] == "1.0"
    assert document["id"] == event.id
    assert document["subject"] == "Sandbox/default/my.app"
