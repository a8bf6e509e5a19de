"""Field paths: which leaf fields an object sets, in the FieldsV1 notation of managedFields.

Server-side apply tracks ownership per leaf field. A path is a tuple of FieldsV1 keys:
``f:<field>`` for a map key, ``k:{"name":"c"}`` for the item of a keyed list, ``v:"x"`` for a
value of a set, and ``.`` for a list item itself, so ``("f:spec", "f:replicas")`` is
``.spec.replicas``. How a list is walked comes from :mod:`.lists`: keyed lists and sets are
granular, every other list is one leaf.

:func:`leaf_values` walks an object once and returns every path it sets with its value, leaving
out what the server owns (``name``, ``uid``, ``resourceVersion``... and ``apiVersion``/``kind``)
and the top-level fields an endpoint resets. :func:`fields_v1` and :func:`parse_fields_v1`
convert a set of paths to and from the JSON tree stored in ``managedFields[].fieldsV1``, in the
real notation, so ``kubectl get -o yaml --show-managed-fields`` shows what a real server would;
the ``.`` marker upstream adds for maps that an Update created is not reproduced.
:func:`format_field_path` prints a path as structured-merge-diff does in conflict messages.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from api.patching.lists import ATOMIC, SET, effective_strategy

__all__ = [
    "ITEM_SELF",
    "MISSING",
    "FieldPath",
    "changed_fields",
    "compact",
    "field_paths",
    "fields_v1",
    "find_item",
    "format_field_path",
    "leaf_values",
    "parse_fields_v1",
    "value_at",
]


# A path is a tuple of FieldsV1 keys: "f:<field>", 'k:{"name":"c"}', 'v:"x"', and "." for the
# list item itself. ("f:spec", "f:replicas") is `.spec.replicas`.
FieldPath = tuple[str, ...]

# Fields the server owns; nobody "manages" them (upstream resets these before tracking).
_SYSTEM_METADATA = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)
_UNTRACKED_TOP_LEVEL = frozenset({"apiVersion", "kind"})
ITEM_SELF = "."


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _item_key(key: str, item: Mapping[str, Any]) -> str:
    value = item[key]
    if type(value) is str:  # almost every merge key (a name, a type): remembered
        return _str_item_key(key, value)
    return "k:" + compact({key: value})


@functools.lru_cache(maxsize=8192)
def _str_item_key(key: str, value: str) -> str:
    """``k:{"name":"c"}`` of a string-valued merge key: every write of a Pod collects the items
    of its conditions and container statuses, and :func:`compact` (``json.dumps``) of each was
    a large share of the cost of tracking its fields."""
    return "k:" + compact({key: value})


def _collect(
    value: Any, fields: tuple[str, ...], prefix: FieldPath, out: dict[FieldPath, Any]
) -> None:
    """Record every leaf path under ``prefix`` with its value (True for "." and "v:" leaves)."""
    if isinstance(value, dict):
        if not value and prefix:
            out[prefix] = value
            return
        for key, child in value.items():
            if child is None:
                continue
            _collect(child, (*fields, key), (*prefix, f"f:{key}"), out)
        return
    if isinstance(value, list):
        kind, key = effective_strategy(fields, value)
        if not value or kind == ATOMIC:
            out[prefix] = value
        elif kind == SET:
            for item in value:
                out[(*prefix, "v:" + compact(item))] = True
        else:
            for item in value:
                item_prefix = (*prefix, _item_key(key, item))
                out[(*item_prefix, ITEM_SELF)] = True
                for child_key, child in item.items():
                    if child is not None:
                        _collect(child, (*fields, child_key), (*item_prefix, f"f:{child_key}"), out)
        return
    out[prefix] = value


def _tracked_view(obj: Mapping[str, Any], ignore_fields: Collection[str]) -> dict[str, Any]:
    """The part of an object whose fields have managers."""
    view = {
        key: value
        for key, value in obj.items()
        if key not in _UNTRACKED_TOP_LEVEL and key not in ignore_fields
    }
    metadata = view.get("metadata")
    if isinstance(metadata, dict):
        trimmed = {key: value for key, value in metadata.items() if key not in _SYSTEM_METADATA}
        if trimmed:
            view["metadata"] = trimmed
        else:
            view.pop("metadata")
    return view


def leaf_values(
    obj: Mapping[str, Any], ignore_fields: Collection[str] = ()
) -> dict[FieldPath, Any]:
    """Every leaf field path the object sets, with its value (one walk of the object)."""
    out: dict[FieldPath, Any] = {}
    _collect(_tracked_view(obj, ignore_fields), (), (), out)
    return out


def changed_fields(
    old: Mapping[str, Any] | None, new: Mapping[str, Any], ignore_fields: Collection[str] = ()
) -> tuple[set[FieldPath], set[FieldPath]]:
    """The leaf paths ``new`` sets with a value ``old`` did not have (added or changed), and
    those ``old`` set that ``new`` does not (removed): what comparing the two objects'
    :func:`leaf_values` gives, without walking the parts they share. Every write pays this, and
    a write changes little: a Pod's status, a label; equal subtrees are skipped by one
    comparison (in C) instead of being walked twice."""
    changed: set[FieldPath] = set()
    removed: set[FieldPath] = set()
    before = _tracked_view(old, ignore_fields) if old else {}
    _diff(before, _tracked_view(new, ignore_fields), (), (), changed, removed)
    return changed, removed


def _diff(
    old: Any,
    new: Any,
    fields: tuple[str, ...],
    prefix: FieldPath,
    changed: set[FieldPath],
    removed: set[FieldPath],
) -> None:
    if old == new:
        return
    # Two maps that are not leaves (an empty map under a field is one): key by key. Anything
    # else (lists, scalars, a map against a leaf): their leaves, compared.
    if isinstance(old, dict) and isinstance(new, dict) and (not prefix or (old and new)):
        for key in old.keys() | new.keys():
            child_old, child_new = old.get(key), new.get(key)
            if child_old is None and child_new is None:
                continue
            path = (*prefix, f"f:{key}")
            if child_old is None or child_new is None:
                _compare(child_old, child_new, (*fields, key), path, changed, removed)
            else:
                _diff(child_old, child_new, (*fields, key), path, changed, removed)
        return
    if isinstance(old, list) and isinstance(new, list) and old and new:
        old_items, new_items = _keyed_items(fields, old), _keyed_items(fields, new)
        if old_items is not None and new_items is not None and old_items[0] == new_items[0]:
            # A list merged by key (containers by name, conditions by type): item by item,
            # and an item that did not change is skipped like an equal map.
            for item_key in old_items[1].keys() | new_items[1].keys():
                item_old, item_new = old_items[1].get(item_key), new_items[1].get(item_key)
                if item_old != item_new:
                    _compare(
                        [item_old] if item_old else None,
                        [item_new] if item_new else None,
                        fields,
                        prefix,
                        changed,
                        removed,
                    )
            return
    _compare(old, new, fields, prefix, changed, removed)


def _keyed_items(fields: tuple[str, ...], items: list[Any]) -> tuple[str, dict[Any, Any]] | None:
    """A list merged by key, as its merge key and its items by their key's value; None for any
    other list (atomic, a set, one that does not fit its key), or one with a key twice."""
    kind, key = effective_strategy(fields, items)
    if kind in (ATOMIC, SET):
        return None
    keyed = {_key_value(item.get(key)): item for item in items}
    return (key, keyed) if len(keyed) == len(items) else None


def _key_value(value: Any) -> Any:
    """A merge key's value as a dict key: itself when it is a string (almost always), else its
    JSON (1 and True and "1" stay apart)."""
    return value if isinstance(value, str) else ("json", compact(value))


def _compare(
    old: Any,
    new: Any,
    fields: tuple[str, ...],
    prefix: FieldPath,
    changed: set[FieldPath],
    removed: set[FieldPath],
) -> None:
    """Both values' leaves under ``prefix``, compared (None: no value)."""
    if not isinstance(old, dict | list) and not isinstance(new, dict | list):
        # Two scalars (a changed phase, a new message): each is its own one leaf at
        # ``prefix``, which is all collecting them would find, without building the maps.
        if new is not None and (old is None or old != new):
            changed.add(prefix)
        elif old is not None and new is None:
            removed.add(prefix)
        return
    before: dict[FieldPath, Any] = {}
    after: dict[FieldPath, Any] = {}
    if old is not None:
        _collect(old, fields, prefix, before)
    if new is not None:
        _collect(new, fields, prefix, after)
    changed.update(path for path, value in after.items() if before.get(path, MISSING) != value)
    removed.update(before.keys() - after.keys())


