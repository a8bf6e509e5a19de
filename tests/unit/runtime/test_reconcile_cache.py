"""The workers' cache: the bus view, read-your-writes on top of it, and its indexes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from api.objects import compare_resource_versions
from events.codec import ObservedState
from events.envelope import ObjectKey, key_of
from services.runtime.cache import Change, ObjectCache

POD = ObjectKey("Pod", "default", "p")


def pod(
    rv: str, *, uid: str = "u1", labels: dict[str, str] | None = None, owner: str | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": "p",
        "namespace": "default",
        "uid": uid,
        "resourceVersion": rv,
        "labels": labels or {},
    }
    if owner:
        metadata["ownerReferences"] = [
            {"uid": owner, "controller": True, "kind": "Sandbox", "name": "s"}
        ]
    return {"kind": "Pod", "metadata": metadata}


Observe = Callable[[ObjectCache, Change, dict[str, Any]], bool]


def observe_decoded(cache: ObjectCache, change: Change, obj: dict[str, Any]) -> bool:
    return cache.observe(change, obj)


def observe_json(cache: ObjectCache, change: Change, obj: dict[str, Any]) -> bool:
    """The same change as the state table's read hands it over: the object still JSON."""
    metadata = obj["metadata"]
    return cache.observe_state(
        ObservedState(
            change,
            key_of(obj),
            metadata.get("uid", ""),
            metadata["resourceVersion"],
            metadata.get("labels"),
            metadata.get("ownerReferences"),
            msgspec.json.encode(obj),
        )
    )


@pytest.fixture(params=[observe_decoded, observe_json], ids=["decoded", "json"])
def observe(request: pytest.FixtureRequest) -> Observe:
    """Every test of what the bus shows holds for both ways an object comes in."""
    return request.param  # type: ignore[no-any-return]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [("5", "5", 0), ("5", "10", -1), ("10", "5", 1), ("abc", "abd", None), ("5", "x", None)],
)
def test_resource_versions_are_ordered_only_when_both_are_integers(
    a: str, b: str, expected: int | None
) -> None:
    assert compare_resource_versions(a, b) == expected


def test_the_bus_view_follows_changes_and_ignores_older_states(observe: Observe) -> None:
    cache = ObjectCache()
    assert observe(cache, "added", pod("5"))
    assert observe(cache, "modified", pod("7"))
    assert not observe(cache, "modified", pod("6")), "an older state replayed after a restart"
    assert cache.get(POD)["metadata"]["resourceVersion"] == "7"  # type: ignore[index]
    assert not observe(cache, "deleted", pod("6"))
    assert cache.get(POD) is not None
    assert observe(cache, "deleted", pod("8"))
    assert cache.get(POD) is None and len(cache) == 0


def test_our_write_outranks_the_bus_until_the_bus_catches_up(observe: Observe) -> None:
    cache = ObjectCache()
    observe(cache, "added", pod("5"))
    cache.remember(pod("9", labels={"written": "yes"}))
    observe(cache, "modified", pod("7"))
    assert cache.get(POD)["metadata"]["labels"] == {"written": "yes"}  # type: ignore[index]
    observe(cache, "modified", pod("9", labels={"written": "yes"}))
    observe(cache, "modified", pod("11"))
    assert cache.get(POD)["metadata"]["resourceVersion"] == "11"  # type: ignore[index]


def test_an_answer_the_bus_already_showed_is_not_held(observe: Observe) -> None:
    """On a busy cluster the echo can come before the write's answer: the answer, or an
    older one arriving late, is then no news, and must neither be held nor outrank the bus."""
    cache = ObjectCache(written_ttl=10)
    observe(cache, "added", pod("5"))
    observe(cache, "modified", pod("9", labels={"newer": "yes"}))
    cache.remember(pod("7", labels={"late": "yes"}))
    assert cache.get(POD)["metadata"]["labels"] == {"newer": "yes"}  # type: ignore[index]
    cache.remember(pod("9", labels={"newer": "yes"}))
    assert cache.expire() == [], "nothing held, so nothing to expire"


def test_answers_beyond_the_limit_are_held_packed_and_read_back_the_same() -> None:
    """A burst's answers wait for their echoes: past ``fresh_limit`` of them the oldest are
    packed, and read back as they were written."""
    cache = ObjectCache(fresh_limit=2)
    answers = [pod(str(10 + i), labels={"n": str(i)}) for i in range(4)]
    for i, answer in enumerate(answers):
        answer["metadata"]["name"] = f"p{i}"
        cache.remember(answer)
    keys = [ObjectKey("Pod", "default", f"p{i}") for i in range(4)]
    assert cache.get(keys[3]) is cache.get(keys[3]), "the latest are held as dicts"
    assert cache.get(keys[0]) is not cache.get(keys[0]), "the oldest are unpacked at each read"
    assert [cache.get(key) for key in keys] == answers


