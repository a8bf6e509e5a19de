"""The merge of several selections of one resource into one ordered stream per object.

A small simulated API server commits changes to objects that carry the label keys ``a`` and
``b`` (and an unrelated ``c``), and derives what two label-selector watches (``a`` and ``b``)
deliver, exactly as the API server's ``convertToWatchEvent`` does: ADDED on entering a
selection, MODIFIED inside it, DELETED (the previous state stamped with the new
resourceVersion) on leaving it or on a deletion. The two streams are delivered to
:class:`~services.watcher.core.merging.Merge` interleaved at random, each in its own order,
with bookmarks, and with the reads the merge asks for answered at random moments.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from api.objects import Json
from events.envelope import ObjectKey
from services.watcher.core.diffing import Change, Seen
from services.watcher.core.merging import Merge, newer

KEYS = ("a", "b")


def holds(label: str) -> Any:
    def check(obj: Mapping[str, Any]) -> bool:
        return label in (obj.get("metadata", {}).get("labels") or {})

    return check


def merge_of(published: Mapping[ObjectKey, Seen] | None = None) -> Merge:
    return Merge("Pod", {key: holds(key) for key in KEYS}, published or {})


def key(name: str) -> ObjectKey:
    return ObjectKey("Pod", "default", name)


def pod(name: str, uid: str, rv: int | str, *labels: str) -> Json:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "resourceVersion": str(rv),
            "labels": dict.fromkeys(labels, "x"),
        },
    }


def summary(changes: list[Change]) -> list[tuple[str, str, str, bool]]:
    return [(c.change, c.uid, c.resource_version, c.synthetic) for c in changes]


def start(merge: Merge, rv: str = "1") -> None:
    """Every selection relisted an empty cluster at ``rv``."""
    for selection in KEYS:
        assert merge.relisted(selection, set(), rv) == []


# --- examples --------------------------------------------------------------------------------


def test_an_adoption_seen_by_the_new_selection_first_is_one_modification() -> None:
    merge = merge_of()
    start(merge)
    assert summary(merge.present("a", key("p"), pod("p", "u", 2, "a"))) == [
        ("added", "u", "2", False)
    ]
    assert summary(merge.present("b", key("p"), pod("p", "u", 3, "b"))) == [
        ("modified", "u", "3", False)
    ]
    assert merge.absent("a", key("p"), "3", pod("p", "u", 3, "a")) == []
    assert merge.candidates() == {}


def test_an_adoption_seen_by_the_old_selection_first_waits_and_publishes_no_deletion() -> None:
    merge = merge_of()
    start(merge)
    merge.present("a", key("p"), pod("p", "u", 2, "a"))
    merge.progressed("a", "2")
    # adoptable's DELETED comes first: nobody holds the Pod, but b has not spoken about rv 3.
    assert merge.absent("a", key("p"), "3", pod("p", "u", 3, "a")) == []
    assert merge.progressed("a", "3") == []
    assert merge.candidates() == {key("p"): "3"}
    assert merge.take_probes() == [(key("p"), "3")]
    assert summary(merge.present("b", key("p"), pod("p", "u", 3, "b"))) == [
        ("modified", "u", "3", False)
    ]
    assert merge.candidates() == {}
    # The read asked for meanwhile answers too late to matter.
    assert merge.probed(key("p"), "3", pod("p", "u", 3, "b")) == []


def test_a_deletion_waits_for_every_selection_to_pass_it() -> None:
    merge = merge_of()
    start(merge)
    merge.present("a", key("p"), pod("p", "u", 2, "a"))
    assert merge.absent("a", key("p"), "3", pod("p", "u", 3, "a")) == []
    assert merge.progressed("a", "3") == []
    assert summary(merge.progressed("b", "3")) == [("deleted", "u", "3", False)]  # a bookmark
    assert merge.remembered == 0  # both streams are past it: the tombstone is gone too


def test_a_read_proves_a_deletion_without_waiting_for_an_idle_selection() -> None:
    merge = merge_of()
    start(merge)
    merge.present("a", key("p"), pod("p", "u", 2, "a"))
    deleted = pod("p", "u", 3, "a")
    merge.absent("a", key("p"), "3", deleted)
    [(probed, rv)] = merge.take_probes()
    [change] = merge.probed(probed, rv, None)  # no such Pod at rv 3
    assert (change.change, change.resource_version, change.object) == ("deleted", "3", deleted)
    # b comes late with an old state of it: history, not news.
    assert merge.present("b", key("p"), pod("p", "u", 2, "a", "b")) == []


def test_a_read_that_finds_the_object_selected_publishes_it_and_who_holds_it() -> None:
    merge = merge_of()
    start(merge)
    merge.present("a", key("p"), pod("p", "u", 2, "a"))
    merge.absent("a", key("p"), "3", pod("p", "u", 3, "a"))
    assert summary(merge.probed(key("p"), "3", pod("p", "u", 3, "b"))) == [
        ("modified", "u", "3", False)
    ]
    # b's own report of the same state is a duplicate; its later let-go is a deletion.
    assert merge.present("b", key("p"), pod("p", "u", 3, "b")) == []
    merge.absent("b", key("p"), "4", pod("p", "u", 4, "b"))
    assert summary(merge.progressed("b", "4") + merge.progressed("a", "4")) == [
        ("deleted", "u", "4", False)
    ]


def test_an_object_in_two_selections_is_deleted_when_the_second_lets_go() -> None:
    merge = merge_of()
    start(merge)
    merge.present("a", key("p"), pod("p", "u", 2, "a", "b"))
    assert merge.present("b", key("p"), pod("p", "u", 2, "a", "b")) == []
    assert merge.absent("a", key("p"), "5", pod("p", "u", 5, "a", "b")) == []
    merge.progressed("a", "5")
    deleted = merge.absent("b", key("p"), "5", pod("p", "u", 5, "a", "b"))
    assert summary(deleted + merge.progressed("b", "5")) == [("deleted", "u", "5", False)]


def test_an_older_state_from_a_slow_selection_never_overwrites_a_newer_one() -> None:
    merge = merge_of()
    start(merge)
    merge.present("a", key("p"), pod("p", "u", 2, "a", "b"))
    merge.present("a", key("p"), pod("p", "u", 7, "a", "b"))
    assert merge.present("b", key("p"), pod("p", "u", 2, "a", "b")) == []
    assert merge.present("b", key("p"), pod("p", "u", 7, "a", "b")) == []
    assert merge.published_view() == {key("p"): Seen("u", "7")}


def test_resource_versions_are_compared_as_numbers() -> None:
    assert newer("10", "9") and not newer("9", "10") and not newer("10", "10")
    merge = merge_of()
    start(merge)
    merge.present("a", key("p"), pod("p", "u", 10, "a", "b"))
    assert merge.present("b", key("p"), pod("p", "u", 9, "a", "b")) == []


def test_a_recovered_object_that_no_selection_lists_gets_one_synthetic_deletion() -> None:
    merge = merge_of({key("kept"): Seen("u1", "5"), key("gone"): Seen("u2", "6")})
    assert merge.present("a", key("kept"), pod("kept", "u1", 5, "a")) == []
    assert merge.relisted("a", {key("kept")}, "9") == []
    assert merge.present("b", key("kept"), pod("kept", "u1", 5, "a")) == []  # not b's
    # b did not list "kept", but a holds it; neither lists "gone": a synthetic deletion, once
    # both lists are in and their streams have passed the later one.
    assert merge.relisted("b", set(), "10") == []
    assert merge.candidates() == {key("gone"): "10"}
    assert summary(merge.progressed("a", "10")) == [("deleted", "u2", "6", True)]
    assert merge.published_view() == {key("kept"): Seen("u1", "5")}


def relisted_around_a_gap() -> Merge:
    """a lists p at 6; p moves to b at 7 and out of both at 8; b's first list is at 8, so
    b's stream never covered 7; a's DELETED at 7 comes after it."""
    merge = merge_of()
    assert summary(merge.present("a", key("p"), pod("p", "u", 6, "a"))) == [
        ("added", "u", "6", False)
    ]
    assert merge.relisted("a", {key("p")}, "6") == []
    assert merge.relisted("b", set(), "8") == []
    assert merge.absent("a", key("p"), "7", pod("p", "u", 7, "a")) == []
    return merge


def test_a_relist_is_no_proof_for_the_resource_versions_its_stream_jumped_over() -> None:
    merge = relisted_around_a_gap()
    # b's progress (8) is past 7, but b held p at 7: no deletion at 7.
    assert merge.progressed("a", "7") == []
    assert merge.candidates() == {key("p"): "7"}
    assert merge.take_probes() == [(key("p"), "7")]
    # Once a passes b's list, the deletion is that list's: synthetic, of what was published.
    assert summary(merge.progressed("a", "8")) == [("deleted", "u", "6", True)]
    assert merge.candidates() == {}
    assert merge.remembered == 0


def test_a_read_decides_a_deletion_in_a_gap_at_its_own_resource_version() -> None:
    # Had p been deleted at 7 instead, the streams would say the same: only a read tells.
    merge = relisted_around_a_gap()
    merge.progressed("a", "7")
    [change] = merge.probed(key("p"), "7", None)
    assert (change.change, change.resource_version, change.object) == (
        "deleted",
        "7",
        pod("p", "u", 7, "a"),
    )
    assert merge.remembered == 0


def test_a_read_that_finds_the_object_in_a_gap_lets_the_relist_after_it_let_go() -> None:
    merge = relisted_around_a_gap()
    merge.progressed("a", "7")
    # In b at 7: that state is the truth; b's list at 8 did not list p, so b let go there.
    assert summary(merge.probed(key("p"), "7", pod("p", "u", 7, "b"))) == [
        ("modified", "u", "7", False)
    ]
    assert merge.candidates() == {key("p"): "8"}
    assert summary(merge.progressed("a", "8")) == [("deleted", "u", "7", True)]
    assert merge.remembered == 0


def test_a_read_that_finds_a_later_incarnation_selected_publishes_it() -> None:
    merge = merge_of()
    start(merge)
    merge.present("a", key("p"), pod("p", "u1", 2, "a"))
    # u1 is deleted at 3, u2 created at 4 in b only; a relists at 5 and lets go.
    assert merge.relisted("a", set(), "5") == []
    assert merge.take_probes() == [(key("p"), "5")]
    assert summary(merge.probed(key("p"), "5", pod("p", "u2", 4, "b"))) == [
        ("deleted", "u1", "2", True),
        ("added", "u2", "4", False),
    ]
    assert merge.candidates() == {}
    # b's own report of it is no news, and it is not history either.
    assert merge.present("b", key("p"), pod("p", "u2", 4, "b")) == []
    assert merge.published_view() == {key("p"): Seen("u2", "4")}


def test_an_unrelated_object_is_never_remembered() -> None:
    merge = Merge("NetworkPolicy", {"*": lambda obj: False})
    assert merge.relisted("*", set(), "1") == []
    assert merge.absent("*", key("p"), "2", pod("p", "u", 2)) == []
    assert merge.remembered == 0


def test_one_selection_publishes_a_deletion_at_once_as_a_single_watch_did() -> None:
    merge = Merge("Sandbox", {"*": lambda obj: True})
    merge.relisted("*", set(), "1")
    merge.present("*", key("s"), pod("s", "u", 2))
    merge.progressed("*", "2")
    changes = merge.absent("*", key("s"), "3", pod("s", "u", 3)) + merge.progressed("*", "3")
    assert summary(changes) == [("deleted", "u", "3", False)]
    assert merge.take_probes() == []
    assert merge.remembered == 0


# --- properties: a simulated API server and two watches ------------------------------------

NAMES = ("p", "q")
LABEL_SETS = st.sampled_from([(), ("a",), ("b",), ("a", "b"), ("c",), ("a", "c")])


@dataclass(frozen=True)
class Commit:
    rv: int
    name: str
    uid: str
    labels: tuple[str, ...] | None  # None: deleted


@dataclass
class Cluster:
    """What the API server committed, and what each selection's watch delivers."""

    commits: list[Commit] = field(default_factory=list)
    live: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    streams: dict[str, list[tuple[int, str, Json]]] = field(
        default_factory=lambda: {k: [] for k in KEYS}
    )
    uids: int = 0

    @property
    def rv(self) -> int:
        return self.commits[-1].rv if self.commits else 1

    def commit(self, name: str, verb: str, labels: tuple[str, ...]) -> None:
        rv = self.rv + 1
        before = self.live.get(name)
        if verb == "delete" and before is not None:
            uid, after = before[0], None
            del self.live[name]
        elif verb == "delete":
            return
        elif before is None:
            self.uids += 1
            uid, after = f"{name}{self.uids}", labels
            self.live[name] = (uid, labels)
        else:
            uid, after = before[0], labels
            self.live[name] = (uid, labels)
        self.commits.append(Commit(rv, name, uid, after))
        previous = before[1] if before is not None else None
        for selection in KEYS:
            was = previous is not None and selection in previous
            if after is not None and selection in after:
                event = "MODIFIED" if was else "ADDED"
                self.streams[selection].append((rv, event, pod(name, uid, rv, *after)))
            elif previous is not None and was:
                # Leaving, or deleted: the previous state, stamped with the new resourceVersion.
                self.streams[selection].append((rv, "DELETED", pod(name, uid, rv, *previous)))

    def at(self, name: str, rv: int) -> Json | None:
        """The object as it was at ``rv`` (an exact read)."""
        state: Commit | None = None
        for commit in self.commits:
            if commit.rv > rv:
                break
            if commit.name == name:
                state = commit
        if state is None or state.labels is None:
            return None
        return pod(name, state.uid, state.rv, *state.labels)

    def selected_at(self, name: str, uid: str, rv: int) -> bool:
        obj = self.at(name, rv)
        return (
            obj is not None
            and obj["metadata"]["uid"] == uid
            and any(k in obj["metadata"]["labels"] for k in KEYS)
        )

    def ideal(self) -> list[Change]:
        """What one unfiltered watch, filtered client-side, would publish."""
        published: dict[str, tuple[str, str]] = {}
        changes: list[Change] = []
        for commit in self.commits:
            k = key(commit.name)
            selected = commit.labels is not None and any(x in commit.labels for x in KEYS)
            rv = str(commit.rv)
            if selected:
                changes.append(
                    Change("modified" if commit.name in published else "added", k, commit.uid, rv)
                )
                published[commit.name] = (commit.uid, rv)
            elif commit.name in published:
                changes.append(Change("deleted", k, commit.uid, rv, None))
                del published[commit.name]
        return changes


