"""Recovering the published view from the state table and the event log's tail."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.codec import encode_event
from events.envelope import ObjectKey
from events.ids import ChangeEventId
from events.types import observed_event
from services.watcher.core.diffing import Seen
from services.watcher.core.recovery import (
    LowWater,
    Seqs,
    StoredEvent,
    StoredEventError,
    keeps_stored_state,
    newest_per_key,
    recover,
    state_identity,
    stored_event,
)
from tests.unit.events.samples import NOW, sandbox

KEY = ObjectKey("Sandbox", "default", "a")


def stored(change: str, uid: str, rv: str, seq: int, event_seq: int | None = None) -> StoredEvent:
    return StoredEvent(KEY, ChangeEventId(uid, rv, change), seq, event_seq)  # type: ignore[arg-type]


def test_a_stored_event_is_read_from_its_payload_and_headers() -> None:
    payload = encode_event(observed_event("modified", sandbox("a.b", "42"), time=NOW))
    entry = stored_event(
        payload, 7, {"Seq": "12", "Low": "5"}, event_seq_header="Seq", low_water_header="Low"
    )
    assert entry.key == ObjectKey("Sandbox", "default", "a.b")
    assert entry.event_id == "0b8c5a9e-1111-4c2e-9d6f-2a7d3c1e5f00:42:modified"
    assert (entry.seq, entry.event_seq, entry.low_water) == (7, 12, 5)


@pytest.mark.parametrize("payload", [b"garbage", b"{}", b'{"id": "x", "kind": "K", "name": "n"}'])
def test_a_message_that_is_not_an_observed_change_is_refused(payload: bytes) -> None:
    with pytest.raises(StoredEventError, match="message 3"):
        stored_event(payload, 3)


def test_agreeing_state_and_log_need_no_repair() -> None:
    recovered = recover(
        {KEY: stored("modified", "u", "5", 10, 20)}, {KEY: stored("modified", "u", "5", 20)}
    )
    assert recovered.view == {KEY: Seen("u", "5")}
    assert recovered.seqs == {KEY: Seqs(event=20, state=10)}
    assert recovered.repairs == []


def test_a_log_ahead_of_the_state_table_wins_and_is_repaired() -> None:
    logged = stored("modified", "u", "7", 30)
    recovered = recover({KEY: stored("modified", "u", "5", 10, 20)}, {KEY: logged})
    assert recovered.view == {KEY: Seen("u", "7")}
    assert recovered.repairs == [logged]
    assert recovered.seqs[KEY] == Seqs(event=30, state=10)


def test_an_object_only_in_the_log_is_published_and_owes_its_state() -> None:
    """The crash came after the event-log write of its first event: a later relist that does
    not find it must publish a synthetic deletion, so it must be in the view."""
    logged = stored("added", "u", "3", 8)
    recovered = recover({}, {KEY: logged})
    assert recovered.view == {KEY: Seen("u", "3")}
    assert recovered.repairs == [logged]
    assert recovered.seqs[KEY] == Seqs(event=8, state=None)


def test_a_deletion_in_the_log_removes_the_object_from_the_view() -> None:
    recovered = recover({KEY: stored("added", "u", "3", 4)}, {KEY: stored("deleted", "u", "9", 9)})
    assert recovered.view == {}
    assert len(recovered.repairs) == 1


def test_a_state_table_without_a_log_tail_is_taken_as_it_is() -> None:
    recovered = recover({KEY: stored("deleted", "u", "9", 4, 12)}, {})
    assert recovered.view == {}
    assert recovered.seqs[KEY] == Seqs(event=12, state=4)


def test_the_newest_event_per_key_is_the_one_with_the_highest_sequence() -> None:
    events = [
        stored("added", "u", "1", 5),
        stored("modified", "u", "2", 9),
        stored("modified", "u", "3", 7),
    ]
    assert newest_per_key(events)[KEY].seq == 9


# --- the low-water mark ----------------------------------------------------------------------


def test_the_mark_is_pinned_to_the_inherited_one_until_recovery_is_done() -> None:
    mark = LowWater(inherited=40)
    assert mark.value == 40
    mark.recovered(confirmed_through=55)
    assert mark.value == 56


def test_the_mark_stays_below_every_change_in_flight() -> None:
    mark = LowWater(inherited=1)
    mark.recovered(confirmed_through=10)
    first = mark.begin()  # floor 11
    mark.acked(11)
    second = mark.begin()  # floor 12
    mark.acked(12)
    assert mark.value == 11
    mark.end(first)
    assert mark.value == 12
    mark.end(second)
    assert mark.value == 13


@given(st.lists(st.sampled_from(["begin", "ack", "end"]), max_size=60))
def test_every_event_below_the_mark_has_reached_the_state_table(script: list[str]) -> None:
    """Simulated publishes: events get increasing sequences; some are in flight."""
    mark = LowWater(inherited=1)
    mark.recovered(confirmed_through=0)
    next_seq = 1
    in_flight: list[tuple[int, int | None]] = []  # (floor, seq once acked)
    unconfirmed: set[int] = set()
    for step in script:
        if step == "begin":
            in_flight.append((mark.begin(), None))
        elif step == "ack" and any(seq is None for _, seq in in_flight):
            index = next(i for i, (_, seq) in enumerate(in_flight) if seq is None)
            floor, _ = in_flight[index]
            in_flight[index] = (floor, next_seq)
            mark.acked(next_seq)
            unconfirmed.add(next_seq)
            next_seq += 1
        elif step == "end" and any(seq is not None for _, seq in in_flight):
            index = next(i for i, (_, seq) in enumerate(in_flight) if seq is not None)
            floor, seq = in_flight.pop(index)
            mark.end(floor)
            unconfirmed.discard(seq)  # type: ignore[arg-type]
        assert all(seq >= mark.value for seq in unconfirmed)
        # A publish still waiting for its sequence will get one at or above the mark.
        assert next_seq >= mark.value or not in_flight


# --- two leaders overlapping: which state the state table keeps ----------------------------


def state(change: str, rv: str, uid: str = "u") -> ChangeEventId:
    return ChangeEventId(uid, rv, change)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("stored_state", "ours", "kept"),
    [
        (("modified", "10"), ("modified", "9"), True),  # a stale leader's older state
        (("modified", "10"), ("modified", "10"), True),  # the same state, written again
        (("modified", "9"), ("modified", "10"), False),  # ours is newer
        (("added", "8"), ("deleted", "9"), False),
        (("modified", "10"), ("deleted", "10"), False),  # a synthetic deletion of that state
        (("deleted", "10"), ("modified", "11"), True),  # a deletion is final for its uid
        (("modified", "abc"), ("modified", "abd"), False),  # opaque versions: not ordered
        (("modified", "abc"), ("modified", "abc"), True),  # ...but equal is equal
    ],
)
def test_the_state_table_keeps_a_stored_state_that_is_not_older(
    stored_state: tuple[str, str], ours: tuple[str, str], kept: bool
) -> None:
    assert keeps_stored_state(state(*stored_state), state(*ours)) is kept


def test_another_incarnation_is_never_kept_over_ours() -> None:
    assert not keeps_stored_state(state("modified", "10", uid="old"), state("added", "9"))
    assert not keeps_stored_state(state("deleted", "10", uid="old"), state("added", "9"))


def test_the_identity_of_a_state_is_read_from_its_object() -> None:
    event = observed_event("deleted", sandbox("a", "42"), time=NOW, synthetic=True)
    assert state_identity(event) == ChangeEventId(
        "0b8c5a9e-1111-4c2e-9d6f-2a7d3c1e5f00", "42", "deleted"
    )


def test_a_stale_leaders_last_event_does_not_repair_a_newer_state_table_entry() -> None:
    """Leader A wrote rv 10 to both streams; stale leader B's rv 9 landed after it in the log
    only (the state table refused it). The log's newest event is B's; the state table wins."""
    newer = stored("modified", "u", "10", seq=3, event_seq=2)
    stale = stored("modified", "u", "9", seq=4)
    recovered = recover({KEY: newer}, {KEY: stale})
    assert recovered.repairs == []
    assert recovered.view == {KEY: Seen("u", "10")}
    assert recovered.seqs[KEY] == Seqs(event=4, state=3)
