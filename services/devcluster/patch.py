"""Patch semantics of the development cluster: merge, JSON, strategic merge and server-side apply.

Every function here is pure: it takes plain JSON-shaped dicts, never mutates them, and returns a new
object or raises :class:`PatchError` / :class:`ApplyConflict`, which the HTTP layer turns into a
``metav1.Status``. Keeping the semantics apart from the handlers lets them be tested case by case.

What each content type means (spec/kube-standin.md §2 row 9, apiserver ``handlers/patch.go``):

- ``application/merge-patch+json`` → :func:`merge_patch`, RFC 7386: maps merge, ``null`` deletes,
  everything else (lists included) replaces.
- ``application/json-patch+json`` → :func:`json_patch`, RFC 6902 through the ``jsonpatch`` package.
  A body that is not a list is a 400 with Go's decoder message; a failing operation (a ``test``
  included) is a 422. Upstream's 422 message is only "the server rejected our request due to an
  error in our request"; we append what went wrong, since a stand-in exists to be debugged against.
- ``application/strategic-merge-patch+json`` → :func:`strategic_merge_patch`, "SMP-lite". Upstream
  reads the merge strategy of each list from Go struct tags. We keep a table keyed by field name
  (with one context rule: ``ports`` inside a container merges by ``containerPort``, elsewhere by
  ``port``), which covers the built-in kinds this project writes. Directives ``$patch``,
  ``$retainKeys``, ``$deleteFromPrimitiveList/<f>`` and ``$setElementOrder/<f>`` are honoured.
- ``application/apply-patch+yaml`` → :func:`server_side_apply`, "SSA-lite". Ownership is tracked
  per manager as a set of leaf field paths, stored in ``metadata.managedFields`` in the real
  ``FieldsV1`` notation (``f:``/``k:``/``v:`` and ``.``), so ``kubectl get -o yaml`` shows what a
  real server would. Lists follow the same table as SMP: keyed lists are granular (``k:``), the
  ``finalizers`` set is granular by value (``v:``), every other list is atomic. Non-apply writes
  call :func:`record_update`, which gives their manager the fields they changed, so an apply after
  a ``kubectl edit`` conflicts exactly as it does on a real cluster. Not modelled: per-version
  schemas, ``x-kubernetes-list-type`` declared by CRDs, multi-field list keys, and the ``.``
  marker upstream adds for maps that an Update created.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import jsonpatch
import jsonpointer

__all__ = [
    "ApplyConflict",
    "PatchError",
    "json_patch",
    "merge_patch",
    "record_update",
    "server_side_apply",
    "strategic_merge_patch",
]

# apiserver handlers/patch.go: maxJSONPatchOperations.
MAX_JSON_PATCH_OPERATIONS = 10000

_REJECTED = "the server rejected our request due to an error in our request"


class PatchError(Exception):
    """A patch that cannot be applied; ``code``/``reason``/``message`` map onto a metav1.Status."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


class ApplyConflict(Exception):
    """Server-side apply touched fields another manager owns (409 Conflict with causes).

    ``causes`` are metav1.StatusCause objects as they go on the wire (``reason``, ``message``,
    ``field``), ready for the Status body's ``details.causes``.
    """

    def __init__(self, causes: list[dict[str, str]], message: str = "") -> None:
        if not message:
            plural = "" if len(causes) == 1 else "s"
            message = f"Apply failed with {len(causes)} conflict{plural}"
        super().__init__(message)
        self.causes = causes
        self.message = message
        self.code = 409
        self.reason = "Conflict"


