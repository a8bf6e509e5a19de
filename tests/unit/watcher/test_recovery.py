"""Recovering the published view from the state table and the event log after what it copied."""

from __future__ import annotations

import pytest

from events.codec import encode_event
from events.envelope import ObjectKey
from events.ids import ChangeEventId
from events.types import observed_event
from services.watcher.core.diffing import Seen
from services.watcher.core.recovery import (
    StoredEvent,
    StoredEventError,
    keeps_stored_state,
    recover,
    state_identity,
    stored_event,
)
from tests.unit.events.samples import NOW, sandbox

KEY = ObjectKey("Sandbox", "default", "a")
OTHER = ObjectKey("Sandbox", "default", "b")


def stored(change: str, uid: str, rv: str, seq: int | None, key: ObjectKey = KEY) -> StoredEvent:
    return StoredEvent(key, ChangeEventId(uid, rv, change), seq)  # type: ignore[arg-type]


def test_a_stored_event_is_read_from_its_payload() -> None:
    payload = encode_event(observed_event("modified", sandbox("a.b", "42"), time=NOW))
    entry = stored_event(payload, 7)
    assert entry.key == ObjectKey("Sandbox", "default", "a.b")
    assert entry.event_id == "0b8c5a9e-1111-4c2e-9d6f-2a7d3c1e5f00:42:modified"
    assert entry.seq == 7


@pytest.mark.parametrize("payload", [b"garbage", b"{}", b'{"id": "x", "kind": "K", "name": "n"}'])
def test_a_message_that_is_not_an_observed_change_is_refused(payload: bytes) -> None:
    with pytest.raises(StoredEventError, match="message 3"):
        stored_event(payload, 3)


def test_the_log_after_the_copied_sequence_is_newer_than_the_state_table() -> None:
    """The server had not copied rv 7 yet when the state table was read."""
    recovered = recover(
        {KEY: stored("modified", "u", "5", 20), OTHER: stored("added", "v", "2", 12, OTHER)},
        {KEY: stored("modified", "u", "7", 30)},
    )
    assert recovered.view == {KEY: Seen("u", "7"), OTHER: Seen("v", "2")}
    assert recovered.seqs == {KEY: 30, OTHER: 12}


def test_an_object_only_in_the_log_is_in_the_view() -> None:
    """Its first event was not copied yet: a later relist that does not find it must publish a
    synthetic deletion, so it must be in the view."""
    recovered = recover({}, {KEY: stored("added", "u", "3", 8)})
    assert recovered.view == {KEY: Seen("u", "3")}
    assert recovered.seqs == {KEY: 8}


def test_a_deletion_in_the_log_removes_the_object_from_the_view() -> None:
    recovered = recover({KEY: stored("added", "u", "3", 4)}, {KEY: stored("deleted", "u", "9", 9)})
    assert recovered.view == {}
    assert recovered.seqs == {KEY: 9}


def test_a_tombstone_in_the_state_table_is_no_object_but_fences_the_next_write() -> None:
    recovered = recover({KEY: stored("deleted", "u", "9", 12)}, {})
    assert recovered.view == {}
    assert recovered.seqs == {KEY: 12}


def test_an_entry_written_before_the_table_was_derived_fences_as_unknown() -> None:
    recovered = recover({KEY: stored("modified", "u", "5", None)}, {})
    assert recovered.view == {KEY: Seen("u", "5")}
    assert recovered.seqs == {KEY: None}


# --- two leaders overlapping: which state stays an object's last --------------------------


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
        (("deleted", "10"), ("modified", "9"), True),  # a stale state of a deleted object
        (("deleted", "10"), ("added", "11"), False),  # a Pod back in our selections
        (("modified", "abc"), ("modified", "abd"), False),  # opaque versions: not ordered
        (("modified", "abc"), ("modified", "abc"), True),  # ...but equal is equal
    ],
)
def test_a_stored_state_that_is_not_older_stays_the_last(
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
