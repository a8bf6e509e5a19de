"""metav1.Status error bodies, built exactly as apimachinery's ``api/errors/errors.go`` builds them.

kubernetes_asyncio exposes only the HTTP status and the body of a failed call, so a controller
tells AlreadyExists from Conflict (both 409) or Invalid from a bad patch by ``body.reason`` and
``body.details``. Every builder here therefore mirrors one upstream constructor, including the
odd bits that clients have come to rely on: ``details.kind`` holds the *plural resource* for
NotFound/AlreadyExists/Conflict ("Yes we set Kind field to resource"), and Invalid joins several
causes as ``[a, b]`` the way ``ErrorList.ToAggregate`` prints them.

Raising :class:`StatusError` anywhere inside a request handler turns into that Status body; the
server never lets any other exception reach the client as a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Cause",
    "StatusError",
    "already_exists",
    "bad_request",
    "conflict",
    "expired",
    "field_duplicate",
    "field_forbidden",
    "field_invalid",
    "field_not_supported",
    "field_required",
    "field_too_long",
    "forbidden",
    "go_value",
    "internal_error",
    "invalid",
    "method_not_supported",
    "not_acceptable",
    "not_found",
    "path_not_found",
    "qualified_resource",
    "service_unavailable",
    "success_status",
    "timeout",
    "too_large_resource_version",
    "too_many_requests",
    "unsupported_media_type",
]


def qualified_resource(group: str, plural: str) -> str:
    """``schema.GroupResource.String()``: ``pods`` for core, ``jobs.batch`` otherwise."""
    return f"{plural}.{group}" if group else plural


@dataclass(frozen=True)
class Cause:
    """One ``StatusCause``: a field error of an Invalid response, or a conflict of an apply.

    ``message`` is the error body without the field prefix (``Invalid value: 5: must be ...``),
    as ``field.Error.ErrorBody()`` produces it; :meth:`render` adds the prefix back for the
    top-level message.
    """

    reason: str
    message: str
    field: str = ""

    def render(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message

    def to_json(self) -> dict[str, str]:
        out = {"reason": self.reason, "message": self.message}
        if self.field:
            out["field"] = self.field
        return out


class StatusError(Exception):
    """A request failed with a metav1.Status body; ``headers`` go out with it (Retry-After)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        status_metadata: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}
        self.status_metadata = status_metadata or {}

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.status_metadata),
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            out["reason"] = self.reason
        if self.details is not None:
            out["details"] = self.details
        out["code"] = self.code
        return out

    def __repr__(self) -> str:
        return f"StatusError({self.code}, {self.reason!r}, {self.message!r})"


def _details(name: str, group: str, kind: str, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if name:
        out["name"] = name
    if group:
        out["group"] = group
    if kind:
        out["kind"] = kind
    out.update({k: v for k, v in extra.items() if v not in (None, "", [])})
    return out


def not_found(group: str, plural: str, name: str) -> StatusError:
    qualified = qualified_resource(group, plural)
    message = f'{qualified} "{name}" not found' if name else f"{qualified} not found"
    return StatusError(404, "NotFound", message, _details(name, group, plural))


def path_not_found() -> StatusError:
    """What the server answers for a path it does not serve (an unknown group or resource)."""
    return StatusError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(group: str, plural: str, name: str) -> StatusError:
    qualified = qualified_resource(group, plural)
    return StatusError(
        409, "AlreadyExists", f'{qualified} "{name}" already exists', _details(name, group, plural)
    )


def conflict(group: str, plural: str, name: str, why: str) -> StatusError:
    """NewConflict; ``plural`` is whatever the caller's GroupResource holds (a Kind, sometimes)."""
    qualified = qualified_resource(group, plural)
    return StatusError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
        _details(name, group, plural),
    )