def _go_json_type(value: Any) -> str:
    """The name Go's encoding/json uses for a JSON value in "cannot unmarshal X" errors."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int | float):
        return "number"
    return "null"


def _not_an_object(result: Any) -> PatchError:
    """What the server says when a patch turned the object into something that is not a map."""
    body = json.dumps(result, separators=(",", ":"))
    go_type = _go_json_type(result)
    return PatchError(
        422,
        "Invalid",
        f' "" is invalid: patch: Invalid value: {json.dumps(body)}: json: cannot unmarshal '
        f"{go_type} into Go value of type map[string]interface {{}}",
    )


# --------------------------------------------------------------------------------------------
# RFC 7386 merge patch
# --------------------------------------------------------------------------------------------


def _merge_into(result: dict[str, Any], patch: dict[str, Any], *, share: bool) -> None:
    """Merge ``patch`` into ``result`` in place; ``result`` must be the caller's own copy.
    Values of ``patch`` are copied unless ``share``."""
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            if not isinstance(current, dict):
                current = {}
            _merge_into(current, value, share=share)
            result[key] = current
        else:
            result[key] = value if share else copy.deepcopy(value)


def merge_patch(target: dict[str, Any], patch: Any, *, in_place: bool = False) -> dict[str, Any]:
    """Apply a JSON merge patch (RFC 7386) to ``target`` and return the result.

    Neither input is modified, unless ``in_place``: then both belong to the caller, ``target``
    becomes the result and parts of ``patch`` may end up in it (the write path, which owns
    both, saves two deep copies).
    """
    if patch is None:
        # evanphx/json-patch: a null patch is ErrBadJSONPatch, which the handler maps to a 400.
        raise PatchError(400, "BadRequest", "Invalid JSON Patch")
    if not isinstance(patch, dict):
        raise _not_an_object(patch)
    result = target if in_place else copy.deepcopy(target)
    _merge_into(result, patch, share=in_place)
    return result


# --------------------------------------------------------------------------------------------
# RFC 6902 JSON patch
# --------------------------------------------------------------------------------------------


def _describe_operation(index: int, op: Mapping[str, Any]) -> str:
    name = op.get("op", "?")
    path = op.get("path", "?")
    return f"operation {index} ({name} {path})"


def json_patch(target: dict[str, Any], ops: Any, *, in_place: bool = False) -> dict[str, Any]:
    """Apply a JSON patch (RFC 6902); 400 for an undecodable body, 422 for an op that fails.

    ``target`` is not modified unless ``in_place`` (then it may be, even when an op fails)."""
    if ops is None:
        # Go decodes `null` into a nil Patch: a no-op rather than an error.
        return target if in_place else copy.deepcopy(target)
    if not isinstance(ops, list):
        raise PatchError(
            400,
            "BadRequest",
            f"json: cannot unmarshal {_go_json_type(ops)} into Go value of type jsonpatch.Patch",
        )
    for op in ops:
        if not isinstance(op, dict):
            raise PatchError(
                400,
                "BadRequest",
                f"json: cannot unmarshal {_go_json_type(op)} into Go value of type "
                "jsonpatch.Operation",
            )
    if len(ops) > MAX_JSON_PATCH_OPERATIONS:
        raise PatchError(
            413,
            "RequestEntityTooLarge",
            "Request entity too large: The allowed maximum operations in a JSON patch is "
            f"{MAX_JSON_PATCH_OPERATIONS}, got {len(ops)}",
        )
    document: Any = target if in_place else copy.deepcopy(target)
    # One operation at a time, so the error names the operation that failed.
    for index, op in enumerate(ops):
        try:
            document = jsonpatch.JsonPatch([op]).apply(document, in_place=True)
        except jsonpatch.JsonPatchTestFailed:
            raise PatchError(
                422,
                "Invalid",
                f"{_REJECTED}: {_describe_operation(index, op)}: testing value "
                f"{op.get('path')} failed: test failed",
            ) from None
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as error:
            raise PatchError(
                422, "Invalid", f"{_REJECTED}: {_describe_operation(index, op)}: {error}"
            ) from None
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise PatchError(
                422,
                "Invalid",
                f"{_REJECTED}: {_describe_operation(index, op)}: does not apply ({error!r})",
            ) from None
    if not isinstance(document, dict):
        raise _not_an_object(document)
    return document


# --------------------------------------------------------------------------------------------
# List strategies shared by strategic merge patch and server-side apply
# --------------------------------------------------------------------------------------------

# patchMergeKey of the built-in types, by field name (k8s.io/api struct tags).
_MERGE_KEYS: Mapping[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
    "schedulingGates": "name",
    "secrets": "name",  # ServiceAccount.secrets
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "podIPs": "ip",
    "hostIPs": "ip",
    "topologySpreadConstraints": "topologyKey",
}
_CONTAINER_LISTS = frozenset({"containers", "initContainers", "ephemeralContainers"})
# patchStrategy=merge on a list of scalars: a set.
_SET_LISTS = frozenset({"finalizers"})

_MERGE = "merge"
_SET = "set"
_ATOMIC = "atomic"


def _list_strategy(fields: tuple[str, ...]) -> tuple[str, str]:
    """How the list at this field path merges: (merge, key), (set, "") or (atomic, "")."""
    if not fields:
        return _ATOMIC, ""
    name = fields[-1]
    if name == "ports":
        in_container = len(fields) >= 2 and fields[-2] in _CONTAINER_LISTS
        return _MERGE, "containerPort" if in_container else "port"
    if name in _SET_LISTS:
        return _SET, ""
    key = _MERGE_KEYS.get(name)
    if key is not None:
        return _MERGE, key
    return _ATOMIC, ""


def _effective_strategy(fields: tuple[str, ...], *lists: list[Any]) -> tuple[str, str]:
    """The table's strategy, demoted to atomic when the data does not fit it (e.g. a CR field)."""
    kind, key = _list_strategy(fields)
    items = [item for values in lists for item in values]
    if kind == _MERGE and not all(isinstance(item, dict) and key in item for item in items):
        return _ATOMIC, ""
    if kind == _SET and any(isinstance(item, dict | list) for item in items):
        return _ATOMIC, ""
    return kind, key