HISTORY = st.lists(
    st.tuples(st.sampled_from(NAMES), st.sampled_from(["write", "write", "delete"]), LABEL_SETS),
    min_size=1,
    max_size=25,
)
STEPS = st.lists(st.sampled_from(["commit", "a", "b", "bookmark", "probe"]), max_size=120)


@dataclass
class Run:
    cluster: Cluster
    merge: Merge = field(default_factory=merge_of)
    published: list[Change] = field(default_factory=list)
    delivered: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KEYS, 0))
    probes: list[tuple[ObjectKey, str]] = field(default_factory=list)
    reads: bool = True
    """Whether the reads the merge asks for are answered at all."""
    started: bool = True
    """Whether every selection has listed the empty cluster already."""

    def __post_init__(self) -> None:
        if self.started:
            start(self.merge)

    def relist(self, selection: str, committed: int) -> None:
        """The selection lists the cluster as it is at ``committed`` and watches from there."""
        listed: set[ObjectKey] = set()
        changes: list[Change] = []
        for name in NAMES:
            obj = self.cluster.at(name, committed)
            if obj is not None and selection in obj["metadata"]["labels"]:
                listed.add(key(name))
                changes.extend(self.merge.present(selection, key(name), obj))
        self.take(changes + self.merge.relisted(selection, listed, str(committed)))
        stream = self.cluster.streams[selection]
        self.delivered[selection] = next(
            (i for i, (rv, _, _) in enumerate(stream) if rv > committed), len(stream)
        )

    def take(self, changes: list[Change]) -> None:
        self.published.extend(changes)
        self.probes.extend(self.merge.take_probes())

    def deliver(self, selection: str, committed: int) -> bool:
        stream = self.cluster.streams[selection]
        index = self.delivered[selection]
        if index >= len(stream) or stream[index][0] > committed:
            return False
        rv, event, obj = stream[index]
        self.delivered[selection] += 1
        k = key(obj["metadata"]["name"])
        obj = copy.deepcopy(obj)
        if event == "DELETED":
            changes = self.merge.absent(selection, k, str(rv), obj)
        else:
            changes = self.merge.present(selection, k, obj)
        self.take(changes + self.merge.progressed(selection, str(rv)))
        return True

    def bookmark(self, selection: str, committed: int) -> None:
        stream = self.cluster.streams[selection]
        index = self.delivered[selection]
        if index < len(stream) and stream[index][0] <= committed:
            return  # a bookmark never overtakes an event
        self.take(self.merge.progressed(selection, str(committed)))

    def probe(self) -> None:
        if self.probes and self.reads:
            k, rv = self.probes.pop(0)
            self.take(self.merge.probed(k, rv, self.cluster.at(k.name, int(rv))))

    def drain(self, committed: int) -> None:
        while any(self.deliver(selection, committed) for selection in KEYS):
            pass
        while self.probes and self.reads:
            self.probe()
        for selection in KEYS:
            self.bookmark(selection, committed)


