"""The printed forms: event lines, the state table, object lists, timelines, summaries."""

from __future__ import annotations

import json
from datetime import timedelta

import yaml

from events.envelope import ObjectKey
from events.types import DecisionAction
from services.cli.history.core.folding import state_at
from services.cli.history.core.instants import format_age
from services.cli.history.core.timeline import TimelineEntry
from services.cli.history.records import UnreadableRecord
from services.cli.history.render import (
    event_line,
    object_list,
    state_table,
    timeline_lines,
    warning_line,
)
from services.cli.history.summaries import object_summary
from tests.unit.cli.histories import (
    T0,
    adoption_story,
    at,
    change,
    decision,
    records,
    ref,
    sandbox,
)


def test_a_change_line_leads_with_time_what_which_and_rv() -> None:
    [record] = records([change("modified", sandbox("a", 3, ready="False", reason="PodPending"), 0)])
    assert event_line(record) == (
        "2026-05-04T10:03:01.002Z  modified  Sandbox/default/a  rv 3  Ready=False (PodPending)"
    )


def test_a_synthetic_deletion_is_marked() -> None:
    [record] = records([change("deleted", sandbox("a", 3), 0, synthetic=True)])
    assert event_line(record).endswith("deleted   Sandbox/default/a  rv 3  (synthetic)")


def test_a_decision_line_says_who_decided_what() -> None:
    [record] = records(
        [
            decision(
                "sandbox",
                ref("Sandbox", "a"),
                0,
                reason="pod missing",
                actions=[DecisionAction(verb="create", target=ref("Pod", "a"))],
            )
        ]
    )
    assert event_line(record) == (
        "2026-05-04T10:03:01.002Z  decision  Sandbox/default/a  "
        "sandbox: applied: pod missing; create Pod/default/a"
    )


def test_a_warning_names_the_message_and_the_reason() -> None:
    record = UnreadableRecord(
        seq=17, subject="sandbus.events.sandbox.default.x", stored=T0, reason="bad", payload=b"x"
    )
    assert warning_line(record) == (
        "warning: seq 17 on sandbus.events.sandbox.default.x is not a valid event: bad"
    )


def test_summaries_pick_readiness_then_phase_then_replicas() -> None:
    assert object_summary(sandbox("a", 1, ready="True", reason="Ok")) == "Ready=True"
    assert object_summary({"status": {"phase": "Running"}}) == "phase=Running"
    assert object_summary({"spec": {"replicas": 5}, "status": {"readyReplicas": 3}}) == "ready 3/5"
    assert (
        object_summary({"status": {"conditions": [{"type": "Complete", "status": "True"}]}})
        == "Complete"
    )
    deleting = sandbox("a", 1, ready="True")
    deleting["metadata"]["deletionTimestamp"] = "2026-05-04T10:04:00Z"
    assert object_summary(deleting) == "deleting Ready=True"
    assert object_summary({}) == ""


def test_ages_read_like_kubectl() -> None:
    assert format_age(timedelta(seconds=45)) == "45s"
    assert format_age(timedelta(minutes=1, seconds=5)) == "1m"
    assert format_age(timedelta(minutes=90)) == "90m"
    assert format_age(timedelta(hours=3)) == "3h"
    assert format_age(timedelta(days=4)) == "4d"
    assert format_age(timedelta(seconds=-1)) == "-"


def test_the_state_table_lists_objects_sorted_with_age_at_the_instant() -> None:
    objects = state_at(records(adoption_story()), at(10.018))
    # The sandbox has a creationTimestamp (10:00:00Z); the claim has none, so its age is
    # counted from when it was first observed (10 s after T0, 18 ms before the instant).
    assert state_table(objects, at(10.018)).splitlines() == [
        "KIND           NAMESPACE   NAME      RV   AGE   STATUS",
        "Sandbox        default     p-7xk2f   9    3m    Ready=True",
        "SandboxClaim   default     c1        7    0s",
    ]


def test_an_empty_state_says_so() -> None:
    assert state_table({}, T0) == "no objects at 2026-05-04T10:03:01.002Z"


def test_object_lists_are_kubernetes_lists_in_json_and_yaml() -> None:
    objects = state_at(records(adoption_story()), at(10.018))
    as_json = json.loads(object_list(objects, "json"))
    as_yaml = yaml.safe_load(object_list(objects, "yaml"))
    assert as_json == as_yaml
    assert as_json["kind"] == "List"
    assert [item["metadata"]["name"] for item in as_json["items"]] == ["p-7xk2f", "c1"]


def test_timeline_lines_print_the_day_once_and_again_when_it_changes() -> None:
    entries = [
        TimelineEntry(time=T0, seq=1, actor="watcher", text="created rv 1"),
        TimelineEntry(time=T0 + timedelta(days=1), seq=2, actor="claim", text="decided noop"),
    ]
    assert timeline_lines(ObjectKey("Sandbox", "default", "a"), entries) == [
        "Sandbox/default/a: 2 entries (times in UTC)",
        "2026-05-04",
        "  10:03:01.002  watcher  created rv 1",
        "2026-05-05",
        "  10:03:01.002  claim    decided noop",
    ]