def field_paths(obj: Mapping[str, Any], ignore_fields: Collection[str] = ()) -> set[FieldPath]:
    """Every leaf field path the object sets (system metadata and ``ignore_fields`` excluded)."""
    return set(leaf_values(obj, ignore_fields))


MISSING = object()


def value_at(obj: Any, path: FieldPath) -> Any:
    """The value at a field path, or ``MISSING``; for ``.``/``v:`` elements, presence only."""
    current = obj
    for element in path:
        if element == ITEM_SELF:
            return True
        if element.startswith("f:"):
            if not isinstance(current, dict) or element[2:] not in current:
                return MISSING
            current = current[element[2:]]
        elif element.startswith("k:"):
            wanted = json.loads(element[2:])
            if not isinstance(current, list):
                return MISSING
            found = find_item(current, wanted)
            if found is None:
                return MISSING
            current = current[found]
        elif element.startswith("v:"):
            if not isinstance(current, list) or json.loads(element[2:]) not in current:
                return MISSING
            return True
        else:
            return MISSING
    return current


def find_item(items: list[Any], wanted: Mapping[str, Any]) -> int | None:
    for index, item in enumerate(items):
        if isinstance(item, dict) and all(item.get(k) == v for k, v in wanted.items()):
            return index
    return None


def format_field_path(path: FieldPath) -> str:
    """Render a path as structured-merge-diff does: `.spec.containers[name="c"].image`."""
    parts: list[str] = []
    for element in path:
        if element == ITEM_SELF:
            continue
        if element.startswith("f:"):
            parts.append("." + element[2:])
        elif element.startswith("k:"):
            wanted = json.loads(element[2:])
            parts.append(
                "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(wanted.items())) + "]"
            )
        elif element.startswith("v:"):
            parts.append(f"[={element[2:]}]")
    return "".join(parts)


