"""How a patch that cannot be applied is reported: :class:`PatchError` and :class:`ApplyConflict`.

Both carry what a ``metav1.Status`` needs (``code``, ``reason``, ``message``; a conflict also
its ``causes``), so the HTTP layer only copies them into the response. Many of the messages are
those of Go's ``encoding/json`` decoder, because that is what a real API server answers when a
body does not decode into the type it expects (``json: cannot unmarshal array into Go value of
type map[string]interface {}``); :func:`go_json_type` names a value the way that decoder does.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ApplyConflict", "PatchError", "go_json_type", "not_an_object"]


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


def go_json_type(value: Any) -> str:
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


def not_an_object(result: Any) -> PatchError:
    """What the server says when a patch turned the object into something that is not a map."""
    body = json.dumps(result, separators=(",", ":"))
    go_type = go_json_type(result)
    return PatchError(
        422,
        "Invalid",
        f' "" is invalid: patch: Invalid value: {json.dumps(body)}: json: cannot unmarshal '
        f"{go_type} into Go value of type map[string]interface {{}}",
    )
