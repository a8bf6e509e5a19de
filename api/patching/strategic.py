"""Strategic merge patch, "SMP-lite": ``application/strategic-merge-patch+json``.

Maps merge as in a JSON merge patch (``null`` deletes). Lists follow :mod:`.lists`: a keyed list
merges item by item on its key (a patch item without the key is upstream's 500 "does not
contain declared merge key"), a set of scalars gains the patch's values, and any other list is
replaced. The directives upstream defines are honoured:

- ``$patch: delete`` removes the map (or, in a keyed list, the item); ``$patch: replace``
  replaces the map or list with the patch's value instead of merging;
- ``$retainKeys`` keeps only the named keys of a map;
- ``$deleteFromPrimitiveList/<field>`` removes values from a list of scalars;
- ``$setElementOrder/<field>`` orders the named items, leaving the others in their slots.

The development cluster offers this content type for built-in kinds (and ``/scale``) only, as a real
server does: for a custom resource it is a 415.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from api.patching.errors import PatchError, go_json_type, not_an_object
from api.patching.lists import MERGE, SET, list_strategy

__all__ = ["strategic_merge_patch"]


_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList/"
_SET_ELEMENT_ORDER = "$setElementOrder/"


class _Deleted:
    """Marker returned for a map carrying ``$patch: delete``."""


_DELETED = _Deleted()


def _smp_map(target: dict[str, Any], patch: dict[str, Any], fields: tuple[str, ...]) -> Any:
    """Merge ``patch`` into ``target``, which the caller owns (it is reused, not copied)."""
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return _DELETED
    if directive == "replace":
        without = {key: value for key, value in patch.items() if key != _DIRECTIVE}
        return _smp_map({}, without, fields)
    if directive not in (None, "merge"):
        raise PatchError(400, "BadRequest", f"Unknown patch type: {directive!r} in map: {patch}")
    result = target
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
            continue
        current = result.get(key)
        if isinstance(value, dict):
            merged = _smp_map(current if isinstance(current, dict) else {}, value, (*fields, key))
            if merged is _DELETED:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            base = current if isinstance(current, list) else []
            result[key] = _smp_list(base, value, (*fields, key))
        else:
            result[key] = copy.deepcopy(value)
    for key, value in patch.items():
        if key.startswith(_DELETE_FROM_PRIMITIVE_LIST):
            name = key[len(_DELETE_FROM_PRIMITIVE_LIST) :]
            if not isinstance(value, list):
                raise PatchError(
                    400, "BadRequest", "invalid patch format of primitive list: not a list"
                )
            if isinstance(result.get(name), list):
                result[name] = [item for item in result[name] if item not in value]
    for key, value in patch.items():
        if key.startswith(_SET_ELEMENT_ORDER):
            name = key[len(_SET_ELEMENT_ORDER) :]
            if not isinstance(value, list):
                raise PatchError(
                    400, "BadRequest", "invalid patch format of setElementOrder list: not a list"
                )
            if isinstance(result.get(name), list):
                result[name] = _reorder(result[name], value, (*fields, name))
    retain = patch.get(_RETAIN_KEYS)
    if retain is not None:
        if not isinstance(retain, list):
            raise PatchError(400, "BadRequest", "invalid patch format of retainKeys: not a list")
        result = {key: value for key, value in result.items() if key in retain}
    return result


def _fresh(value: Any, fields: tuple[str, ...]) -> Any:
    """A patch value that has nothing to merge with: directives and nulls stripped."""
    if isinstance(value, dict):
        return _smp_map({}, value, fields)
    if isinstance(value, list):
        return _smp_list([], value, fields)
    return copy.deepcopy(value)


def _smp_list(target: list[Any], patch: list[Any], fields: tuple[str, ...]) -> list[Any]:
    def is_replace(item: Any) -> bool:
        return isinstance(item, dict) and item.get(_DIRECTIVE) == "replace"

    if any(is_replace(item) for item in patch):
        kept = [item for item in patch if not is_replace(item)]
        return [_fresh(item, fields) for item in kept]
    kind, key = list_strategy(fields)
    if kind == SET and not any(isinstance(item, dict | list) for item in patch):
        result = target
        for item in patch:
            if item not in result:
                result.append(item)
        return result
    if kind != MERGE or not all(isinstance(item, dict) for item in patch):
        return [_fresh(item, fields) for item in patch]
    result = target
    for item in patch:
        if key not in item:
            # strategicpatch: "map: map[...] does not contain declared merge key" → 500 upstream.
            raise PatchError(
                500,
                "InternalError",
                f"Internal error occurred: map: {item} does not contain declared merge key: {key}",
            )
        matches = [
            index
            for index, existing in enumerate(result)
            if isinstance(existing, dict) and existing.get(key) == item[key]
        ]
        if item.get(_DIRECTIVE) == "delete":
            result = [existing for index, existing in enumerate(result) if index not in matches]
            continue
        if matches:
            merged = _smp_map(result[matches[0]], item, fields)
            if merged is _DELETED:
                del result[matches[0]]
            else:
                result[matches[0]] = merged
        else:
            result.append(_smp_map({}, item, fields))
    return result


def _reorder(items: list[Any], order: list[Any], fields: tuple[str, ...]) -> list[Any]:
    """``$setElementOrder``: the named elements take the given order; others keep their slots."""
    kind, key = list_strategy(fields)

    def identity(item: Any) -> str:
        if kind == MERGE and isinstance(item, dict):
            return json.dumps(item.get(key), sort_keys=True)
        return json.dumps(item, sort_keys=True)

    rank = {identity(item): position for position, item in enumerate(order)}
    slots = [index for index, item in enumerate(items) if identity(item) in rank]
    ordered = sorted((items[index] for index in slots), key=lambda item: rank[identity(item)])
    result = list(items)
    for slot, item in zip(slots, ordered, strict=True):
        result[slot] = item
    return result


def strategic_merge_patch(
    target: dict[str, Any], patch: Any, *, in_place: bool = False
) -> dict[str, Any]:
    """Apply a strategic merge patch (SMP-lite, see the module docstring) to a built-in object.

    ``target`` is not modified unless ``in_place``."""
    if not isinstance(patch, dict):
        raise PatchError(
            400,
            "BadRequest",
            f"json: cannot unmarshal {go_json_type(patch)} into Go value of type "
            "map[string]interface {}",
        )
    result = _smp_map(target if in_place else copy.deepcopy(target), patch, ())
    if result is _DELETED:
        return {}
    if not isinstance(result, dict):
        raise not_an_object(result)
    return result
