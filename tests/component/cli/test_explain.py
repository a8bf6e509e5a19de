"""`sandbus explain`: one object's changes and the decisions that touched it, in time order."""

from __future__ import annotations

from nats.js import JetStreamContext

from tests.component.cli.commands import publish_all, publish_garbage, run_command
from tests.unit.cli.histories import adoption_story, change, decision, ref, sandbox


async def test_explain_a_claim_tells_its_adoption(js: JetStreamContext, nats_url: str) -> None:
    await publish_all(js, adoption_story())
    result = await run_command(["explain", "SandboxClaim/default/c1"], nats_url)
    assert result.code == 0, result.err
    assert result.lines == [
        "SandboxClaim/default/c1: 5 entries (times in UTC)",
        "2026-05-04",
        "  10:03:11.002  watcher  created rv 7, uid uid-c1",
        "  10:03:11.007  claim    decided applied: a warm sandbox was available; "
        "dequeue Sandbox/default/p-7xk2f (from queue default/python (depth 12→11)); "
        "patch Sandbox/default/p-7xk2f (adopted)",
        "  10:03:11.022  watcher  changed rv 8: status.sandbox.name: ∅→p-7xk2f",
        "  10:03:11.031  watcher  changed rv 10: status.conditions[Ready]: ∅→True",
        "  10:03:31.002  watcher  deleted rv 11",
    ]


async def test_explain_a_sandbox_shows_the_claim_decision_that_acted_on_it(
    js: JetStreamContext, nats_url: str
) -> None:
    await publish_all(js, adoption_story())
    # KIND/NAME means the default namespace; the kind may be written as kubectl would.
    result = await run_command(["explain", "sandbox/p-7xk2f"], nats_url)
    assert result.code == 0, result.err
    entries = result.lines[2:]
    assert [entry.split()[1] for entry in entries] == ["watcher", "claim", "watcher"]
    assert "while reconciling SandboxClaim/default/c1: applied" in entries[1]
    assert entries[2].endswith(
        "changed rv 9: metadata.labels[pool]: python→∅; metadata.labels[claim]: ∅→c1"
    )


async def test_explain_orders_by_time_across_workers(js: JetStreamContext, nats_url: str) -> None:
    # Reached the log in this order, but the sandbox worker's decision was made at 1.5 s.
    await publish_all(
        js,
        [
            change("added", sandbox("a", 1), 1),
            change("modified", sandbox("a", 2, ready="True"), 2),
            decision("sandbox", ref("Sandbox", "a"), 1.5, reason="pod created"),
        ],
    )
    result = await run_command(["explain", "Sandbox/default/a"], nats_url)
    assert [line.split()[0] for line in result.lines[2:]] == [
        "10:03:02.002",
        "10:03:02.502",
        "10:03:03.002",
    ]


async def test_explain_survives_garbage_on_the_objects_subject(
    js: JetStreamContext, nats_url: str
) -> None:
    await publish_all(js, [change("added", sandbox("a", 1), 1)])
    seq = await publish_garbage(js, "sandbus.events.sandbox.default.a", b'{"specversion":"1.0"}')
    await publish_all(js, [change("modified", sandbox("a", 2, ready="False"), 2)])
    result = await run_command(["explain", "Sandbox/default/a"], nats_url)
    assert result.code == 0
    assert len(result.lines) == 4
    assert f"warning: seq {seq} on sandbus.events.sandbox.default.a" in result.err
    assert "attribute `type`: is required but missing" in result.err


async def test_explain_an_object_the_log_never_saw(js: JetStreamContext, nats_url: str) -> None:
    await publish_all(js, adoption_story())
    result = await run_command(["explain", "Sandbox/default/ghost"], nats_url)
    assert result.code == 1
    assert result.out == ""
    assert "the event log has nothing about Sandbox/default/ghost" in result.err