# --------------------------------------------------------------------------------------------
# Strategic merge patch (SMP-lite)
# --------------------------------------------------------------------------------------------

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
    kind, key = _list_strategy(fields)
    if kind == _SET and not any(isinstance(item, dict | list) for item in patch):
        result = target
        for item in patch:
            if item not in result:
                result.append(item)
        return result
    if kind != _MERGE or not all(isinstance(item, dict) for item in patch):
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
    kind, key = _list_strategy(fields)

    def identity(item: Any) -> str:
        if kind == _MERGE and isinstance(item, dict):
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
            f"json: cannot unmarshal {_go_json_type(patch)} into Go value of type "
            "map[string]interface {}",
        )
    result = _smp_map(target if in_place else copy.deepcopy(target), patch, ())
    if result is _DELETED:
        return {}
    if not isinstance(result, dict):
        raise _not_an_object(result)
    return result


# --------------------------------------------------------------------------------------------
# Field sets: which leaf paths an object sets, in FieldsV1 notation
# --------------------------------------------------------------------------------------------

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
_ITEM_SELF = "."


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _item_key(key: str, item: Mapping[str, Any]) -> str:
    return "k:" + _compact({key: item[key]})


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
        kind, key = _effective_strategy(fields, value)
        if not value or kind == _ATOMIC:
            out[prefix] = value
        elif kind == _SET:
            for item in value:
                out[(*prefix, "v:" + _compact(item))] = True
        else:
            for item in value:
                item_prefix = (*prefix, _item_key(key, item))
                out[(*item_prefix, _ITEM_SELF)] = True
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


def field_paths(obj: Mapping[str, Any], ignore_fields: Collection[str] = ()) -> set[FieldPath]:
    """Every leaf field path the object sets (system metadata and ``ignore_fields`` excluded)."""
    return set(leaf_values(obj, ignore_fields))


