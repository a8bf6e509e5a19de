"""The timeline of one object with the decisions that touched it."""

from __future__ import annotations

from events.envelope import ObjectKey
from events.types import DecisionAction, Event
from services.cli.history.core.timeline import build_timeline
from tests.unit.cli.histories import (
    adoption_story,
    at,
    change,
    claim,
    decision,
    records,
    ref,
    sandbox,
)

C1 = ObjectKey("SandboxClaim", "default", "c1")
WARM = ObjectKey("Sandbox", "default", "p-7xk2f")


def _texts(events: list[Event], target: ObjectKey) -> list[tuple[str, str]]:
    return [(entry.actor, entry.text) for entry in build_timeline(records(events), target)]


def test_the_claim_timeline_tells_the_adoption_story() -> None:
    assert _texts(adoption_story(), C1) == [
        ("watcher", "created rv 7, uid uid-c1"),
        (
            "claim",
            "decided applied: a warm sandbox was available; "
            "dequeue Sandbox/default/p-7xk2f (from queue default/python (depth 12→11)); "
            "patch Sandbox/default/p-7xk2f (adopted)",
        ),
        ("watcher", "changed rv 8: status.sandbox.name: ∅→p-7xk2f"),
        ("watcher", "changed rv 10: status.conditions[Ready]: ∅→True"),
        ("watcher", "deleted rv 11"),
    ]


def test_the_sandbox_timeline_has_the_decision_that_acted_on_it() -> None:
    texts = _texts(adoption_story(), WARM)
    assert texts[0] == ("watcher", "created rv 5, uid uid-p-7xk2f; Ready=True")
    assert texts[1] == (
        "claim",
        "while reconciling SandboxClaim/default/c1: applied: a warm sandbox was available; "
        "dequeue Sandbox/default/p-7xk2f (from queue default/python (depth 12→11)); "
        "patch Sandbox/default/p-7xk2f (adopted)",
    )
    assert texts[2] == (
        "watcher",
        "changed rv 9: metadata.labels[pool]: python→∅; metadata.labels[claim]: ∅→c1",
    )
    assert len(texts) == 3  # the unrelated sandbox decision is not here


def test_entries_are_in_time_order_even_when_the_log_is_not() -> None:
    # A worker whose clock runs behind recorded its decision after the change it predates.
    events: list[Event] = [
        change("added", sandbox("a", 1), 1),
        change("modified", sandbox("a", 2, ready="True"), 3),
        decision("sandbox", ref("Sandbox", "a"), 2, reason="pod is running"),
    ]
    entries = build_timeline(records(events), ObjectKey("Sandbox", "default", "a"))
    assert [entry.time for entry in entries] == [at(1), at(2), at(3)]
    # The diff still compares versions in the order the watcher saw them.
    assert entries[2].text == "changed rv 2: status.conditions[Ready]: ∅→True"


def test_equal_times_keep_log_order() -> None:
    events: list[Event] = [
        change("added", sandbox("a", 1), 1),
        decision("sandbox", ref("Sandbox", "a"), 1),
    ]
    entries = build_timeline(records(events), ObjectKey("Sandbox", "default", "a"))
    assert [entry.actor for entry in entries] == ["watcher", "sandbox"]


def test_failures_and_requeues_are_spelled_out() -> None:
    events: list[Event] = [
        decision(
            "claim",
            ref("SandboxClaim", "c1"),
            1,
            outcome="failed",
            reason="adopting",
            actions=[
                DecisionAction(verb="patch", target=ref("Sandbox", "p-1"), error="409 Conflict")
            ],
            error="the sandbox changed under us",
            requeue_after=0.5,
        )
    ]
    [entry] = build_timeline(records(events), C1)
    assert entry.text == (
        "decided failed: adopting; patch Sandbox/default/p-1 failed: 409 Conflict; "
        "error: the sandbox changed under us; requeue in 0.5s"
    )


def test_a_recreated_object_starts_a_new_incarnation_and_a_synthetic_deletion_says_so() -> None:
    events: list[Event] = [
        change("added", sandbox("a", 1, uid="first"), 1),
        change("deleted", sandbox("a", 1, uid="first"), 2, synthetic=True),
        change("added", sandbox("a", 5, uid="second", ready="False"), 3),
        change("added", sandbox("a", 6, uid="second", ready="True"), 4),
    ]
    assert _texts(events, ObjectKey("Sandbox", "default", "a")) == [
        ("watcher", "created rv 1, uid first"),
        ("watcher", "deleted rv 1 (synthetic: it vanished while the watcher was not watching)"),
        ("watcher", "created rv 5, uid second; Ready=False"),
        ("watcher", "seen again rv 6: status.conditions[Ready]: False→True"),
    ]


def test_a_log_cut_by_retention_still_explains_what_it_has() -> None:
    events: list[Event] = [change("modified", claim("c1", 40, ready="True"), 1)]
    assert _texts(events, C1) == [
        ("watcher", "changed rv 40 (earlier versions not on the log); Ready=True")
    ]


def test_other_objects_changes_are_not_in_the_timeline() -> None:
    events: list[Event] = [
        change("added", sandbox("a", 1), 1),
        change("added", sandbox("a", 2, namespace="other", uid="x"), 2),
    ]
    assert len(build_timeline(records(events), ObjectKey("Sandbox", "default", "a"))) == 1


def test_a_requeue_years_away_reads_in_days() -> None:
    """A Sandbox whose shutdownTime is far off asks to be woken then, not in 1.13124e+08s."""
    events: list[Event] = [
        decision(
            "sandbox", ref("SandboxClaim", "c1"), 1, reason="waiting", requeue_after=113_124_000
        )
    ]
    [entry] = build_timeline(records(events), C1)
    assert entry.text.endswith("requeue in 1309d")
