"""The two patches that need no knowledge of the kind: JSON merge patch and JSON patch.

apiserver's ``jsonPatcher`` handles both, for every kind, custom resources included:

- ``application/merge-patch+json`` → :func:`merge_patch`, RFC 7386: maps merge, ``null``
  deletes, everything else (lists included) replaces. A body that is not a map is a 422 with
  Go's decoder message; a ``null`` body is a 400, as evanphx/json-patch makes it (for a JSON
  patch, ``null`` is an empty patch).
- ``application/json-patch+json`` → :func:`json_patch`, RFC 6902 through the ``jsonpatch``
  package, one operation at a time so that the error names the operation that failed. A body
  that is not a list is a 400 with Go's decoder message; more than
  :data:`MAX_JSON_PATCH_OPERATIONS` operations is a 413; a failing operation (a ``test``
  included) is a 422. Upstream's 422 message is only "the server rejected our request due to an
  error in our request"; we append what went wrong, since a stand-in exists to be debugged
  against.

Both take ``in_place=True`` on the write path, which owns the target and the body and so saves
the deep copies.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch
import jsonpointer

from api.patching.errors import PatchError, go_json_type, not_an_object
from api.patching.merge import apply_merge_patch

__all__ = ["MAX_JSON_PATCH_OPERATIONS", "json_patch", "merge_patch"]


# apiserver handlers/patch.go: maxJSONPatchOperations.
MAX_JSON_PATCH_OPERATIONS = 10000

_REJECTED = "the server rejected our request due to an error in our request"


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
        raise not_an_object(patch)
    if not in_place:
        target, patch = copy.deepcopy(target), copy.deepcopy(patch)
    result: dict[str, Any] = apply_merge_patch(target, patch, in_place=True)
    return result


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
            f"json: cannot unmarshal {go_json_type(ops)} into Go value of type jsonpatch.Patch",
        )
    for op in ops:
        if not isinstance(op, dict):
            raise PatchError(
                400,
                "BadRequest",
                f"json: cannot unmarshal {go_json_type(op)} into Go value of type "
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
        raise not_an_object(document)
    return document
