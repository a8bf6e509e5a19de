"""Server-side apply, "SSA-lite": ``application/apply-patch+yaml``.

An apply sends a manager's whole intent, the *applied configuration*. :func:`server_side_apply`
merges it into the live object list by list as :mod:`.lists` says (keyed lists and sets item by
item, in structured-merge-diff's order, other lists whole) and records in the manager's
``Apply`` entry (:mod:`.managed`) exactly the field paths it applied. Then, as upstream:

- a field another manager owns whose value the apply would change is a conflict: 409 with one
  ``FieldManagerConflict`` cause per field and structured-merge-diff's message, unless
  ``force`` moves the field to the applier;
- a field the manager applied last time and omits now is removed, unless another manager or
  the new configuration still owns it or something inside it; maps and lists that the removal
  leaves empty go too, unless someone owns them;
- fields of an object that predates field tracking belong to ``before-first-apply``;
- an apply that changes nothing is a no-op: the entry's time is not refreshed, so the
  resourceVersion stays.

Not modelled: per-version schemas, ``x-kubernetes-list-type`` declared by CRDs, multi-field list
keys.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Collection, Iterable
from typing import Any

from api.patching.errors import ApplyConflict
from api.patching.lists import MERGE, SET, effective_strategy
from devtools.cluster.apirules.patching.fields import (
    ITEM_SELF,
    MISSING,
    FieldPath,
    compact,
    field_paths,
    find_item,
    format_field_path,
    value_at,
)
from devtools.cluster.apirules.patching.managed import (
    ManagerEntry,
    decode_entries,
    with_entries,
    with_raw_managed_fields,
    without_managed_fields,
)

__all__ = ["BEFORE_FIRST_APPLY", "server_side_apply"]


# Upstream gives fields of an object that predates field tracking to this pseudo-manager.
BEFORE_FIRST_APPLY = "before-first-apply"


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _drop_nulls(child) for key, child in value.items() if child is not None}
    if isinstance(value, list):
        return [_drop_nulls(item) for item in value]
    return value


def _apply_merge(live: Any, config: Any, fields: tuple[str, ...]) -> Any:
    """Merge an applied configuration into the live object, list by list as the table says.

    ``live`` belongs to the caller and is reused; nothing of ``config`` is shared with the result.
    """
    if isinstance(config, dict):
        result = live if isinstance(live, dict) else {}
        for key, value in config.items():
            if key == "managedFields" and fields == ("metadata",):
                continue
            result[key] = _apply_merge(result.get(key), value, (*fields, key))
        return result
    if isinstance(config, list):
        current = live if isinstance(live, list) else []
        kind, key = effective_strategy(fields, current, config)
        if kind == SET:
            return _merge_ordered(current, config, compact, lambda _live, item: copy.deepcopy(item))
        if kind == MERGE:
            return _merge_ordered(
                current,
                config,
                lambda item: compact(item[key]),
                lambda existing, item: _apply_merge(existing, item, fields),
            )
    return copy.deepcopy(config)


def _merge_ordered(
    live: list[Any],
    applied: list[Any],
    identity: Callable[[Any], str],
    merge: Callable[[Any, Any], Any],
) -> list[Any]:
    """Merge two granular lists the way structured-merge-diff orders them.

    Items both lists hold come out in the applied order; items only the live list holds keep
    their place relative to those; items only the applied list holds come where it puts them.
    """
    live_ids = [identity(item) for item in live]
    applied_ids = [identity(item) for item in applied]
    live_by_id = dict(zip(live_ids, live, strict=True))
    applied_set = set(applied_ids)
    shared = [item_id for item_id in applied_ids if item_id in live_by_id]
    out: list[Any] = []
    emitted: set[str] = set()
    left = right = 0

    def emit_applied() -> None:
        nonlocal right
        item_id = applied_ids[right]
        out.append(merge(live_by_id.get(item_id), applied[right]))
        emitted.add(item_id)
        if shared and shared[0] == item_id:
            shared.pop(0)
        right += 1

    while left < len(live) or right < len(applied):
        if left < len(live) and right < len(applied):
            if live_ids[left] == applied_ids[right]:
                left += 1
                emit_applied()
                continue
            if live_ids[left] in applied_set and shared and shared[0] != live_ids[left]:
                left += 1  # a shared item that the applied order puts later
                continue
        if left < len(live):
            if live_ids[left] not in applied_set:
                out.append(live[left])
                left += 1
                continue
            if live_ids[left] in emitted:
                left += 1
                continue
        if right < len(applied):
            emit_applied()
        else:
            left += 1
    return out


def _conflict_message(conflicts: list[tuple[ManagerEntry, FieldPath]]) -> str:
    """getConflictMessage in apiserver fieldmanager/internal/conflict.go."""
    if len(conflicts) == 1:
        entry, path = conflicts[0]
        return (
            f"Apply failed with 1 conflict: conflict with {entry.describe()}: "
            f"{format_field_path(path)}"
        )
    by_manager: dict[str, list[FieldPath]] = {}
    for entry, path in conflicts:
        by_manager.setdefault(entry.describe(), []).append(path)
    lines: list[str] = []
    for manager in sorted(by_manager):
        lines.append(f"conflicts with {manager}:")
        lines.extend(f"- {format_field_path(path)}" for path in by_manager[manager])
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


def _remove_path(obj: dict[str, Any], path: FieldPath) -> None:
    """Delete the field, set value or list item a path names, if it is there."""
    if path[-1] == ITEM_SELF:
        container_path, element = path[:-2], path[-2]
    else:
        container_path, element = path[:-1], path[-1]
    container = value_at(obj, container_path) if container_path else obj
    if element.startswith("f:") and isinstance(container, dict):
        container.pop(element[2:], None)
    elif element.startswith("k:") and isinstance(container, list):
        index = find_item(container, json.loads(element[2:]))
        if index is not None:
            del container[index]
    elif element.startswith("v:") and isinstance(container, list):
        value = json.loads(element[2:])
        container[:] = [item for item in container if item != value]


def _prune_empty_parents(obj: dict[str, Any], path: FieldPath, owned: set[FieldPath]) -> None:
    """Drop maps and lists a removal left empty, below the top level, unless someone owns them."""
    parent = path[:-2] if path[-1] == ITEM_SELF else path[:-1]
    while len(parent) > 1 and parent[-1].startswith("f:") and parent not in owned:
        value = value_at(obj, parent)
        if not (isinstance(value, dict | list) and not value):
            return
        _remove_path(obj, parent)
        parent = parent[:-1]


def _still_needed(path: FieldPath, owners: Iterable[set[FieldPath]]) -> bool:
    """Whether removing this abandoned path would take away something that is still owned.

    That is the case when any owner (another manager, or this manager's new configuration) owns
    the path or anything inside what it names, and for the key field of a keyed list item, which
    goes only with the item itself.
    """
    is_item_field = len(path) >= 2 and path[-2].startswith("k:") and path[-1].startswith("f:")
    if is_item_field and path[-1][2:] in json.loads(path[-2][2:]):
        return True
    scope = path[:-1] if path[-1] == ITEM_SELF else path
    return any(other[: len(scope)] == scope for paths in owners for other in paths)


def server_side_apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    *,
    manager: str,
    force: bool,
    now: str,
    ignore_fields: Collection[str] = (),
    subresource: str = "",
) -> dict[str, Any]:
    """Apply ``applied`` as ``manager`` onto ``live`` (None = create) and return the new object.

    Raises :class:`ApplyConflict` when a field owned by another manager would change value, unless
    ``force``, in which case ownership of those fields moves to ``manager``. Fields this manager
    applied last time and omits now are removed, unless another manager also owns them.
    ``ignore_fields`` names top-level fields the endpoint resets (``status`` on the main resource
    of a kind with a status subresource), which are then neither merged nor owned;
    ``subresource`` ("status" for an apply to ``/status``) is recorded in the manager's entry.
    """
    config = _drop_nulls({key: value for key, value in applied.items() if key not in ignore_fields})
    applied_paths = field_paths(config, ignore_fields)
    base = copy.deepcopy(live) if live else {}
    entries = decode_entries(live)
    if live and not entries:
        existing = field_paths(live, ignore_fields)
        if existing:
            entries.append(
                ManagerEntry(
                    BEFORE_FIRST_APPLY, "Update", str(live.get("apiVersion", "")), now, "", existing
                )
            )

    identity = (manager, "Apply", subresource)
    mine = next((entry for entry in entries if entry.identity == identity), None)
    previously_applied = set(mine.paths) if mine else set()

    conflicts: list[tuple[ManagerEntry, FieldPath]] = []
    for entry in entries:
        if entry.manager == manager:
            continue
        for path in sorted(entry.paths & applied_paths):
            live_value = value_at(base, path)
            if live_value is not MISSING and live_value != value_at(config, path):
                conflicts.append((entry, path))
    if conflicts and not force:
        causes = [
            {
                # StatusCause's Type field is "reason" on the wire.
                "reason": "FieldManagerConflict",
                "message": f"conflict with {entry.describe()}",
                "field": format_field_path(path),
            }
            for entry, path in conflicts
        ]
        raise ApplyConflict(causes, _conflict_message(conflicts))
    for entry, path in conflicts:
        entry.paths.discard(path)

    merged = _apply_merge(base, config, ())

    others = [entry.paths for entry in entries if entry.identity != identity]
    abandoned = sorted(previously_applied - applied_paths, key=len, reverse=True)
    owned_now = applied_paths.union(*others)
    for path in abandoned:
        if not _still_needed(path, [*others, applied_paths]):
            _remove_path(merged, path)
            _prune_empty_parents(merged, path, owned_now)

    unchanged = (
        live is not None
        and not conflicts
        and mine is not None
        and mine.paths == applied_paths
        and without_managed_fields(merged) == without_managed_fields(live)
    )
    if unchanged:
        # Upstream refreshes an entry's time only when the object changed: a repeated apply
        # is a no-op that keeps the resourceVersion.
        return with_raw_managed_fields(merged, live)
    if mine is None:
        mine = ManagerEntry(manager, "Apply", "", None, subresource, set())
        entries.append(mine)
    mine.paths = applied_paths
    mine.time = now
    mine.api_version = str(applied.get("apiVersion", "") or (live or {}).get("apiVersion", ""))
    return with_entries(merged, entries)