def test_a_delete_we_made_hides_the_object_until_the_bus_agrees(observe: Observe) -> None:
    cache = ObjectCache()
    observe(cache, "added", pod("5"))
    cache.remember_gone(POD)
    assert cache.get(POD) is None and POD not in cache
    observe(cache, "modified", pod("4"))
    assert cache.get(POD) is None
    observe(cache, "deleted", pod("5"))
    assert cache.get(POD) is None
    observe(cache, "added", pod("12", uid="u2"))
    assert cache.get(POD)["metadata"]["uid"] == "u2"  # type: ignore[index]


def test_a_new_incarnation_after_our_delete_replaces_the_tombstone(observe: Observe) -> None:
    cache = ObjectCache()
    observe(cache, "added", pod("5"))
    cache.remember_gone(POD)
    observe(cache, "added", pod("8", uid="u2"))
    assert cache.get(POD)["metadata"]["uid"] == "u2"  # type: ignore[index]


def test_opaque_versions_wait_for_the_exact_echo_or_the_deadline(observe: Observe) -> None:
    clock = Clock()
    cache = ObjectCache(written_ttl=30, clock=clock)
    cache.remember(pod("b-2", labels={"ours": "1"}))
    observe(cache, "modified", pod("a-1"))
    assert cache.get(POD)["metadata"]["labels"] == {"ours": "1"}  # type: ignore[index]
    clock.now = 31
    assert cache.expire() == [POD]
    assert cache.get(POD)["metadata"]["resourceVersion"] == "a-1"  # type: ignore[index]


def test_an_unwatched_object_found_by_a_read_is_forgotten_after_the_deadline() -> None:
    clock = Clock()
    cache = ObjectCache(written_ttl=5, clock=clock)
    cache.remember(pod("3"))
    assert POD in cache
    clock.now = 6
    cache.expire()
    assert POD not in cache and cache.keys("Pod") == []


def test_indexes_by_label_and_by_controller_follow_the_effective_object(observe: Observe) -> None:
    cache = ObjectCache(label_indexes=[("Pod", "hash")])
    observe(cache, "added", pod("5", labels={"hash": "h1"}, owner="s1"))
    assert [p["metadata"]["name"] for p in cache.by_label("Pod", "default", "hash", "h1")] == ["p"]
    assert cache.owned_by("Pod", "s1") and not cache.owned_by("Pod", "s2")
    cache.remember(pod("6", labels={"hash": "h2"}, owner="s2"))
    assert cache.by_label("Pod", "default", "hash", "h1") == []
    assert cache.by_label("Pod", "default", "hash", "h2")
    assert cache.owned_by("Pod", "s2") and not cache.owned_by("Pod", "s1")
    assert cache.by_label("Pod", "other", "hash", "h2") == []
    with pytest.raises(KeyError):
        cache.by_label("Pod", "default", "unindexed", "x")
    observe(cache, "deleted", pod("9", labels={"hash": "h2"}))
    assert cache.by_label("Pod", "default", "hash", "h2") == [] and cache.keys("Pod") == []


def test_objects_come_back_as_they_went_in_whatever_their_kind_shares(observe: Observe) -> None:
    """Objects are kept packed against the first object of their kind: every later object,
    however unlike the first, reads back exactly."""
    cache = ObjectCache()
    first = pod("1", labels={"team": "a"})
    unlike = {
        "kind": "Pod",
        "metadata": {"name": "q", "namespace": "other", "resourceVersion": "2"},
        "spec": {"containers": [{"name": "ünïcode", "args": ["x" * 5000]}]},
        "status": {"phase": None, "podIPs": [], "ready": True, "restarts": 3.5},
    }
    observe(cache, "added", first)
    observe(cache, "added", unlike)
    q = ObjectKey("Pod", "other", "q")
    assert cache.get(POD) == first and cache.get(q) == unlike
    assert cache.observed(q) == unlike and q in cache


def member(name: str, rv: str) -> dict[str, Any]:
    obj = pod(rv, labels={"pool": "p"})
    obj["metadata"]["name"] = name
    return obj


def test_objects_read_through_an_index_stay_unpacked_until_the_worker_rests(
    observe: Observe,
) -> None:
    # Packed at once (none kept fresh), so that every read must unpack.
    cache = ObjectCache(label_indexes=[("Pod", "pool")], unpacked_limit=2, fresh_limit=0)
    observe(cache, "added", member("a", "1"))
    [read] = cache.by_label("Pod", "default", "pool", "p")
    assert cache.by_label("Pod", "default", "pool", "p")[0] is read, "not unpacked again"
    assert cache.get(ObjectKey("Pod", "default", "a")) is read
    observe(cache, "modified", member("a", "2"))
    [newer] = cache.by_label("Pod", "default", "pool", "p")
    assert newer["metadata"]["resourceVersion"] == "2", "a change is never served stale"
    observe(cache, "added", member("b", "3"))
    observe(cache, "added", member("c", "4"))
    first = cache.by_label("Pod", "default", "pool", "p")
    assert [o["metadata"]["name"] for o in first] == ["a", "b", "c"]
    assert cache.by_label("Pod", "default", "pool", "p")[0] is not first[0], "two are kept"
    kept = cache.by_label("Pod", "default", "pool", "p")
    cache.rest()
    again = cache.by_label("Pod", "default", "pool", "p")
    assert again == kept and again[-1] is not kept[-1]
    single = ObjectKey("Pod", "default", "q")
    observe(cache, "added", {**pod("5"), "metadata": {**pod("5")["metadata"], "name": "q"}})
    assert cache.get(single) is not cache.get(single), "a single read keeps nothing"


