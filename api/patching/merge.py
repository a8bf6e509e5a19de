"""JSON merge patch (RFC 7386): making one, and applying one.

A merge patch is an object whose members say what to change: an object merges into the
target's member of that name, ``null`` removes it, and anything else (lists included) replaces
it. The workers make merge patches of what they change (:func:`merge_patch`) and send them to
the API server; the development cluster applies those it receives (:func:`apply_merge_patch`,
behind its request validation); the planners' tests apply them to see what the server would
store.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["apply_merge_patch", "merge_patch"]


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that turns ``old`` into ``new`` (empty when they are equal)."""
    patch: dict[str, Any] = {}
    for name in old.keys() - new.keys():
        patch[name] = None
    for name, value in new.items():
        before = old.get(name, _MISSING)
        if before == value:
            continue
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                patch[name] = nested
        else:
            patch[name] = _without_nulls(value)
    return patch


def apply_merge_patch(target: Any, patch: Any, *, in_place: bool = False) -> Any:
    """``target`` with the merge patch ``patch`` applied.

    Neither input is changed: the result shares with ``target`` only what the patch leaves
    alone, and copies what it takes from ``patch``. Unless ``in_place``: then both belong to the
    caller, ``target`` (when it is an object) becomes the result and parts of ``patch`` may end
    up in it, which saves the copies on a write path that owns both.
    """
    if not isinstance(patch, Mapping):
        return patch if in_place else copy.deepcopy(patch)
    if in_place and type(target) is dict:
        result = target
    else:
        result = dict(target) if isinstance(target, Mapping) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = apply_merge_patch(result.get(name), value, in_place=in_place)
    return result


_MISSING: Any = object()


def _without_nulls(value: Any) -> Any:
    # In a merge patch a null means "delete"; a new object that holds a null field would
    # otherwise be read as "delete that field", so such fields are left out, as Kubernetes
    # leaves them out when it serialises an object.
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value
