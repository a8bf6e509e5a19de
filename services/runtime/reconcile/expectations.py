"""Expectations: what a worker's own creates and deletes will do, until the bus shows it.

A worker sees the cluster through the bus, which lags its own writes by the watcher's round
trip. A pool that counts its members in that view right after creating five would create five
more (agent-sandbox #1215: a pool over-creating from a stale cache). controller-runtime's
answer is ``ControllerExpectations``: before acting, the controller records "I expect N
creates / these deletes" per owner, and counts the objects it expects as existing (or gone)
until its informer has seen them. This module is that, with two differences that matter:

- **Keyed by owner and uid.** An :class:`Expectations` belongs to one owner incarnation
  (``owner_uid``); each :class:`Expected` entry names the object by kind, namespace and name
  (or ``generateName``), and by uid as soon as the API server has answered. A recreated owner
  starts with none.
- **On the bus, not in memory.** The worker writes them to its memo stream *before* the
  writes they cover (write-ahead) and again with the uids once the writes answered, so a
  worker restarted or failed over in between still knows what it was waiting for. A create
  whose answer never arrived (the worker died, the request timed out) is known by its name:
  a planner that names its objects itself can simply issue that create again, which either
  makes the object or answers AlreadyExists, and is never a second object. An entry for a
  ``generateName`` create without an answer cannot be told apart from other objects; it waits
  until it lapses. Anything not seen within ``ttl`` lapses, as upstream's five-minute
  expectation timeout.

Only the bus-observed state settles an expectation (never the worker's own read-your-writes
entries): that is the point of having them. All of it is pure: the worker's shell records
them (:mod:`.executing`) and keeps and settles them (:mod:`.memory`); a planner reads
:meth:`Expectations.pending`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

import msgspec

from api.objects import Json, controller_of, metadata_of
from events.envelope import ObjectKey, key_of

__all__ = [
    "DEFAULT_TTL",
    "Expectations",
    "Expected",
    "settle",
]

DEFAULT_TTL = timedelta(minutes=5)
"""How long an expectation waits for the bus (upstream's ExpectationsTimeout)."""


class Expected(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """One object a create will bring, or a delete will take away."""

    verb: Literal["create", "delete"]
    kind: str
    namespace: str
    name: str = ""
    generate_name: str = ""
    """For a create with ``generateName`` whose answer has not come back."""
    uid: str = ""
    since: datetime

    @property
    def key(self) -> ObjectKey:
        return ObjectKey(self.kind, self.namespace, self.name)


class Expectations(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    owner_uid: str
    entries: tuple[Expected, ...] = ()

    def pending(self, kind: str, verb: Literal["create", "delete"] = "create") -> int:
        """How many objects of ``kind`` this owner still expects to appear (or to go)."""
        return sum(1 for e in self.entries if e.kind == kind and e.verb == verb)

    def pending_names(self, kind: str, verb: Literal["create", "delete"] = "create") -> set[str]:
        """The names of those with a known name."""
        return {e.name for e in self.entries if e.kind == kind and e.verb == verb and e.name}

    def unanswered(self, kind: str) -> set[str]:
        """The names of creates of ``kind`` that got no answer (their uid is unknown): the ones
        a planner may issue again."""
        return {
            e.name
            for e in self.entries
            if e.kind == kind and e.verb == "create" and e.name and not e.uid
        }

    def __bool__(self) -> bool:
        return bool(self.entries)


def expect(
    current: Expectations | None, owner_uid: str, actions: Iterable[Any], now: datetime
) -> Expectations | None:
    """``current`` plus an entry per create of an object this owner controls and per delete
    with a uid precondition, from a plan's actions (write-ahead: before they run)."""
    entries = list(current.entries) if current and current.owner_uid == owner_uid else []
    known = {(e.verb, e.kind, e.namespace, e.name) for e in entries if e.name}
    for action in actions:
        body = getattr(action, "body", None)
        if getattr(action, "verb", "") == "create" and isinstance(body, Mapping):
            owner = controller_of(body)
            if owner is None or owner.get("uid") != owner_uid:
                continue
            key = key_of(body)
            if key.name and ("create", key.kind, key.namespace, key.name) in known:
                continue  # the same create again (its answer was lost): one entry
            entries.append(
                Expected(
                    verb="create",
                    kind=key.kind,
                    namespace=key.namespace,
                    name=key.name,
                    generate_name=str(metadata_of(body).get("generateName") or ""),
                    since=now,
                )
            )
        elif getattr(action, "verb", "") == "delete" and getattr(action, "uid", None):
            target: ObjectKey = action.target
            entries.append(
                Expected(
                    verb="delete",
                    kind=target.kind,
                    namespace=target.namespace,
                    name=target.name,
                    uid=str(action.uid),
                    since=now,
                )
            )
    return Expectations(owner_uid=owner_uid, entries=tuple(entries)) if entries else None


def answered(
    expectations: Expectations,
    created: Iterable[Json],
    refused: Iterable[Json],
    gone: Iterable[str] = (),
) -> Expectations | None:
    """Fill in name and uid from the objects the API server returned for our creates, and drop
    the entries of creates the server refused for certain (``refused``: their bodies) and of
    deletes that are settled (``gone``: uids of deletes whose object was already gone, as
    NotFound settles at once, upstream's synthetic DeletionObserved; or that surely did not
    happen)."""
    vanished = set(gone)
    entries = [e for e in expectations.entries if not (e.verb == "delete" and e.uid in vanished)]
    for obj in created:
        meta = metadata_of(obj)
        key = key_of(obj)
        for i, entry in enumerate(entries):
            if entry.verb != "create" or entry.uid or entry.kind != key.kind:
                continue
            if entry.name == key.name or (
                not entry.name and key.name.startswith(entry.generate_name)
            ):
                entries[i] = msgspec.structs.replace(
                    entry, name=key.name, uid=str(meta.get("uid") or "")
                )
                break
    for body in refused:
        key = key_of(body)
        prefix = str(metadata_of(body).get("generateName") or "")
        for i, entry in enumerate(entries):
            if (
                entry.verb == "create"
                and not entry.uid
                and entry.kind == key.kind
                and entry.name == key.name
                and entry.generate_name == prefix
            ):
                del entries[i]
                break
    return msgspec.structs.replace(expectations, entries=tuple(entries)) if entries else None


def settle(
    expectations: Expectations | None,
    observed: Callable[[ObjectKey], Json | None],
    now: datetime,
    ttl: timedelta = DEFAULT_TTL,
) -> Expectations | None:
    """What is still expected, given what the bus shows (``observed(key)``) and the time."""
    if expectations is None:
        return None
    remaining: list[Expected] = []
    for entry in expectations.entries:
        if now - entry.since > ttl:
            continue
        if entry.verb == "delete":
            seen = observed(entry.key)
            if seen is not None and metadata_of(seen).get("uid") == entry.uid:
                remaining.append(entry)
            continue
        if entry.name:
            seen = observed(entry.key)
            if seen is None or (entry.uid and metadata_of(seen).get("uid") != entry.uid):
                remaining.append(entry)
            continue
        remaining.append(entry)  # a generateName create without an answer: until it lapses
    if not remaining:
        return None
    return msgspec.structs.replace(expectations, entries=tuple(remaining))
