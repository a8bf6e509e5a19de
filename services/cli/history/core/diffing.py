"""What changed between two versions of an object, in a form one line can hold (pure).

``sandbus explain`` prints one line per version, so the diff must say the important thing in a
few words: ``status.conditions[Ready]: False→True``, ``metadata.labels[pool]: python→∅``,
``spec.replicas: 3→5``. It compares only what a person debugging a controller reads: labels,
annotations, finalizers, owner references, the deletion timestamp, ``spec`` and ``status``.
Bookkeeping that changes on every write (resourceVersion, managedFields, generation) would
drown the signal.

Lists are compared the way Kubernetes merges them, by a key, so that a condition that moved
position is not a change: conditions by ``type``, containers, ports, volumes and the like by
``name``, owner references by ``kind/name``. A condition's change is its ``status`` (its
``reason`` when only that changed); its timestamps and message are noise in a one-line diff.
Any other list is compared as one value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

__all__ = [
    "ABSENT",
    "FieldChange",
    "describe_change",
    "describe_changes",
    "render_value",
    "version_changes",
]


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()
"""The value of a field that does not exist in that version."""

_ABSENT_TEXT: Final = "∅"
_MAX_VALUE_LENGTH: Final = 48
_PLAIN_VALUE = re.compile(r"[\w.\-/:@+]+")
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOISY_ANNOTATIONS: Final = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})
_CONDITION_NOISE: Final = frozenset(
    {"lastTransitionTime", "lastProbeTime", "lastUpdateTime", "lastHeartbeatTime", "message"}
)
_MAP_FIELDS: Final = frozenset(
    {"metadata.labels", "metadata.annotations", "spec.selector.matchLabels"}
)


class FieldChange(NamedTuple):
    """One field that differs: its path, and its value before and after (or :data:`ABSENT`)."""

    path: str
    before: Any
    after: Any


def _compared(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    annotations = metadata.get("annotations")
    if isinstance(annotations, Mapping):
        annotations = {k: v for k, v in annotations.items() if k not in _NOISY_ANNOTATIONS}
    compared_metadata = {
        "labels": metadata.get("labels"),
        "annotations": annotations,
        "finalizers": metadata.get("finalizers"),
        "ownerReferences": metadata.get("ownerReferences"),
        "deletionTimestamp": metadata.get("deletionTimestamp"),
    }
    return {
        "metadata": {k: v for k, v in compared_metadata.items() if v not in (None, {}, [])},
        "spec": obj.get("spec", ABSENT),
        "status": obj.get("status", ABSENT),
    }


def _segment(parent: str, key: str) -> str:
    if parent in _MAP_FIELDS or not _PLAIN_KEY.fullmatch(key):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def _list_key(item: Any) -> str | None:
    """The merge key of a list item, or None when the list has no usable key."""
    if not isinstance(item, Mapping):
        return None
    if isinstance(item.get("type"), str) and "status" in item:
        return str(item["type"])
    if isinstance(item.get("kind"), str) and isinstance(item.get("name"), str) and "uid" in item:
        return f"{item['kind']}/{item['name']}"
    if isinstance(item.get("name"), str):
        return str(item["name"])
    return None


def _keyed(items: Sequence[Any]) -> dict[str, Any] | None:
    keyed: dict[str, Any] = {}
    for item in items:
        key = _list_key(item)
        if key is None or key in keyed:
            return None
        keyed[key] = item
    return keyed


def _is_condition(value: Any) -> bool:
    return isinstance(value, Mapping) and "type" in value and "status" in value


def _condition_changes(path: str, before: Any, after: Any) -> list[FieldChange]:
    if not (_is_condition(before) and _is_condition(after)):
        return [
            FieldChange(
                path,
                before["status"] if _is_condition(before) else before,
                after["status"] if _is_condition(after) else after,
            )
        ]
    if before.get("status") != after.get("status"):
        return [FieldChange(path, before.get("status"), after.get("status"))]
    changes = []
    if before.get("reason") != after.get("reason"):
        changes.append(
            FieldChange(f"{path}.reason", before.get("reason", ABSENT), after.get("reason", ABSENT))
        )
    return changes


def _walk(path: str, before: Any, after: Any, out: list[FieldChange]) -> None:
    if before == after:
        return
    # A map or keyed list that appears or vanishes is walked as if it were empty on the other
    # side, so that a first status reads "status.conditions[Ready]: ∅→False", not one blob.
    old = type(after)() if before is ABSENT and isinstance(after, Mapping | list) else before
    new = type(before)() if after is ABSENT and isinstance(before, Mapping | list) else after
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in [*old, *(k for k in new if k not in old)]:
            _walk(_segment(path, str(key)), old.get(key, ABSENT), new.get(key, ABSENT), out)
        return
    if isinstance(old, list) and isinstance(new, list):
        keyed_old, keyed_new = _keyed(old), _keyed(new)
        if keyed_old is not None and keyed_new is not None:
            for key in [*keyed_old, *(k for k in keyed_new if k not in keyed_old)]:
                _walk_item(
                    f"{path}[{key}]", keyed_old.get(key, ABSENT), keyed_new.get(key, ABSENT), out
                )
            return
    out.append(FieldChange(path, before, after))


def _walk_item(path: str, before: Any, after: Any, out: list[FieldChange]) -> None:
    if before == after:
        return
    if _is_condition(before) or _is_condition(after):
        out.extend(_condition_changes(path, before, after))
    else:
        _walk(path, before, after, out)


def version_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[FieldChange]:
    """The fields of interest that differ from ``before`` to ``after``, in document order."""
    changes: list[FieldChange] = []
    _walk("", _compared(before), _compared(after), changes)
    return changes


def render_value(value: Any) -> str:
    """A value short enough for one line: plain strings bare, the rest as compact JSON."""
    if value is ABSENT or value is None:
        return _ABSENT_TEXT
    if isinstance(value, str) and _PLAIN_VALUE.fullmatch(value):
        text = value
    else:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    if len(text) > _MAX_VALUE_LENGTH:
        text = text[: _MAX_VALUE_LENGTH - 1] + "…"
    return text


def describe_change(change: FieldChange) -> str:
    return f"{change.path}: {render_value(change.before)}→{render_value(change.after)}"


def describe_changes(changes: Sequence[FieldChange], *, limit: int = 8) -> str:
    """Up to ``limit`` changes joined with ``; ``, and how many more there were."""
    if not changes:
        return "no change to labels, spec or status"
    shown = "; ".join(describe_change(change) for change in changes[:limit])
    hidden = len(changes) - limit
    return f"{shown}; +{hidden} more" if hidden > 0 else shown