def test_an_object_that_left_through_the_state_table_is_gone_from_its_indexes() -> None:
    cache = ObjectCache(label_indexes=[("Pod", "hash")])
    observe_json(cache, "added", pod("5", labels={"hash": "h1"}, owner="s1"))
    observe_json(cache, "deleted", pod("6", labels={"hash": "h1"}, owner="s1"))
    assert (
        cache.by_label("Pod", "default", "hash", "h1") == [] and cache.owned_by("Pod", "s1") == []
    )
    assert POD not in cache


def test_labels_and_owners_that_are_not_what_kubernetes_sends_index_nothing() -> None:
    cache = ObjectCache(label_indexes=[("Pod", "hash")])
    odd = pod("5")
    odd["metadata"]["labels"] = ["hash"]
    odd["metadata"]["ownerReferences"] = {"uid": "s1", "controller": True}
    observe_json(cache, "added", odd)
    assert cache.get(POD) == odd and cache.owned_by("Pod", "s1") == []


def test_objects_loaded_loose_read_back_the_same_before_and_after_they_are_packed() -> None:
    cache = ObjectCache(label_indexes=[("Pod", "pool")])
    for name in ("a", "b", "c"):
        observe_json(cache, "added", member(name, "1"))
    before = [cache.get(ObjectKey("Pod", "default", name)) for name in ("a", "b", "c")]
    assert cache.loose == 3
    assert cache.pack_loose(2) and cache.loose == 1, "some are left for the next slice"
    assert not cache.pack_loose(2) and cache.loose == 0
    after = [cache.get(ObjectKey("Pod", "default", name)) for name in ("a", "b", "c")]
    assert after == before == [member(name, "1") for name in ("a", "b", "c")]
    assert len(cache.by_label("Pod", "default", "pool", "p")) == 3


def test_a_change_of_a_loose_object_replaces_it() -> None:
    cache = ObjectCache()
    observe_json(cache, "added", pod("5"))
    cache.observe("modified", pod("6", labels={"new": "yes"}))
    assert cache.loose == 1, "fresh now, not loose"
    assert cache.get(POD) == pod("6", labels={"new": "yes"})
    observe_json(cache, "modified", pod("7"))
    observe_json(cache, "deleted", pod("8"))
    assert cache.loose == 0 and cache.get(POD) is None


def test_a_delivered_object_is_read_as_delivered_until_it_is_packed_once() -> None:
    """What the bus delivers stays the dict it came as (no packing, no unpacking for the pass
    it wakes) until the worker rests, or until more than ``fresh_limit`` are fresh: then the
    oldest is packed, and reads back the same."""
    cache = ObjectCache(label_indexes=[("Pod", "pool")], fresh_limit=2)
    delivered = {name: member(name, "1") for name in ("a", "b")}
    for obj in delivered.values():
        cache.observe("added", obj)
    a, b, c = (ObjectKey("Pod", "default", name) for name in ("a", "b", "c"))
    assert cache.get(a) is delivered["a"]
    assert cache.by_label("Pod", "default", "pool", "p")[1] is delivered["b"]
    cache.observe("added", member("c", "2"))
    assert cache.loose == 2, "the oldest was packed"
    assert cache.get(a) == delivered["a"] and cache.get(a) is not delivered["a"]
    assert cache.get(b) is delivered["b"]
    newer = member("b", "3")
    cache.observe("modified", newer)
    assert cache.get(b) is newer, "a change replaces the fresh object"
    assert not cache.pack_loose(5) and cache.loose == 0
    assert [cache.get(key) for key in (a, b, c)] == [
        member("a", "1"),
        member("b", "3"),
        member("c", "2"),
    ]
    cache.observe("deleted", member("c", "4"))
    assert cache.get(c) is None and cache.loose == 0


def test_a_rewritten_object_is_held_from_its_latest_write() -> None:
    clock = Clock()
    cache = ObjectCache(written_ttl=10, clock=clock)
    cache.remember(pod("3", labels={"first": "1"}))
    clock.now = 1
    other = pod("3", uid="u2")
    other["metadata"]["name"] = "q"
    cache.remember(other)
    clock.now = 8
    cache.remember(pod("4", labels={"again": "1"}))  # p again, after q
    clock.now = 12
    assert cache.expire() == [ObjectKey("Pod", "default", "q")], "p was written again at 8"
    assert cache.get(POD)["metadata"]["labels"] == {"again": "1"}  # type: ignore[index]
    clock.now = 18
    assert cache.expire() == [POD]
    assert len(cache) == 0
