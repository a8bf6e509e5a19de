"""The instants a user types: ``--since``, ``--until`` and ``--at`` (pure; the clock is passed in).

Two spellings, because an operator debugging an incident types either:

- RFC 3339 with a time zone, exactly as the log prints it (``2026-05-04T10:03:01.002Z``,
  ``2026-05-04 12:03:01+02:00``). Fractions longer than microseconds (Kubernetes and NATS print
  nanoseconds) are cut to microseconds, which is Python's resolution. A timestamp without a
  zone is refused rather than guessed: the log is in UTC and a local-time guess would silently
  shift a replay by hours.
- A duration ago, relative to ``now``: ``90s``, ``10m``, ``1h30m``, ``1.5h``, ``2d``, ``1w``,
  ``500ms``, optionally followed by ``ago``; and ``now`` itself.

Every failure is a :class:`InstantError` whose message says what was expected, so the CLI can
print it as it is and exit 2.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = ["InstantError", "format_instant", "parse_duration", "parse_instant"]

_UNIT_SECONDS: Final = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86_400.0,
    "w": 604_800.0,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+")
_RFC3339 = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<time>\d{2}:\d{2}:\d{2})"
    r"(?:\.(?P<fraction>\d+))?(?P<zone>[Zz]|[+-]\d{2}:\d{2})?"
)

_EXPECTED: Final = (
    "expected RFC 3339 with a time zone (2026-05-04T10:03:01Z), "
    "a duration ago (90s, 10m, 1h30m, 2d) or 'now'"
)


class InstantError(ValueError):
    """Text that is neither an RFC 3339 timestamp nor a duration ago."""


def parse_duration(text: str) -> timedelta:
    """``90s``, ``10m``, ``1h30m``, ``1.5h``, ``500ms``… as a timedelta."""
    compact = text.strip().lower()
    if not _DURATION.fullmatch(compact):
        raise InstantError(f"{text!r} is not a duration (e.g. 90s, 10m, 1h30m, 2d)")
    seconds = sum(
        float(amount) * _UNIT_SECONDS[unit] for amount, unit in _DURATION_PART.findall(compact)
    )
    return timedelta(seconds=seconds)


def parse_instant(text: str, *, now: datetime) -> datetime:
    """The instant ``text`` names, as an aware UTC datetime; ``now`` anchors relative forms."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    stripped = text.strip()
    if not stripped:
        raise InstantError(f"an empty time; {_EXPECTED}")
    if stripped.lower() == "now":
        return now.astimezone(UTC)
    relative = stripped.lower().removesuffix("ago").strip()
    if _DURATION.fullmatch(relative):
        return (now - parse_duration(relative)).astimezone(UTC)
    match = _RFC3339.fullmatch(stripped)
    if match is None:
        raise InstantError(f"cannot read the time {text!r}; {_EXPECTED}")
    if match.group("zone") is None:
        raise InstantError(
            f"the time {text!r} has no time zone; add Z for UTC (the log's zone) or +HH:MM"
        )
    fraction = (match.group("fraction") or "")[:6]
    zone = match.group("zone").upper().replace("Z", "+00:00")
    normalized = f"{match.group('date')}T{match.group('time')}"
    if fraction:
        normalized += "." + fraction.ljust(6, "0")
    try:
        parsed = datetime.fromisoformat(normalized + zone)
    except ValueError as error:
        raise InstantError(f"the time {text!r} is not a valid date and time ({error})") from None
    return parsed.astimezone(UTC)


def format_instant(instant: datetime) -> str:
    """RFC 3339 in UTC with milliseconds: how every history command prints a time."""
    utc = instant.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def format_age(age: timedelta) -> str:
    """kubectl's style: ``45s``, ``12m``, ``3h``, ``4d``."""
    seconds = int(age.total_seconds())
    if seconds < 0:
        return "-"
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= size):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
