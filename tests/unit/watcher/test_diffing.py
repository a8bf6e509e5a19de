"""The watcher's diff: a relist publishes exactly what changed, and a watch event never repeats."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from events.envelope import ObjectKey
from services.watcher.core.diffing import (
    Change,
    Seen,
    apply,
    diff,
    key_of,
    listed_changes,
    seen_of,
    vanished_changes,
    watch_changes,
)


def obj(name: str, uid: str, rv: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": rv},
    }


def key(name: str, namespace: str = "default") -> ObjectKey:
    return ObjectKey("Sandbox", namespace, name)


def summary(changes: list[Change]) -> list[tuple[str, str, str, str, bool]]:
    return [(c.change, c.key.name, c.uid, c.resource_version, c.synthetic) for c in changes]


# --- examples --------------------------------------------------------------------------------


def test_a_relist_publishes_new_changed_and_vanished_objects_and_nothing_else() -> None:
    view = {
        key("same"): Seen("u1", "10"),
        key("changed"): Seen("u2", "11"),
        key("gone"): Seen("u3", "12"),
        key("recreated"): Seen("u4", "13"),
    }
    fresh = {
        key("same"): obj("same", "u1", "10"),
        key("changed"): obj("changed", "u2", "20"),
        key("new"): obj("new", "u5", "21"),
        key("recreated"): obj("recreated", "u6", "22"),
    }
    assert summary(diff(view, fresh)) == [
        ("modified", "changed", "u2", "20", False),
        ("added", "new", "u5", "21", False),
        ("deleted", "recreated", "u4", "13", True),
        ("added", "recreated", "u6", "22", False),
        ("deleted", "gone", "u3", "12", True),
    ]


def test_a_synthetic_deletion_has_no_object_and_the_id_of_the_last_published_state() -> None:
    [change] = vanished_changes({key("gone"): Seen("u3", "12")}, set())
    assert change.object is None
    assert change.synthetic
    assert change.event_id == "u3:12:deleted"


def test_listed_changes_carry_the_listed_object() -> None:
    listed = obj("a", "u1", "7")
    [change] = listed_changes(key("a"), Seen("u1", "6"), listed)
    assert change.object is listed
    assert change.event_id == "u1:7:modified"


def test_key_and_identity_of_a_cluster_scoped_object() -> None:
    cluster_scoped = {"kind": "X", "metadata": {"name": "n", "uid": "u", "resourceVersion": "1"}}
    assert key_of("X", cluster_scoped) == ObjectKey("X", "", "n")
    assert seen_of(cluster_scoped) == Seen("u", "1")


def test_an_object_without_identity_is_refused() -> None:
    import pytest

    from services.watcher.core.diffing import DiffError

    with pytest.raises(DiffError, match=r"metadata\.uid"):
        seen_of({"metadata": {"name": "n", "resourceVersion": "1"}})


# --- watch events ----------------------------------------------------------------------------


def test_watch_events_are_published_as_they_come() -> None:
    k = key("a")
    assert summary(watch_changes(k, None, "ADDED", obj("a", "u1", "1"))) == [
        ("added", "a", "u1", "1", False)
    ]
    assert summary(watch_changes(k, Seen("u1", "1"), "MODIFIED", obj("a", "u1", "2"))) == [
        ("modified", "a", "u1", "2", False)
    ]
    assert summary(watch_changes(k, Seen("u1", "2"), "DELETED", obj("a", "u1", "3"))) == [
        ("deleted", "a", "u1", "3", False)
    ]


def test_a_state_already_published_is_not_published_again() -> None:
    assert watch_changes(key("a"), Seen("u1", "2"), "MODIFIED", obj("a", "u1", "2")) == []
    assert watch_changes(key("a"), Seen("u1", "2"), "ADDED", obj("a", "u1", "2")) == []


def test_a_change_of_an_unknown_object_is_its_first_appearance() -> None:
    assert summary(watch_changes(key("a"), None, "MODIFIED", obj("a", "u1", "5"))) == [
        ("added", "a", "u1", "5", False)
    ]


def test_a_new_uid_under_a_known_key_first_deletes_the_old_object() -> None:
    assert summary(watch_changes(key("a"), Seen("u0", "3"), "ADDED", obj("a", "u1", "5"))) == [
        ("deleted", "a", "u0", "3", True),
        ("added", "a", "u1", "5", False),
    ]
    assert summary(watch_changes(key("a"), Seen("u0", "3"), "DELETED", obj("a", "u1", "6"))) == [
        ("deleted", "a", "u0", "3", True),
        ("deleted", "a", "u1", "6", False),
    ]


def test_leaving_the_selection_is_a_deletion_and_an_unselected_object_is_ignored() -> None:
    k = key("a")
    left = watch_changes(k, Seen("u1", "1"), "MODIFIED", obj("a", "u1", "2"), selected=False)
    assert summary(left) == [("deleted", "a", "u1", "2", False)]
    assert watch_changes(k, None, "MODIFIED", obj("a", "u1", "2"), selected=False) == []
    assert watch_changes(k, None, "DELETED", obj("a", "u1", "2"), selected=False) == []


# --- properties ------------------------------------------------------------------------------

NAMES = st.sampled_from(["a", "b", "c", "d", "e", "f.g"])
INCARNATIONS = st.sampled_from(["1", "2", "3"])
"""A uid is unique to one object: it is the name plus which incarnation under that name."""
RVS = st.integers(min_value=1, max_value=9).map(str)
VIEWS = st.dictionaries(NAMES, st.tuples(INCARNATIONS, RVS), max_size=6).map(
    lambda items: {key(name): Seen(f"{name}-{i}", rv) for name, (i, rv) in items.items()}
)
FRESH = st.dictionaries(NAMES, st.tuples(INCARNATIONS, RVS), max_size=6).map(
    lambda items: {key(name): obj(name, f"{name}-{i}", rv) for name, (i, rv) in items.items()}
)


def view_of(fresh: dict[ObjectKey, dict[str, Any]]) -> dict[ObjectKey, Seen]:
    return {k: seen_of(o) for k, o in fresh.items()}


@given(VIEWS, FRESH)
def test_publishing_the_diff_brings_the_view_to_the_fresh_list(
    view: dict[ObjectKey, Seen], fresh: dict[ObjectKey, dict[str, Any]]
) -> None:
    assert apply(view, diff(view, fresh)) == view_of(fresh)


@given(FRESH)
def test_the_diff_of_a_view_with_itself_is_empty(fresh: dict[ObjectKey, dict[str, Any]]) -> None:
    assert diff(view_of(fresh), fresh) == []


@given(VIEWS, FRESH)
def test_a_relist_right_after_publishing_a_diff_publishes_nothing(
    view: dict[ObjectKey, Seen], fresh: dict[ObjectKey, dict[str, Any]]
) -> None:
    assert diff(apply(view, diff(view, fresh)), fresh) == []


@given(VIEWS, FRESH)
def test_a_diff_has_unique_ids_and_only_deletions_are_synthetic(
    view: dict[ObjectKey, Seen], fresh: dict[ObjectKey, dict[str, Any]]
) -> None:
    changes = diff(view, fresh)
    ids = [c.event_id for c in changes]
    assert len(ids) == len(set(ids))
    for change in changes:
        assert change.synthetic == (change.object is None)
        assert not change.synthetic or change.change == "deleted"


@given(VIEWS, FRESH)
def test_a_diff_touches_each_key_at_most_twice_and_deletes_before_it_adds(
    view: dict[ObjectKey, Seen], fresh: dict[ObjectKey, dict[str, Any]]
) -> None:
    by_key: dict[ObjectKey, list[str]] = {}
    for change in diff(view, fresh):
        by_key.setdefault(change.key, []).append(change.change)
    for kinds in by_key.values():
        assert kinds in (["added"], ["modified"], ["deleted"], ["deleted", "added"])


@given(VIEWS, FRESH)
def test_streaming_the_list_page_by_page_decides_the_same_as_the_whole_diff(
    view: dict[ObjectKey, Seen], fresh: dict[ObjectKey, dict[str, Any]]
) -> None:
    streamed: list[Change] = []
    for k in sorted(fresh):
        streamed.extend(listed_changes(k, view.get(k), fresh[k]))
    streamed.extend(vanished_changes(view, list(fresh)))
    assert streamed == diff(view, fresh)


HISTORY = st.lists(
    st.tuples(NAMES, st.sampled_from(["create", "update", "delete"])), min_size=1, max_size=30
)


@given(HISTORY)
def test_a_gapless_watch_publishes_every_change_once_and_ends_at_the_truth(
    history: list[tuple[str, str]],
) -> None:
    """Replaying a simulated API server's watch stream through watch_changes."""
    truth: dict[ObjectKey, dict[str, Any]] = {}
    view: dict[ObjectKey, Seen] = {}
    published: list[Change] = []
    rv = 0
    uids = 0
    for name, verb in history:
        rv += 1
        k = key(name)
        current = truth.get(k)
        if verb == "create" and current is None:
            uids += 1
            truth[k] = obj(name, f"u{uids}", str(rv))
            event = "ADDED"
        elif verb == "update" and current is not None:
            truth[k] = obj(name, current["metadata"]["uid"], str(rv))
            event = "MODIFIED"
        elif verb == "delete" and current is not None:
            gone = truth.pop(k)
            gone["metadata"]["resourceVersion"] = str(rv)
            changes = watch_changes(k, view.get(k), "DELETED", gone)
            published.extend(changes)
            view = apply(view, changes)
            continue
        else:
            continue
        changes = watch_changes(k, view.get(k), event, truth[k])  # type: ignore[arg-type]
        published.extend(changes)
        view = apply(view, changes)
        # A replayed event (a reconnect that delivers it again) publishes nothing.
        assert watch_changes(k, view.get(k), "MODIFIED", truth[k]) == []
    assert view == view_of(truth)
    assert len(published) == len({c.event_id for c in published})
    assert not any(c.synthetic for c in published)