def fields_v1(paths: Iterable[FieldPath]) -> dict[str, Any]:
    """Encode paths as a FieldsV1 tree (``{}`` at leaves, ``.`` for owned interior maps)."""
    tree: dict[str, Any] = {}
    leaves: set[FieldPath] = set()
    # Sorted, so equal sets always encode to equal bytes ("." sorts first, as upstream).
    for path in sorted(paths):
        node = tree
        for element in path:
            node = node.setdefault(element, {})
        leaves.add(path)
    # A map owned as a whole that also has owned children gets the "." marker, as upstream.
    for path in leaves:
        if not path or path[-1] == ITEM_SELF:
            continue
        node = tree
        for element in path:
            node = node[element]
        if node and ITEM_SELF not in node:
            node[ITEM_SELF] = {}
    return tree


def parse_fields_v1(tree: Mapping[str, Any]) -> set[FieldPath]:
    """Decode a FieldsV1 tree back into paths (the inverse of :func:`fields_v1`)."""
    out: set[FieldPath] = set()

    def walk(node: Mapping[str, Any], prefix: FieldPath) -> None:
        if not node and prefix:
            out.add(prefix)
            return
        for element, child in node.items():
            if element == ITEM_SELF:
                is_item = bool(prefix) and not prefix[-1].startswith("f:")
                out.add((*prefix, ITEM_SELF) if is_item else prefix)
                continue
            walk(child if isinstance(child, Mapping) else {}, (*prefix, element))

    walk(tree, ())
    return out
