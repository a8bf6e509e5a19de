"""Folding the log into the objects that existed at an instant."""

from __future__ import annotations

from datetime import datetime

from hypothesis import given
from hypothesis import strategies as st

from events.envelope import ObjectKey
from events.types import Event
from services.cli.history.core.folding import state_at
from tests.unit.cli.histories import (
    T0,
    adoption_story,
    at,
    change,
    claim,
    decision,
    records,
    ref,
    sandbox,
)

A = ObjectKey("Sandbox", "default", "a")
B = ObjectKey("Sandbox", "default", "b")


def _scripted() -> list[Event]:
    return [
        change("added", sandbox("a", 1), 1),
        change("added", sandbox("b", 2), 2),
        change("modified", sandbox("a", 3, ready="True"), 3),
        decision("sandbox", ref("Sandbox", "a"), 3.5),
        change("deleted", sandbox("b", 4), 4),
        change("modified", sandbox("a", 5, ready="False"), 5),
    ]


def _versions(at_seconds: float, events: list[Event] | None = None) -> dict[ObjectKey, str]:
    folded = state_at(records(events or _scripted()), at(at_seconds))
    return {key: version.resource_version for key, version in folded.items()}


def test_before_anything_there_is_nothing() -> None:
    assert _versions(0.5) == {}


def test_each_instant_sees_the_last_version_observed_by_then() -> None:
    assert _versions(1) == {A: "1"}  # an event observed exactly at the instant counts
    assert _versions(2.5) == {A: "1", B: "2"}
    assert _versions(3.9) == {A: "3", B: "2"}
    assert _versions(4) == {A: "3"}
    assert _versions(99) == {A: "5"}


def test_the_folded_object_is_the_observed_body() -> None:
    folded = state_at(records(_scripted()), at(3.9))
    status = folded[A].object["status"]["conditions"][0]
    assert status["status"] == "True"
    assert folded[A].observed == at(3)
    assert folded[A].first_observed == at(1)
    assert "managedFields" not in folded[A].object["metadata"]


def test_decisions_do_not_make_objects() -> None:
    only_decision = [decision("claim", ref("SandboxClaim", "ghost"), 1)]
    assert _versions(5, only_decision) == {}


def test_a_late_synthetic_deletion_of_an_old_incarnation_spares_the_new_one() -> None:
    # After a watcher restart the relist saw "a" re-created (new uid) and published that
    # before the synthetic deletion of the incarnation that vanished in the gap.
    events: list[Event] = [
        change("added", sandbox("a", 1, uid="old"), 1),
        change("added", sandbox("a", 9, uid="new"), 5),
        change("deleted", sandbox("a", 1, uid="old"), 5, synthetic=True),
    ]
    folded = state_at(records(events), at(6))
    assert folded[A].uid == "new"
    assert folded[A].first_observed == at(5)


def test_a_deleted_and_recreated_object_is_the_new_incarnation() -> None:
    events: list[Event] = [
        change("added", sandbox("a", 1, uid="first"), 1),
        change("deleted", sandbox("a", 2, uid="first"), 2),
        change("added", sandbox("a", 3, uid="second"), 3),
    ]
    assert _versions(2.5, events) == {}
    assert state_at(records(events), at(3))[A].uid == "second"


def test_the_adoption_story_at_three_instants() -> None:
    story = adoption_story()
    claim_key = ObjectKey("SandboxClaim", "default", "c1")
    warm = ObjectKey("Sandbox", "default", "p-7xk2f")
    assert _versions(5, story) == {warm: "5"}
    assert _versions(10.018, story) == {warm: "9", claim_key: "7"}
    assert _versions(31, story) == {warm: "9"}


# --- property: folding to an instant = folding the prefix observed by then ----------------

_NAMES = ("a", "b", "c")


@st.composite
def _histories(draw: st.DrawFn) -> tuple[list[Event], dict[str, str]]:
    """A random history, and the resourceVersion of every object alive at its end."""
    alive: dict[str, tuple[str, int]] = {}
    events: list[Event] = []
    seconds = 0.0
    rv = 0
    incarnation = 0
    for _ in range(draw(st.integers(min_value=0, max_value=25))):
        name = draw(st.sampled_from(_NAMES))
        seconds += draw(st.sampled_from([0.0, 0.5, 1.0]))  # equal times happen
        rv += 1
        if name not in alive:
            incarnation += 1
            uid = f"{name}-{incarnation}"
            alive[name] = (uid, rv)
            obj = claim(name, rv) if name == "c" else sandbox(name, rv, uid=uid)
            events.append(change("added", obj, seconds))
            continue
        uid, _ = alive[name]
        obj = claim(name, rv) if name == "c" else sandbox(name, rv, uid=uid)
        if draw(st.booleans()):
            events.append(change("modified", obj, seconds))
            alive[name] = (uid, rv)
        else:
            events.append(change("deleted", obj, seconds))
            del alive[name]
    return events, {name: str(version) for name, (_, version) in alive.items()}


def _fold_all(events: list[Event]) -> dict[ObjectKey, str]:
    forever = datetime.max.replace(tzinfo=T0.tzinfo)
    return {key: v.resource_version for key, v in state_at(records(events), forever).items()}


def _key(name: str) -> ObjectKey:
    return ObjectKey("SandboxClaim" if name == "c" else "Sandbox", "default", name)


@given(_histories())
def test_the_fold_of_a_whole_history_is_what_is_alive_at_its_end(
    history: tuple[list[Event], dict[str, str]],
) -> None:
    events, alive = history
    assert _fold_all(events) == {_key(name): rv for name, rv in alive.items()}


@given(_histories())
def test_the_state_at_any_events_time_is_the_fold_of_everything_observed_by_then(
    history: tuple[list[Event], dict[str, str]],
) -> None:
    events, _ = history
    for event in events:
        observed_by_then = [e for e in events if e.time <= event.time]
        folded = state_at(records(events), event.time)
        assert {k: v.resource_version for k, v in folded.items()} == _fold_all(observed_by_then)