def build(history: list[tuple[str, str, tuple[str, ...]]]) -> Cluster:
    cluster = Cluster()
    for name, verb, labels in history:
        cluster.commit(name, verb, labels)
    return cluster


def check_safe(
    cluster: Cluster, published: list[Change], before: Mapping[ObjectKey, Seen] | None = None
) -> None:
    """Order, truth of every state and deletion, and the final state of every object
    (``before``: what an earlier session published)."""
    by_name: dict[str, list[Change]] = {}
    for change in published:
        by_name.setdefault(change.key.name, []).append(change)
    for name in NAMES:
        events = by_name.get(name, [])
        earlier = (before or {}).get(key(name))
        alive: str | None = earlier.uid if earlier else None
        last = int(earlier.resource_version) if earlier else 0
        for change in events:
            rv = int(change.resource_version)
            if change.synthetic:
                assert change.change == "deleted" and change.uid == alive and rv == last
            else:
                assert rv > last, f"{name}: {change.event_id} after rv {last}"
            last = rv
            if change.change == "deleted":
                assert change.uid == alive, f"{name}: deletion of {change.uid}, not published"
                assert change.synthetic or not cluster.selected_at(name, change.uid, rv), (
                    f"{name}: deleted at {rv} while still selected"
                )
                alive = None
            else:
                assert cluster.selected_at(name, change.uid, rv), f"{name}: {change.event_id}"
                assert (change.change == "added") == (alive != change.uid), change.event_id
                alive = change.uid
        final = cluster.live.get(name)
        if final is not None and any(k in final[1] for k in KEYS):
            final_rv = str(max(c.rv for c in cluster.commits if c.name == name))
            if events:
                assert events[-1].change != "deleted", f"{name} ends selected"
                assert events[-1].resource_version == final_rv
            else:
                assert earlier is not None and earlier.resource_version == final_rv
        else:
            ends_deleted = events[-1].change == "deleted" if events else earlier is None
            assert ends_deleted, f"{name} ends unselected"