_MISSING = object()


def _value_at(obj: Any, path: FieldPath) -> Any:
    """The value at a field path, or ``_MISSING``; for ``.``/``v:`` elements, presence only."""
    current = obj
    for element in path:
        if element == _ITEM_SELF:
            return True
        if element.startswith("f:"):
            if not isinstance(current, dict) or element[2:] not in current:
                return _MISSING
            current = current[element[2:]]
        elif element.startswith("k:"):
            wanted = json.loads(element[2:])
            if not isinstance(current, list):
                return _MISSING
            found = _find_item(current, wanted)
            if found is None:
                return _MISSING
            current = current[found]
        elif element.startswith("v:"):
            if not isinstance(current, list) or json.loads(element[2:]) not in current:
                return _MISSING
            return True
        else:
            return _MISSING
    return current


def _find_item(items: list[Any], wanted: Mapping[str, Any]) -> int | None:
    for index, item in enumerate(items):
        if isinstance(item, dict) and all(item.get(k) == v for k, v in wanted.items()):
            return index
    return None


def format_field_path(path: FieldPath) -> str:
    """Render a path as structured-merge-diff does: `.spec.containers[name="c"].image`."""
    parts: list[str] = []
    for element in path:
        if element == _ITEM_SELF:
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
        if not path or path[-1] == _ITEM_SELF:
            continue
        node = tree
        for element in path:
            node = node[element]
        if node and _ITEM_SELF not in node:
            node[_ITEM_SELF] = {}
    return tree


def parse_fields_v1(tree: Mapping[str, Any]) -> set[FieldPath]:
    """Decode a FieldsV1 tree back into paths (the inverse of :func:`fields_v1`)."""
    out: set[FieldPath] = set()

    def walk(node: Mapping[str, Any], prefix: FieldPath) -> None:
        if not node and prefix:
            out.add(prefix)
            return
        for element, child in node.items():
            if element == _ITEM_SELF:
                is_item = bool(prefix) and not prefix[-1].startswith("f:")
                out.add((*prefix, _ITEM_SELF) if is_item else prefix)
                continue
            walk(child if isinstance(child, Mapping) else {}, (*prefix, element))

    walk(tree, ())
    return out


# --------------------------------------------------------------------------------------------
# managedFields bookkeeping
# --------------------------------------------------------------------------------------------


class _Entry:
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
        entry["fieldsV1"] = fields_v1(self.paths)
        if self.subresource:
            entry["subresource"] = self.subresource
        return entry


def _decode_entries(obj: Mapping[str, Any] | None) -> list[_Entry]:
    if not obj:
        return []
    raw = (obj.get("metadata") or {}).get("managedFields") or []
    entries: list[_Entry] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        tree = item.get("fieldsV1") or {}
        entries.append(
            _Entry(
                manager=str(item.get("manager", "")),
                operation=str(item.get("operation", "Update")),
                api_version=str(item.get("apiVersion", "")),
                time=item.get("time"),
                subresource=str(item.get("subresource", "")),
                paths=parse_fields_v1(tree) if isinstance(tree, dict) else set(),
            )
        )
    return entries


def _with_entries(obj: dict[str, Any], entries: list[_Entry]) -> dict[str, Any]:
    result = dict(obj)
    metadata = dict(result.get("metadata") or {})
    live_entries = [entry.encode() for entry in entries if entry.paths]
    if live_entries:
        metadata["managedFields"] = live_entries
    else:
        metadata.pop("managedFields", None)
    result["metadata"] = metadata
    return result


def _without_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    result = dict(obj)
    metadata = dict(result.get("metadata") or {})
    metadata.pop("managedFields", None)
    result["metadata"] = metadata
    return result


