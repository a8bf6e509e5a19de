"""`sandbus state --at` reproduces exactly the objects at chosen instants of a scripted history.

The instants select by *observation time* (the CloudEvents ``time`` attribute), which the
script controls: every event is observed at a chosen second after T0 (May 2026), while
JetStream stores them all now, months later. The stored timestamps therefore say nothing about
the instants; a fold by stored time would put every object at every instant or none.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from nats.js import JetStreamContext

from events.types import Event, strip_managed_fields
from services.cli.history.core.instants import format_instant
from tests.component.cli.commands import publish_all, publish_garbage, run_command
from tests.unit.cli.histories import at, change, claim, decision, ref, sandbox

A1 = sandbox("a", 1)
B2 = sandbox("b", 2)
C3 = claim("c1", 3)
A4 = sandbox("a", 4, ready="False", reason="PodPending")
A6 = sandbox("a", 6, ready="True")
D7 = sandbox("d", 7, namespace="team")
B9 = sandbox("b", 9, uid="uid-b-again", ready="True")


def _script() -> list[Event]:
    return [
        change("added", A1, 1),
        change("added", B2, 1),
        change("added", C3, 1.5),
        change("modified", A4, 2),
        decision("sandbox", ref("Sandbox", "a"), 2.1, reason="pod missing"),
        change("deleted", sandbox("b", 5), 3),
        change("modified", A6, 4),
        change("added", D7, 4),
        change("deleted", claim("c1", 8), 5),
        change("added", B9, 6),
    ]


INSTANTS = {
    2.5: [A4, B2, C3],
    4: [A6, C3, D7],
    60: [A6, B9, D7],
}


def _expected(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def key(obj: dict[str, Any]) -> tuple[str, str, str]:
        metadata = obj["metadata"]
        return (obj["kind"], metadata["namespace"], metadata["name"])

    return [strip_managed_fields(obj) for obj in sorted(objects, key=key)]


async def test_state_at_three_instants_is_exactly_the_objects_then(
    js: JetStreamContext, nats_url: str
) -> None:
    await publish_all(js, _script())
    for seconds, objects in INSTANTS.items():
        result = await run_command(
            ["state", "--at", format_instant(at(seconds)), "-o", "json"], nats_url
        )
        assert result.code == 0, result.err
        assert json.loads(result.out)["items"] == _expected(objects), f"at T0+{seconds}s"


async def test_state_at_prints_a_table_and_yaml(js: JetStreamContext, nats_url: str) -> None:
    await publish_all(js, _script())
    instant = format_instant(at(2.5))
    table = await run_command(["state", "--at", instant], nats_url)
    assert table.lines[0].split() == ["KIND", "NAMESPACE", "NAME", "RV", "AGE", "STATUS"]
    assert [line.split()[:4] for line in table.lines[1:]] == [
        ["Sandbox", "default", "a", "4"],
        ["Sandbox", "default", "b", "2"],
        ["SandboxClaim", "default", "c1", "3"],
    ]
    assert "Ready=False (PodPending)" in table.lines[1]
    as_yaml = await run_command(["state", "--at", instant, "-o", "yaml"], nats_url)
    assert yaml.safe_load(as_yaml.out)["items"] == _expected(INSTANTS[2.5])


async def test_state_filters_by_kind_and_namespace(js: JetStreamContext, nats_url: str) -> None:
    await publish_all(js, _script())
    instant = format_instant(at(4))
    claims = await run_command(
        ["state", "--at", instant, "--kind", "sandboxclaims", "-o", "json"], nats_url
    )
    assert json.loads(claims.out)["items"] == _expected([C3])
    team = await run_command(["state", "--at", instant, "-n", "team", "-o", "json"], nats_url)
    assert json.loads(team.out)["items"] == _expected([D7])


async def test_garbage_on_the_log_is_a_warning_not_a_crash(
    js: JetStreamContext, nats_url: str
) -> None:
    events = _script()
    await publish_all(js, events[:3])
    seq = await publish_garbage(js, "sandbus.events.sandbox.default.a", b"\x00\x01 not an event")
    await publish_all(js, events[3:])
    result = await run_command(["state", "--at", format_instant(at(60)), "-o", "json"], nats_url)
    assert result.code == 0
    assert json.loads(result.out)["items"] == _expected(INSTANTS[60])
    assert (
        f"warning: seq {seq} on sandbus.events.sandbox.default.a is not a valid event" in result.err
    )
    assert "not valid JSON" in result.err


async def test_an_empty_log_has_no_objects(js: JetStreamContext, nats_url: str) -> None:
    result = await run_command(["state"], nats_url)
    assert result.code == 0
    assert result.out.startswith("no objects at ")