def go_value(value: Any) -> str:
    """Render a value the way ``field.Invalid`` prints it (``%#v``-ish for scalars, JSON else)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def field_invalid(field: str, value: Any, detail: str, *, raw_value: str | None = None) -> Cause:
    shown = raw_value if raw_value is not None else go_value(value)
    message = f"Invalid value: {shown}" + (f": {detail}" if detail else "")
    return Cause("FieldValueInvalid", message, field)


def field_required(field: str, detail: str = "") -> Cause:
    return Cause("FieldValueRequired", "Required value" + (f": {detail}" if detail else ""), field)


def field_forbidden(field: str, detail: str) -> Cause:
    return Cause("FieldValueForbidden", f"Forbidden: {detail}", field)


def field_duplicate(field: str, value: Any) -> Cause:
    return Cause("FieldValueDuplicate", f"Duplicate value: {go_value(value)}", field)


def field_too_long(field: str, value: Any, limit: int) -> Cause:
    return Cause(
        "FieldValueTooLong",
        f"Too long: may not be more than {limit} bytes",
        field,
    )


def field_not_supported(field: str, value: Any, supported: Sequence[str]) -> Cause:
    quoted = ", ".join(json.dumps(s) for s in supported)
    return Cause(
        "FieldValueNotSupported",
        f"Unsupported value: {go_value(value)}: supported values: {quoted}",
        field,
    )


def invalid(group: str, kind: str, name: str, causes: Sequence[Cause]) -> StatusError:
    """NewInvalid: 422 with ``Kind.group "name" is invalid: <aggregate>``."""
    qualified_kind = f"{kind}.{group}" if group else kind
    rendered = [c.render() for c in causes]
    if not rendered:
        message = f'{qualified_kind} "{name}" is invalid'
    elif len(rendered) == 1:
        message = f'{qualified_kind} "{name}" is invalid: {rendered[0]}'
    else:
        message = f'{qualified_kind} "{name}" is invalid: [{", ".join(rendered)}]'
    details = _details(name, group, kind, causes=[c.to_json() for c in causes])
    return StatusError(422, "Invalid", message, details)


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def forbidden(group: str, plural: str, name: str, why: str, **extra: Any) -> StatusError:
    qualified = qualified_resource(group, plural)
    if not qualified:
        message = f"forbidden: {why}"
    elif not name:
        message = f"{qualified} is forbidden: {why}"
    else:
        message = f'{qualified} "{name}" is forbidden: {why}'
    return StatusError(403, "Forbidden", message, _details(name, group, plural, **extra))


def method_not_supported(group: str, plural: str, action: str) -> StatusError:
    qualified = qualified_resource(group, plural)
    return StatusError(
        405,
        "MethodNotAllowed",
        f'{action} is not supported on resources of kind "{qualified}"',
        _details("", group, plural),
    )


def expired(message: str) -> StatusError:
    return StatusError(410, "Expired", message)


def timeout(message: str, retry_after_seconds: int = 0, **extra: Any) -> StatusError:
    details: dict[str, Any] = dict(extra)
    if retry_after_seconds:
        details["retryAfterSeconds"] = retry_after_seconds
    return StatusError(504, "Timeout", f"Timeout: {message}", details or None)


def too_large_resource_version(requested: int, current: int) -> StatusError:
    """storage.NewTooLargeResourceVersionError: a 504 the client may retry after a second."""
    return timeout(
        f"Too large resource version: {requested}, current: {current}",
        1,
        causes=[{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
    )


def too_many_requests(message: str, retry_after_seconds: int) -> StatusError:
    return StatusError(
        429,
        "TooManyRequests",
        message,
        {"retryAfterSeconds": retry_after_seconds} if retry_after_seconds else None,
        headers={"Retry-After": str(retry_after_seconds)} if retry_after_seconds else None,
    )


def service_unavailable(message: str) -> StatusError:
    return StatusError(503, "ServiceUnavailable", message)


def unsupported_media_type(accepted: Sequence[str]) -> StatusError:
    return StatusError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def not_acceptable(message: str) -> StatusError:
    return StatusError(406, "NotAcceptable", message)


def internal_error(why: str) -> StatusError:
    return StatusError(
        500,
        "InternalError",
        f"Internal error occurred: {why}",
        {"causes": [{"message": why}]},
    )


def success_status(group: str, plural: str, name: str, uid: str) -> dict[str, Any]:
    """What ``finalizeDelete`` returns for stores that do not return the deleted object."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": _details(name, group, plural, uid=uid),
    }
