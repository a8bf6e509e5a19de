"""Which keys a change wakes, declared as rules rather than written as a chain over kinds.

A worker's ``wakes`` answers, for a changed object: which keys must be reconciled. Almost every
answer has one of controller-runtime's handler shapes, and each has a helper here:

:func:`wake_self`
    The object itself (``EnqueueRequestForObject``), optionally only when a predicate holds.
:func:`wake_owner`
    Its controller, when that is of a given kind (and API group), as ``EnqueueRequestForOwner``.
:func:`wake_named` and :func:`wake_label`
    The object of a given kind that the changed one names: by a field, its own name (a
    namesake), or the value of a label.
:func:`wake_referrers`
    Every object of a given kind in the changed object's namespace that refers to it (a template
    wakes the pools that use it), as a map function over the cache.

:class:`Wakes` holds a worker's rules and answers for a change by the rules of its kind, in the
order given, each key once. A rule none of these express is a :class:`Wake` with a function of
its own (``(key, object, cache) -> keys``), which may remember what it saw.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from api.objects import Json, controller_of, labels_of
from events.envelope import ObjectKey, key_of
from services.runtime.cache import ObjectCache

__all__ = [
    "Wake",
    "Wakes",
    "controller_name",
    "wake_label",
    "wake_named",
    "wake_owner",
    "wake_referrers",
    "wake_self",
]

Keys = Callable[[ObjectKey, Json, ObjectCache], Iterable[ObjectKey]]
"""``(key of the changed object, the object, cache) -> keys`` to wake."""
Kinds = str | Iterable[str]


@dataclass(frozen=True)
class Wake:
    """One rule: a change of an object of one of ``kinds`` wakes ``keys(key, object, cache)``."""

    kinds: tuple[str, ...]
    keys: Keys


class Wakes:
    """A worker's rules, as its definition's ``wakes``: ``wakes(kind, object, cache)`` is the
    keys the rules of ``kind`` name, in order, each once."""

    def __init__(self, *rules: Wake) -> None:
        self._by_kind: dict[str, list[Keys]] = {}
        for rule in rules:
            for kind in rule.kinds:
                self._by_kind.setdefault(kind, []).append(rule.keys)

    def __call__(self, kind: str, obj: Json, cache: ObjectCache) -> list[ObjectKey]:
        rules = self._by_kind.get(kind)
        if not rules:
            return []
        key = key_of(obj, kind)
        woken: dict[ObjectKey, None] = {}
        for keys in rules:
            woken.update(dict.fromkeys(keys(key, obj, cache)))
        return list(woken)


def _kinds(kinds: Kinds) -> tuple[str, ...]:
    return (kinds,) if isinstance(kinds, str) else tuple(kinds)


def wake_self(kinds: Kinds, *, when: Callable[[Json], bool] | None = None) -> Wake:
    """A change of an object of ``kinds`` wakes the object itself (when ``when`` holds)."""

    def keys(key: ObjectKey, obj: Json, cache: ObjectCache) -> Iterator[ObjectKey]:
        if when is None or when(obj):
            yield key

    return Wake(_kinds(kinds), keys)


def wake_owner(kinds: Kinds, owner: str, *, group: str | None = None) -> Wake:
    """A change of an object of ``kinds`` wakes its controller, when that is an ``owner`` (of
    API ``group``, when given), in the object's namespace."""

    def keys(key: ObjectKey, obj: Json, cache: ObjectCache) -> Iterator[ObjectKey]:
        name = controller_name(obj, owner, group=group)
        if name:
            yield ObjectKey(owner, key.namespace, name)

    return Wake(_kinds(kinds), keys)


def wake_named(
    kinds: Kinds, target: str, name: Callable[[Json], str | None], *, known: bool = False
) -> Wake:
    """A change of an object of ``kinds`` wakes the ``target`` named ``name(object)`` in its
    namespace (nothing for None or ""); with ``known``, only one the cache holds."""

    def keys(key: ObjectKey, obj: Json, cache: ObjectCache) -> Iterator[ObjectKey]:
        named = name(obj)
        if named:
            woken = ObjectKey(target, key.namespace, named)
            if not known or woken in cache:
                yield woken

    return Wake(_kinds(kinds), keys)


def wake_label(kinds: Kinds, target: str, label: str) -> Wake:
    """A change of an object of ``kinds`` wakes the ``target`` its label ``label`` names."""

    def named(obj: Json) -> str | None:
        value = labels_of(obj).get(label)
        return str(value) if value else None

    return wake_named(kinds, target, named)


def wake_referrers(
    kinds: Kinds,
    target: str,
    refers: Callable[[Json, Json], bool],
    *,
    when: Callable[[Json], bool] | None = None,
) -> Wake:
    """A change of an object of ``kinds`` wakes every ``target`` in its namespace for which
    ``refers(target object, changed object)`` holds, as the cache shows them. ``when``: only
    for a changed object it holds for (the others cost no look at the targets)."""

    def keys(key: ObjectKey, obj: Json, cache: ObjectCache) -> Iterator[ObjectKey]:
        if when is not None and not when(obj):
            return
        for candidate in cache.objects(target, key.namespace):
            if refers(candidate, obj):
                yield key_of(candidate, target)

    return Wake(_kinds(kinds), keys)


def controller_name(obj: Json, kind: str, *, group: str | None = None) -> str | None:
    """The name of ``obj``'s controller when that is a ``kind`` (of API ``group``, when given)."""
    ref = controller_of(obj)
    if ref is None or ref.get("kind") != kind:
        return None
    if group is not None and str(ref.get("apiVersion") or "").split("/")[0] != group:
        return None
    return str(ref.get("name") or "") or None
