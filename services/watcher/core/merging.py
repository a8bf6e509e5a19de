"""One ordered stream per object out of several watches of its resource: the merge, without I/O.

A resource is watched through one or more *selections* (:mod:`services.watcher.resources`): a
Pod is ours if it carries any of four label keys, and a label selector cannot say "any of", so
Pods are listed and watched four times, once per key, with an existence selector each. Each
selection's stream is in resourceVersion order, but the streams are not in order with each
other: an object that carries two keys, or moves from one selection to another (a Pod adopted
from ``agents.x-k8s.io/adoptable`` to a sandbox's ``agents.x-k8s.io/sandbox-name-hash``), is
reported by two streams at different moments, and one of them may be far behind. What reaches
the event log must still be one stream per object, in order, that never says an object is gone
while it is selected. :class:`Merge` decides it, per resource, from four kinds of reports:

- **present**: a selection holds the object in the state it reports (a watch ADDED or MODIFIED,
  an item of a relist). That state is the truth at its resourceVersion, so it is published at
  once if it is *newer* than the last state published for its key, and never otherwise: an
  older state that a slow stream reports late never overwrites a newer one.
- **absent**: a selection lets go of the object at a resourceVersion (a DELETED from its watch,
  which is what a label-selector watch reports both for a deletion and for an object that stops
  matching; or a relist that does not contain it any more).
- **progress**: a selection's stream has passed a resourceVersion (after every event, at every
  bookmark, at the resourceVersion of a finished relist): nothing about any object at or before
  it is still to come from that stream.
- **probed**: the object as it was at a given resourceVersion, read from the API server by the
  shell when the merge asks for it (below).

Per object the merge remembers the identity of the last event published (:class:`Seen`, as the
single-stream diff does) and, per selection, whether it holds the object (which incarnation) and
since which resourceVersion it said so. A deletion is owed at ``r`` when a selection lets go at
``r`` and no selection holds the object at ``r``. That cannot be known when the let-go arrives:
in the adoption above, ``adoptable``'s DELETED and ``sandbox-name-hash``'s ADDED carry the same
resourceVersion and either may come first. So a let-go that leaves no holder is a *candidate*
deletion, published only on proof, at its resourceVersion:

1. every selection's stream has covered ``r`` and still none holds the object: each stream has
   said all it will ever say about ``r``. With a single selection the let-go itself is that
   proof, so a resource watched once publishes its deletions at once, exactly as before; or
2. the object as it was at ``r`` (:meth:`Merge.probed`) did not exist, or was in no selection.

A stream has covered ``r`` when its progress has reached ``r`` and it got there through ``r``
(or by a relist at ``r`` itself). A relist at ``L`` says how the selection is at ``L`` and nothing
about the resourceVersions between the selection's progress before it and ``L``: a *gap*, in
which the object may have passed through that selection without the list at ``L`` showing it.
A let-go at ``r`` in some selection's gap is therefore never proven by progress at ``r``: once
every stream has covered ``L`` (the relist that ends the gap; if ``L`` is in another gap, the
relist that ends that one) and still none holds the object, the deletion is that relist's
let-go, a synthetic deletion at ``L``, as for an object that vanished in a gap. A read at ``r``
still decides it at ``r``.

A candidate is dropped as soon as any selection reports the object held (the adoption case: it
moved, and its newer state is published instead); a read that finds the object selected at ``r``
publishes that state (or, for a later incarnation under the key, the synthetic deletion of the
published one and the later one's addition, as a relist would) and records which selections
hold it; a selection that held it at ``r`` only in a gap lets go of it at the relist after.
Without the read, the proof could wait for an idle selection's next bookmark, a minute on a real
API server; with it, a deletion waits one request. The read is asked for only when progress
alone cannot decide.

After a deletion the key keeps a *tombstone* (the uid and resourceVersion up to which reports are
history) until every selection's progress has passed it, so that a slow stream's late report of
an older state cannot bring the object back. With one selection the tombstone goes at once, and
memory is bounded by the selected objects, as before. A gap is remembered until every stream has
passed its relist (no let-go can fall in it after that); a resource watched once has none.

A relist is diffed per selection: each listed object is a present report, and each object the
selection held (or, after a recovery, might hold) that the list lacks is a let-go at the list's
resourceVersion. The synthetic deletion of an object that vanished in a gap is therefore owed
only when *every* selection of its resource has let go of it: the relist diff works per object,
across the selections. Objects recovered from the bus start held by every selection ("not
known"), so that the first relist of each decides.

resourceVersions are ordered as integers when both are decimal, as on every real API server and
on the development cluster; two that are not are "newer" when they differ, which is the order
of one stream and enough for a resource watched once (and no gap is known between them). What
a change *is* (added, modified, the deletion of an older incarnation, a synthetic deletion) is
decided by :mod:`services.watcher.core.diffing`, unchanged; this module decides *whether* and
*when*.

What is exact, and what only safe: when every change of an object reaches all the streams, and
the read asked for (if any) is answered, before the object's next change, the merged stream is
exactly what one unfiltered watch would have published. Beyond that, a state that only a slow
stream reported can be skipped because a later state of the same object was published first
(as a relist collapses the states it did not see), and so can the deletion between an object
leaving every selection and entering one again: harmless to level-triggered readers. Order per
object, never a deletion while the object is selected, and the final state of every object hold
in every interleaving (tests/unit/watcher/test_merging.py).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api.objects import compare_resource_versions
from events.envelope import ObjectKey
from services.watcher.core.diffing import (
    Change,
    Seen,
    listed_changes,
    seen_of,
    vanished_changes,
    watch_changes,
)

__all__ = ["Merge", "newer"]

Holds = Callable[[Mapping[str, Any]], bool]
"""Whether an object, in a given state, is in one selection."""


def newer(a: str, b: str) -> bool:
    """Whether resourceVersion ``a`` is after ``b`` (see the module docstring for the order)."""
    order = compare_resource_versions(a, b)
    return order == 1 or (order is None and a != b)


def _at_least(a: str, b: str) -> bool:
    return a == b or newer(a, b)


def _before(a: str, b: str) -> bool:
    """Whether ``a`` is *surely* before ``b``: both decimal (no gap is known otherwise)."""
    return compare_resource_versions(a, b) == -1


def _heap_order(rv: str) -> int:
    return int(rv) if rv.isdecimal() else 0


@dataclass(slots=True)
class _Hold:
    held: bool
    since: str | None
    """The resourceVersion of the report; None: never reported (held False), or recovered and
    not listed yet (held True)."""
    uid: str = ""
    """Of the incarnation held: a slow stream may still hold an older one under the key."""


@dataclass(slots=True)
class _Left:
    """The newest let-go after the last published state."""

    rv: str
    obj: Mapping[str, Any] | None
    """What the let-go carried (None: a relist's, so the deletion is synthetic)."""
    at: str
    """Where progress can prove it: ``rv``, or the relist that ends a gap of some selection's
    stream around ``rv`` (then the deletion proven there is that relist's, synthetic)."""


@dataclass(slots=True)
class _Entry:
    uid: str
    rv: str
    """Of the last event published; for a tombstone, up to where reports are history."""
    alive: bool
    holds: dict[str, _Hold]
    left: _Left | None = None


@dataclass
class Merge:
    """The merge of one resource's selections; every method returns the changes to publish,
    in order. Not thread-safe, and needs none: the shell calls it from one event loop and
    submits what it returns before the next call (:mod:`services.watcher.watching`)."""

    kind: str
    selections: Mapping[str, Holds]
    """Selection name → whether an object is in it (for a label selection, "carries the key")."""
    published: Mapping[ObjectKey, Seen] = field(default_factory=dict)
    """What was published before this session (recovered from the bus)."""

    def __post_init__(self) -> None:
        if not self.selections:
            raise ValueError("a merge needs at least one selection")
        self._names: tuple[str, ...] = tuple(self.selections)
        self._entries: dict[ObjectKey, _Entry] = {
            key: _Entry(seen.uid, seen.resource_version, True, self._holds(seen.uid))
            for key, seen in self.published.items()
        }
        self._progress: dict[str, str | None] = dict.fromkeys(self._names)
        self._listed: dict[str, str | None] = dict.fromkeys(self._names)
        """Per selection, the resourceVersion of its last relist."""
        self._gaps: list[tuple[str | None, str]] = []
        """The resourceVersions that a selection's stream jumped over (after ``lo``, before a
        relist at ``hi``), while a let-go in them can still come from another stream."""
        self._candidates: dict[ObjectKey, str] = {}
        self._to_probe: list[tuple[ObjectKey, str]] = []
        self._due: list[tuple[int, int, ObjectKey, str]] = []
        """Candidates and tombstones, by resourceVersion, to look at again when progress is
        made (entries may be stale: each is checked against the table when it comes up)."""
        self._counter = itertools.count()

    # -- what the shell asks ----------------------------------------------------------------

    @property
    def remembered(self) -> int:
        """Keys remembered: live objects and tombstones."""
        return len(self._entries)

    def published_view(self) -> dict[ObjectKey, Seen]:
        """The identity of the last state published per live key."""
        return {key: Seen(e.uid, e.rv) for key, e in self._entries.items() if e.alive}

    def candidates(self) -> dict[ObjectKey, str]:
        """Deletions waiting for proof: key → the resourceVersion of their let-go (where a read
        proves them; progress may prove them only at a later relist's, see the module)."""
        return dict(self._candidates)

    def take_probes(self) -> list[tuple[ObjectKey, str]]:
        """The candidates that appeared since the last call and want a read of their object."""
        wanted = [(key, rv) for key, rv in self._to_probe if self._candidates.get(key) == rv]
        self._to_probe.clear()
        return wanted

    def awaits_probe(self, key: ObjectKey, rv: str) -> bool:
        return self._candidates.get(key) == rv

    # -- reports ----------------------------------------------------------------------------

    def present(
        self, selection: str, key: ObjectKey, obj: Mapping[str, Any], seen: Seen | None = None
    ) -> list[Change]:
        """``selection`` holds ``obj`` in the state it carries (``seen``: its identity, when the
        caller has read it already)."""
        seen = seen or seen_of(obj)
        entry = self._entries.get(key)
        if entry is None:
            entry = _Entry(seen.uid, seen.resource_version, True, self._holds(None))
            self._entries[key] = entry
            changes = listed_changes(key, None, obj, seen)
        else:
            changes = self._publish_state(key, entry, obj, seen)
        self._hold(entry, selection, True, seen.resource_version, seen.uid)
        return changes + self._reconsider(key, entry)

    def absent(
        self, selection: str, key: ObjectKey, rv: str, obj: Mapping[str, Any] | None = None
    ) -> list[Change]:
        """``selection`` does not hold the object at ``rv`` (any more). ``obj`` is what its
        watch said with it; None for a relist that did not list it."""
        entry = self._entries.get(key)
        if entry is None:
            return []  # never published: nothing to take back
        if not self._hold(entry, selection, False, rv):
            return []  # older than what is known of this selection
        if not entry.alive:
            return []
        if obj is None or seen_of(obj).uid == entry.uid:
            self._let_go(entry, rv, obj)
        elif newer(rv, entry.rv):
            # A later incarnation under this key left: the published one is gone for sure.
            changes = vanished_changes({key: Seen(entry.uid, entry.rv)}, ())
            self._bury(key, entry, rv)
            return changes
        return self._reconsider(key, entry)

    def progressed(self, selection: str, rv: str) -> list[Change]:
        """``selection``'s stream has passed ``rv``."""
        current = self._progress[selection]
        if current is not None and not newer(rv, current):
            return []
        self._progress[selection] = rv
        if self._gaps:  # every stream is past a gap's end: no let-go can fall in it any more
            self._gaps = [gap for gap in self._gaps if not self._covered(gap[1])]
        changes: list[Change] = []
        while self._due and self._covered(self._due[0][3]):
            _, _, key, due = heapq.heappop(self._due)
            entry = self._entries.get(key)
            if entry is None:
                continue
            if entry.alive:
                if key in self._candidates and entry.left is not None and entry.left.at == due:
                    changes.extend(self._reconsider(key, entry))
            elif entry.rv == due:
                del self._entries[key]  # every stream is past the deletion: forget the key
        return changes

    def relisted(self, selection: str, listed: Iterable[ObjectKey], rv: str) -> list[Change]:
        """``selection`` finished a relist at ``rv`` that listed (and reported present) the keys
        ``listed``: it lets go of every other key it held or might hold, and its stream jumps
        from its progress to ``rv`` (a gap)."""
        present = listed if isinstance(listed, set | frozenset) else set(listed)
        self._jumped(selection, rv)
        changes: list[Change] = []
        for key in sorted(self._entries):
            entry = self._entries[key]
            if key in present or not entry.alive or not entry.holds[selection].held:
                continue
            changes.extend(self.absent(selection, key, rv))
        changes.extend(self.progressed(selection, rv))
        return changes

    def probed(self, key: ObjectKey, rv: str, obj: Mapping[str, Any] | None) -> list[Change]:
        """A read of ``key`` as it was at ``rv``, asked for by the candidate at ``rv``, answered
        ``obj`` (None: no such object then). Ignored if the candidate was decided meanwhile."""
        if self._candidates.get(key) != rv:
            return []
        entry = self._entries[key]
        seen = seen_of(obj) if obj is not None else None
        # A later incarnation under the key is the truth at rv too, as a relist would say: the
        # published one is gone, and the later one is published if it is selected.
        holding = (
            {name for name, holds in self.selections.items() if holds(obj)}
            if obj is not None
            and seen is not None
            and (seen.uid == entry.uid or newer(seen.resource_version, entry.rv))
            else set()
        )
        if not holding:
            return self._deletion(key, entry, rv)  # the truth at rv: gone, or in no selection
        assert obj is not None and seen is not None
        changes = self._publish_state(key, entry, obj, seen)
        for name in self._names:
            relist = self._listed[name]
            if name in holding and not entry.holds[name].held and relist and _before(rv, relist):
                # It held the object at rv, but its stream jumped past rv and its relist did not
                # list it (else it would hold it): that relist let go of it.
                self._hold(entry, name, False, relist)
                self._let_go(entry, relist, None)
            else:
                self._hold(entry, name, name in holding, rv, entry.uid)
        return changes + self._reconsider(key, entry)

    # -- inside -----------------------------------------------------------------------------

    def _holds(self, uid: str | None) -> dict[str, _Hold]:
        """Every selection holding ``uid`` (recovered, not known), or none (None)."""
        return {name: _Hold(uid is not None, None, uid or "") for name in self._names}

    def _hold(self, entry: _Entry, selection: str, held: bool, rv: str, uid: str = "") -> bool:
        """Record what ``selection`` said at ``rv``, unless something newer is known of it."""
        hold = entry.holds[selection]
        if hold.since is not None and newer(hold.since, rv):
            return False
        hold.held, hold.since, hold.uid = held, rv, uid
        return True

    def _let_go(self, entry: _Entry, rv: str, obj: Mapping[str, Any] | None) -> None:
        """Remember a let-go of the published incarnation at ``rv``, if it is the newest."""
        if newer(rv, entry.rv) and (entry.left is None or newer(rv, entry.left.rv)):
            entry.left = _Left(rv, obj, self._provable_at(rv))

    def _jumped(self, selection: str, rv: str) -> None:
        """``selection`` relists at ``rv``: its stream says nothing about the resourceVersions
        between its progress and ``rv``, so progress proves no let-go there before ``rv``."""
        before, self._listed[selection] = self._progress[selection], rv
        if len(self._names) == 1 or not (before is None or _before(before, rv)):
            return  # no gap, or no other stream whose let-go could fall in it
        self._gaps.append((before, rv))
        for key, entry in self._entries.items():
            left = entry.left
            if left is None or not entry.alive:
                continue
            at = self._provable_at(left.at)
            if at != left.at:
                left.at = at
                if key in self._candidates:
                    self._schedule(key, at)

    def _provable_at(self, rv: str) -> str:
        """The first resourceVersion from ``rv`` on that every stream covers (or will): ``rv``,
        unless it is in a gap, then the relist that ends it (and so on)."""
        at, moved = rv, True
        while moved:
            moved = False
            for lo, hi in self._gaps:
                if _before(at, hi) and (lo is None or _before(lo, at)):
                    at, moved = hi, True
        return at

    def _publish_state(
        self, key: ObjectKey, entry: _Entry, obj: Mapping[str, Any], seen: Seen
    ) -> list[Change]:
        if not newer(seen.resource_version, entry.rv):
            return []  # this state, or a newer one, is already published
        published = Seen(entry.uid, entry.rv) if entry.alive else None
        changes = listed_changes(key, published, obj, seen)
        entry.uid, entry.rv, entry.alive = seen.uid, seen.resource_version, True
        if entry.left is not None and not newer(entry.left.rv, entry.rv):
            entry.left = None
        return changes

    def _reconsider(self, key: ObjectKey, entry: _Entry) -> list[Change]:
        """Drop, keep, or decide the candidate deletion of ``key``."""
        left = entry.left
        if (
            not entry.alive
            or left is None
            or not newer(left.rv, entry.rv)
            or any(hold.held and hold.uid == entry.uid for hold in entry.holds.values())
        ):
            self._candidates.pop(key, None)
            return []
        if self._covered(left.at):
            return self._deletion(key, entry, left.at)
        if self._candidates.get(key) != left.rv:
            self._candidates[key] = left.rv
            self._to_probe.append((key, left.rv))
            self._schedule(key, left.at)
        return []

    def _deletion(self, key: ObjectKey, entry: _Entry, rv: str) -> list[Change]:
        """Publish the candidate deletion of ``key``, proven at ``rv`` (its let-go's, or where
        progress could prove it), and leave a tombstone."""
        left = entry.left
        assert left is not None
        published = Seen(entry.uid, entry.rv)
        if left.obj is not None and rv == left.rv:
            changes = watch_changes(key, published, "DELETED", left.obj)
        else:
            changes = vanished_changes({key: published}, ())
        self._bury(key, entry, rv)
        return changes

    def _bury(self, key: ObjectKey, entry: _Entry, rv: str) -> None:
        """Make ``key`` a tombstone at ``rv``: only a newer report is news; forgotten once
        every stream is past ``rv``."""
        self._candidates.pop(key, None)
        entry.alive, entry.rv, entry.left = False, rv, None
        if self._covered(rv):
            del self._entries[key]
        else:
            self._schedule(key, rv)

    def _schedule(self, key: ObjectKey, rv: str) -> None:
        heapq.heappush(self._due, (_heap_order(rv), next(self._counter), key, rv))

    def _covered(self, rv: str) -> bool:
        """Whether every selection's stream has passed ``rv``."""
        return all(p is not None and _at_least(p, rv) for p in self._progress.values())
