"""Rendezvous ownership: every replica computes the same owner from the same members, and a
member joining or leaving moves only the keys it gains or loses."""

from __future__ import annotations

from events.envelope import ObjectKey
from services.runtime.reconcile.sharding import owner_of

KEYS = [ObjectKey("SandboxClaim", "default", f"claim-{i}") for i in range(1000)]


def test_the_owner_does_not_depend_on_the_order_the_members_are_seen_in() -> None:
    assert all(owner_of(k, ["a", "b", "c"]) == owner_of(k, ["c", "a", "b"]) for k in KEYS)


def test_a_member_leaving_moves_only_its_own_keys() -> None:
    before = {key: owner_of(key, ["a", "b", "c"]) for key in KEYS}
    after = {key: owner_of(key, ["a", "b"]) for key in KEYS}
    moved = {key for key in KEYS if before[key] != after[key]}
    assert moved == {key for key in KEYS if before[key] == "c"}
    assert 250 < len(moved) < 420, "about a third of the keys were c's"


def test_no_members_own_nothing() -> None:
    assert owner_of(KEYS[0], []) is None