@settings(max_examples=300)
@given(HISTORY, STEPS)
def test_any_interleaving_publishes_in_order_never_a_false_deletion_and_ends_at_the_truth(
    history: list[tuple[str, str, tuple[str, ...]]], steps: list[str]
) -> None:
    cluster = build(history)
    run = Run(cluster)
    committed = 1
    for step in steps:
        if step == "commit":
            committed = min(committed + 1, cluster.rv)
        elif step in KEYS:
            run.deliver(step, committed)
        elif step == "bookmark":
            run.bookmark("a" if len(run.published) % 2 else "b", committed)
        else:
            run.probe()
    run.drain(cluster.rv)
    check_safe(cluster, run.published)
    # Every stream is past everything: nothing waits, and only live objects are remembered.
    assert run.merge.candidates() == {}
    assert run.merge.remembered == len(run.merge.published_view())


ORDERS = st.lists(st.permutations(KEYS), min_size=25, max_size=25)


@settings(max_examples=300)
@given(HISTORY, ORDERS, st.lists(st.booleans(), min_size=25, max_size=25))
def test_streams_that_keep_up_with_each_other_publish_exactly_what_one_watch_would(
    history: list[tuple[str, str, tuple[str, ...]]],
    orders: list[tuple[str, ...]],
    read_at_once: list[bool],
) -> None:
    """Each commit reaches both streams before the next one (in either order), reads are
    answered at once or after the next commit: the deletion is published exactly when the
    last selection lets go, at its resourceVersion, and nothing else differs either."""
    cluster = build(history)
    run = Run(cluster)
    for index, commit in enumerate(cluster.commits):
        for selection in orders[index]:
            run.deliver(selection, commit.rv)
            if read_at_once[index]:
                run.probe()
        if not read_at_once[index]:
            run.probe()
    run.drain(cluster.rv)
    check_safe(cluster, run.published)
    assert summary(run.published) == summary(cluster.ideal())


