"""``metadata.managedFields``: which manager owns which fields, updated by every write.

Each entry is a :class:`ManagerEntry`: a manager, an operation (``Apply`` or ``Update``), the
API version and time of its last change, an optional subresource, and the set of field paths
(:mod:`.fields`) it owns. Entries are decoded from the stored object, changed, and encoded back
in the real ``FieldsV1`` notation.

A non-apply write (create, update, patch) goes through :func:`record_update`: the writer's
``Update`` entry gains every field it added or changed, those fields leave every other entry
(an Update never conflicts, it takes over) and removed fields leave all entries. That is what
makes an apply after a ``kubectl edit`` conflict exactly as it does on a real cluster. A write
that changes nothing keeps the stored managedFields byte for byte, so it does not bump the
resourceVersion. Server-side apply (:mod:`.apply`) uses the same entries.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Collection, Mapping
from typing import Any

import msgspec

from devtools.cluster.apirules.patching.fields import (
    FieldPath,
    changed_fields,
    fields_v1,
    parse_fields_v1,
)

__all__ = [
    "ManagerEntry",
    "decode_entries",
    "record_update",
    "with_entries",
    "with_raw_managed_fields",
    "without_managed_fields",
]


class ManagerEntry:
    """One managedFields entry: who, how, and the set of paths they own."""

    def __init__(
        self,
        manager: str,
        operation: str,
        api_version: str,
        time: str | None,
        subresource: str,
        paths: set[FieldPath],
    ) -> None:
        self.manager = manager
        self.operation = operation
        self.api_version = api_version
        self.time = time
        self.subresource = subresource
        self.paths = paths
        self.parsed: frozenset[FieldPath] | None = None
        """The paths as decoded (:func:`decode_entries`): while :attr:`paths` still equals
        them, :meth:`encode` looks their tree up by this very frozenset, whose hash is kept,
        instead of building and hashing a new one."""

    @property
    def identity(self) -> tuple[str, str, str]:
        return (self.manager, self.operation, self.subresource)

    def describe(self) -> str:
        """printManager in apiserver fieldmanager/internal/conflict.go."""
        text = json.dumps(self.manager)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == "Update":
            text += f" using {self.api_version}"
        return text

    def encode(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
        }
        if self.time is not None:
            entry["time"] = self.time
        entry["fieldsType"] = "FieldsV1"
        parsed = self.parsed
        paths = parsed if parsed is not None and self.paths == parsed else frozenset(self.paths)
        entry["fieldsV1"] = _decoder.decode(_encoded_tree(paths))
        if self.subresource:
            entry["subresource"] = self.subresource
        return entry


# Every write converts each managedFields entry from its FieldsV1 tree to paths and back, and
# most writes leave most entries as they were: both conversions are remembered (by the tree's
# JSON, and by the set of paths), and each caller gets a copy of its own.
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


@functools.lru_cache(maxsize=4096)
def _encoded_tree(paths: frozenset[FieldPath]) -> bytes:
    return _encoder.encode(fields_v1(paths))


@functools.lru_cache(maxsize=4096)
def _parsed_tree(tree: bytes) -> frozenset[FieldPath]:
    return frozenset(parse_fields_v1(_decoder.decode(tree)))


def decode_entries(obj: Mapping[str, Any] | None) -> list[ManagerEntry]:
    if not obj:
        return []
    raw = (obj.get("metadata") or {}).get("managedFields") or []
    entries: list[ManagerEntry] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        tree = item.get("fieldsV1") or {}
        parsed = _parsed_tree(_encoder.encode(tree)) if isinstance(tree, dict) else None
        entry = ManagerEntry(
            manager=str(item.get("manager", "")),
            operation=str(item.get("operation", "Update")),
            api_version=str(item.get("apiVersion", "")),
            time=item.get("time"),
            subresource=str(item.get("subresource", "")),
            paths=set(parsed) if parsed is not None else set(),
        )
        entry.parsed = parsed
        entries.append(entry)
    return entries


def with_entries(obj: dict[str, Any], entries: list[ManagerEntry]) -> dict[str, Any]:
    result = dict(obj)
    metadata = dict(result.get("metadata") or {})
    live_entries = [entry.encode() for entry in entries if entry.paths]
    if live_entries:
        metadata["managedFields"] = live_entries
    else:
        metadata.pop("managedFields", None)
    result["metadata"] = metadata
    return result


def without_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    result = dict(obj)
    metadata = dict(result.get("metadata") or {})
    metadata.pop("managedFields", None)
    result["metadata"] = metadata
    return result


def with_raw_managed_fields(
    obj: Mapping[str, Any], source: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``obj`` carrying ``source``'s managedFields exactly as stored."""
    result = without_managed_fields(obj)
    managed = ((source or {}).get("metadata") or {}).get("managedFields")
    if managed:
        result["metadata"]["managedFields"] = copy.deepcopy(managed)
    return result


def record_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    operation: str = "Update",
    now: str,
    subresource: str = "",
    ignore_fields: Collection[str] = (),
) -> dict[str, Any]:
    """Record a non-apply write (create, update, patch) in ``new``'s managedFields.

    The writer's entry gains every field it added or changed; those fields leave every other
    entry (an Update never conflicts, it takes over), and fields the write removed leave all
    entries. A write that changes nothing returns ``new`` with the old managedFields untouched,
    so a no-op write stays byte-identical and does not bump the resourceVersion.
    ``managedFields: [{}]`` in ``new`` clears the history, as upstream documents.

    Neither input is modified; the result is a new top-level dict with new ``metadata``, but its
    other nested values are ``new``'s own (this runs on every write, so it does not copy them).
    """
    new_managed = (new.get("metadata") or {}).get("managedFields")
    if new_managed == [{}]:
        return with_entries(new, [])
    changed, removed = changed_fields(old, new, ignore_fields)
    entries = decode_entries(old)
    if not changed and not removed:
        return with_raw_managed_fields(new, old)
    identity = (manager, operation, subresource)
    mine = next((entry for entry in entries if entry.identity == identity), None)
    for entry in entries:
        entry.paths -= removed
        if entry is not mine:
            entry.paths -= changed
    if changed:
        if mine is None:
            mine = ManagerEntry(manager, operation, "", None, subresource, set())
            entries.append(mine)
        mine.paths |= changed
        mine.time = now
        mine.api_version = str(new.get("apiVersion", ""))
    return with_entries(new, entries)
