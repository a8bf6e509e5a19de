"""The SQLite rows built from log records (the pure half of replay --into)."""

from __future__ import annotations

import json

import pytest

from events.types import DecisionAction
from services.cli.history.database import action_rows, decision_row, event_row, sql_time
from tests.unit.cli.histories import T0, change, decision, records, ref, sandbox


def test_sql_times_sort_as_text() -> None:
    assert sql_time(T0) == "2026-05-04T10:03:01.002000Z"


def test_an_event_row_carries_identity_and_data() -> None:
    [record] = records([change("deleted", sandbox("a", 3), 0, synthetic=True)])
    row = event_row(record)
    assert row[:12] == (
        1,
        "uid-a:3:deleted",
        "2026-05-04T10:03:01.002000Z",
        "2026-05-04T10:03:01.002000Z",
        "io.sandbus.object.deleted.v1",
        "deleted",
        "Sandbox",
        "default",
        "a",
        "uid-a",
        "3",
        1,
    )
    assert json.loads(row[12])["object"]["metadata"]["name"] == "a"


def test_a_decision_row_and_its_action_rows() -> None:
    [record] = records(
        [
            decision(
                "claim",
                ref("SandboxClaim", "c1"),
                0,
                reason="adopt",
                actions=[
                    DecisionAction(verb="dequeue", target=ref("Sandbox", "p")),
                    DecisionAction(verb="patch", target=ref("Sandbox", "p"), error="409"),
                ],
            )
        ]
    )
    row = decision_row(record)
    assert row[4:10] == ("claim", "SandboxClaim", "default", "c1", "applied", "adopt")
    assert [a[2:7] for a in action_rows(record)] == [
        (0, "dequeue", "Sandbox", "default", "p"),
        (1, "patch", "Sandbox", "default", "p"),
    ]
    assert action_rows(record)[1][8] == "409"


def test_rows_refuse_the_wrong_record() -> None:
    [change_record, decision_record] = records(
        [change("added", sandbox("a", 1), 0), decision("claim", ref("SandboxClaim", "c"), 1)]
    )
    with pytest.raises(TypeError):
        decision_row(change_record)
    with pytest.raises(TypeError):
        event_row(decision_record)
    assert action_rows(change_record) == []