@settings(max_examples=300)
@given(HISTORY, STEPS)
def test_without_reads_progress_alone_decides_the_same_truths(
    history: list[tuple[str, str, tuple[str, ...]]], steps: list[str]
) -> None:
    """The reads only make deletions faster: with none answered, bookmarks decide."""
    cluster = build(history)
    run = Run(cluster, reads=False)
    committed = 1
    for step in steps:
        if step == "commit":
            committed = min(committed + 1, cluster.rv)
        elif step in KEYS:
            run.deliver(step, committed)
        elif step == "bookmark":
            run.bookmark("a" if len(run.published) % 2 else "b", committed)
    run.drain(cluster.rv)
    check_safe(cluster, run.published)
    assert run.merge.candidates() == {}


RESTART_STEPS = st.lists(
    st.sampled_from(["commit", "a", "b", "bookmark", "probe", "relist a", "relist b"]),
    max_size=120,
)


@settings(max_examples=400)
@given(HISTORY, st.integers(min_value=0, max_value=25), RESTART_STEPS)
@example(  # b's first list (at the end) jumps over the rv where p passed through b
    history=[("p", "write", ())] * 4
    + [("p", "write", (x,)) for x in ("a", "b")]
    + [("p", "write", ())],
    published_up_to=4,
    steps=["commit", "relist a", "commit", "commit"],
)
@example(  # a read finds p recreated in b, whose stream reports it only afterwards
    history=[("p", "write", ("a",)), ("p", "delete", ()), ("p", "write", ("b",))],
    published_up_to=1,
    steps=["relist b", "commit", "commit", "relist a", "probe"],
)
def test_a_new_session_relists_each_selection_and_publishes_only_the_truth(
    history: list[tuple[str, str, tuple[str, ...]]], published_up_to: int, steps: list[str]
) -> None:
    """An earlier session published everything up to some commit; this one starts from what it
    recovered, each selection relists when it likes (and again after a 410), and the streams
    go on from their lists. Objects that vanished in the gap get their deletion, once, only
    when no selection lists them."""
    cluster = build(history)
    prefix = Cluster(commits=cluster.commits[:published_up_to])
    before: dict[ObjectKey, Seen] = {}
    for change in prefix.ideal():
        if change.change == "deleted":
            before.pop(change.key, None)
        else:
            before[change.key] = Seen(change.uid, change.resource_version)
    run = Run(cluster, merge=merge_of(before), started=False)
    committed = prefix.rv
    listed = set()
    for step in steps:
        if step == "commit":
            committed = min(committed + 1, cluster.rv)
        elif step.startswith("relist"):
            selection = step.split()[1]
            run.relist(selection, committed)
            listed.add(selection)
        elif step in KEYS and step in listed:
            run.deliver(step, committed)
        elif step == "bookmark":
            selection = "a" if len(run.published) % 2 else "b"
            if selection in listed:
                run.bookmark(selection, committed)
        elif step == "probe":
            run.probe()
    for selection in set(KEYS) - listed:
        run.relist(selection, committed)
    run.drain(cluster.rv)
    check_safe(cluster, run.published, before)
    assert run.merge.candidates() == {}
