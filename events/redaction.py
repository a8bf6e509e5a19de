"""The events external subscribers may read: a copy of each observed change with its secrets
taken out, on ``sandbus.public.events.<kind>.<namespace>.<name>``.

The event log carries whole objects, because the workers act on them: a claim's ``env`` values
are what its cold Sandbox is made with. A tool outside the control plane (a dashboard, an
audit sink) needs the changes, not the values, so the watcher can publish a redacted copy of
every event beside the log (``SANDBUS_WATCHER_PUBLIC_EVENTS``), on core NATS subjects an
``observer`` user may subscribe to and nothing else. Redacted, wherever it appears in the
object:

- the ``value`` of every entry of an ``env`` list (a container's, a claim's, a task's): the
  names stay, so a reader still sees which variables were set; ``valueFrom`` stays (it names a
  Secret, it does not hold one);
- ``data`` and ``stringData`` of a Secret;
- the ``kubectl.kubernetes.io/last-applied-configuration`` annotation, which repeats the
  whole spec, env values included.

Redacted values read :data:`REDACTED`. The rest of the event (id, type, time, trace context,
resourceVersion) is the log's own, so a reader can match a copy to the log entry an operator
sees.
"""

from __future__ import annotations

from typing import Any, Final

from events.subjects import EVENTS, ROOT

__all__ = ["PUBLIC_EVENTS", "REDACTED", "public_subject", "redacted_object"]

REDACTED: Final = "<redacted>"
PUBLIC_EVENTS: Final = f"{ROOT}.public.events"
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"


def public_subject(event_subject: str) -> str:
    """Where the redacted copy of an event published on ``event_subject`` goes."""
    if not event_subject.startswith(EVENTS + "."):
        raise ValueError(f"{event_subject!r} is not an event subject")
    return PUBLIC_EVENTS + event_subject[len(EVENTS) :]


def _redact(value: Any) -> Any:
    if isinstance(value, list):
        return [_redact(item) for item in value]
    if not isinstance(value, dict):
        return value
    result: dict[str, Any] = {}
    for key, item in value.items():
        if key == "env" and isinstance(item, list):
            result[key] = [
                {**entry, "value": REDACTED}
                if isinstance(entry, dict) and "value" in entry
                else _redact(entry)
                for entry in item
            ]
        elif key == "annotations" and isinstance(item, dict) and LAST_APPLIED in item:
            result[key] = {**item, LAST_APPLIED: REDACTED}
        else:
            result[key] = _redact(item)
    return result


def redacted_object(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with its secrets replaced by :data:`REDACTED` (a new object)."""
    result: dict[str, Any] = _redact(obj)
    if obj.get("kind") == "Secret":
        for field in ("data", "stringData"):
            if isinstance(result.get(field), dict):
                result[field] = dict.fromkeys(result[field], REDACTED)
    return result