def _with_raw_managed_fields(
    obj: Mapping[str, Any], source: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``obj`` carrying ``source``'s managedFields exactly as stored."""
    result = _without_managed_fields(obj)
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
        return _with_entries(new, [])
    old_values = leaf_values(old, ignore_fields) if old else {}
    new_values = leaf_values(new, ignore_fields)
    changed = {
        path
        for path, value in new_values.items()
        if path not in old_values or old_values[path] != value
    }
    removed = old_values.keys() - new_values.keys()
    entries = _decode_entries(old)
    if not changed and not removed:
        return _with_raw_managed_fields(new, old)
    identity = (manager, operation, subresource)
    mine = next((entry for entry in entries if entry.identity == identity), None)
    for entry in entries:
        entry.paths -= removed
        if entry is not mine:
            entry.paths -= changed
    if changed:
        if mine is None:
            mine = _Entry(manager, operation, "", None, subresource, set())
            entries.append(mine)
        mine.paths |= changed
        mine.time = now
        mine.api_version = str(new.get("apiVersion", ""))
    return _with_entries(new, entries)


# --------------------------------------------------------------------------------------------
# Server-side apply (SSA-lite)
# --------------------------------------------------------------------------------------------

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
        kind, key = _effective_strategy(fields, current, config)
        if kind == _SET:
            return _merge_ordered(
                current, config, _compact, lambda _live, item: copy.deepcopy(item)
            )
        if kind == _MERGE:
            return _merge_ordered(
                current,
                config,
                lambda item: _compact(item[key]),
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


def _conflict_message(conflicts: list[tuple[_Entry, FieldPath]]) -> str:
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
    if path[-1] == _ITEM_SELF:
        container_path, element = path[:-2], path[-2]
    else:
        container_path, element = path[:-1], path[-1]
    container = _value_at(obj, container_path) if container_path else obj
    if element.startswith("f:") and isinstance(container, dict):
        container.pop(element[2:], None)
    elif element.startswith("k:") and isinstance(container, list):
        index = _find_item(container, json.loads(element[2:]))
        if index is not None:
            del container[index]
    elif element.startswith("v:") and isinstance(container, list):
        value = json.loads(element[2:])
        container[:] = [item for item in container if item != value]


def _prune_empty_parents(obj: dict[str, Any], path: FieldPath, owned: set[FieldPath]) -> None:
    """Drop maps and lists a removal left empty, below the top level, unless someone owns them."""
    parent = path[:-2] if path[-1] == _ITEM_SELF else path[:-1]
    while len(parent) > 1 and parent[-1].startswith("f:") and parent not in owned:
        value = _value_at(obj, parent)
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
    scope = path[:-1] if path[-1] == _ITEM_SELF else path
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
    entries = _decode_entries(live)
    if live and not entries:
        existing = field_paths(live, ignore_fields)
        if existing:
            entries.append(
                _Entry(
                    BEFORE_FIRST_APPLY, "Update", str(live.get("apiVersion", "")), now, "", existing
                )
            )

    identity = (manager, "Apply", subresource)
    mine = next((entry for entry in entries if entry.identity == identity), None)
    previously_applied = set(mine.paths) if mine else set()

    conflicts: list[tuple[_Entry, FieldPath]] = []
    for entry in entries:
        if entry.manager == manager:
            continue
        for path in sorted(entry.paths & applied_paths):
            live_value = _value_at(base, path)
            if live_value is not _MISSING and live_value != _value_at(config, path):
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
        and _without_managed_fields(merged) == _without_managed_fields(live)
    )
    if unchanged:
        # Upstream refreshes an entry's time only when the object changed: a repeated apply
        # is a no-op that keeps the resourceVersion.
        return _with_raw_managed_fields(merged, live)
    if mine is None:
        mine = _Entry(manager, "Apply", "", None, subresource, set())
        entries.append(mine)
    mine.paths = applied_paths
    mine.time = now
    mine.api_version = str(applied.get("apiVersion", "") or (live or {}).get("apiVersion", ""))
    return _with_entries(merged, entries)
