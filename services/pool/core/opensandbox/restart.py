"""The Pool's ``Restart`` recycle strategy as one pure step: :func:`decide_restart`
(docs/opensandbox.md §2.5; upstream ``defaultRestartHandler.TryRestart`` in
``recycle/restart/restart_default.go`` and ``RestartRecycler`` in ``recycle/restart.go``).

A Pod its sandbox gave back is restarted in place instead of replaced: the restart command
(``kill 1`` unless configured) is executed in each of its containers, the kubelet restarts a
container whose PID 1 exits, and the Pod goes back to the pool once every container it recorded
runs again under a new containerID. The progress lives on the Pod, in the annotation
``sandbox.opensandbox.io/restart-record`` (:class:`~api.opensandbox.RestartRecord`), so it
survives controller restarts and needs no memory here. Each call decides, in upstream's order:

1. No Pod (or one being deleted, which the Pool controller hands in as nil): ``Succeeded``.
2. A Pod not ``Running``: upstream returns an error that fails the whole Pool pass; here the
   step is :attr:`RestartState.POD_NOT_RUNNING` with the message, for the caller to report.
3. The settings are read from the Pool's ``sandbox.opensandbox.io/restart-config`` annotation on
   every call (:func:`parse_restart_config`), so an edit applies to restarts under way.
4. No record, one that does not decode, or one for another sandbox (its ``id``): a new record
   of every *running*, non-blacklisted container and its current containerID
   (:func:`build_restart_record`), persisted whatever follows.
5. ``Succeeded`` once every recorded container runs under a different containerID
   (:func:`evaluate_restart`; a record of no container has succeeded at once).
6. ``retryCount ≥ maxRetries``: ``Failed``; the Pool then deletes the Pod (``need_delete``).
7. The last attempt is less than ``retryInterval`` ago: ``Restarting``, nothing to do.
8. Otherwise an attempt: the command in every recorded container, ``retryCount + 1`` and
   ``lastRetryTime = now`` in the record.

What the shell does with a :class:`RestartStep`: run each of its ``execs`` (the exec
subresource, :data:`EXEC_TIMEOUT` seconds each, as upstream), log a failed one and go on, and
merge-patch the Pod with :meth:`RestartStep.record_patch`. The record is computed before any
exec runs and does not depend on how they went, so a failed exec still counts as an attempt:
``retryInterval`` and ``maxRetries`` bound the attempts even when exec never works, as
upstream's comment requires. Upstream persists after the execs; a shell may persist first, which
counts an attempt that a crash cut short rather than repeating one whose command already ran.

Wire formats follow Go's, since upstream controllers and ours read each other's annotations:

- ``retryInterval`` is a Go duration string (``"30s"``, ``"1m30s"``, ``"500ms"``), parsed like
  ``time.ParseDuration`` (:func:`parse_go_duration`); a missing or unparsable one is 30 s.
  ``maxRetries`` is an int32, and a value ≤ 0 means the default 3. An empty ``restartCommand``
  means ``["kill", "1"]``.
- Decoding mirrors ``encoding/json``: object keys match field names exactly or else
  case-insensitively; ``null`` leaves a field as it was; a config field of the wrong type is
  skipped while the others apply (an element of the wrong type in a list becomes ``""``), and a
  config that is not JSON at all gives every default. A record with any field of the wrong type
  does not decode, and is started over.
- Times are RFC 3339 in UTC with whole seconds (``time.Now().Format(time.RFC3339)`` on a UTC
  host). A ``lastRetryTime`` that does not parse does not hold the next attempt back.
- The record is written as ``json.Marshal`` writes ``restartInfo``: fields in declaration order,
  ``lastRetryTime`` and ``retryCount`` omitted while empty, container names sorted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Final, Literal, NamedTuple

import msgspec

from api.opensandbox import ANNOTATION_RESTART_CONFIG, ANNOTATION_RESTART_RECORD, RestartRecord

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_RESTART_COMMAND",
    "DEFAULT_RETRY_INTERVAL",
    "EXEC_TIMEOUT",
    "ContainerExec",
    "RestartSettings",
    "RestartState",
    "RestartStep",
    "build_restart_record",
    "decide_restart",
    "encode_restart_record",
    "evaluate_restart",
    "load_restart_record",
    "parse_go_duration",
    "parse_restart_config",
]

DEFAULT_RESTART_COMMAND: Final = ("kill", "1")
"""SIGTERM to PID 1: the container's main process must handle it and exit (a bare ``sleep`` as
PID 1 ignores it, and the container never restarts)."""
DEFAULT_RETRY_INTERVAL: Final = timedelta(seconds=30)
DEFAULT_MAX_RETRIES: Final = 3
EXEC_TIMEOUT: Final = 10.0
"""Seconds one exec of the restart command may take (upstream ``DefaultExecTimeout``)."""

_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class RestartState(StrEnum):
    SUCCEEDED = "Succeeded"
    RESTARTING = "Restarting"
    FAILED = "Failed"
    POD_NOT_RUNNING = "PodNotRunning"
    """Not an upstream state: upstream returns an error here, which fails the Pool's pass."""


@dataclass(frozen=True)
class RestartSettings:
    """The Pool's restart configuration with every default applied."""

    blacklist: frozenset[str] = frozenset()
    retry_interval: timedelta = DEFAULT_RETRY_INTERVAL
    max_retries: int = DEFAULT_MAX_RETRIES
    restart_command: tuple[str, ...] = DEFAULT_RESTART_COMMAND


class ContainerExec(NamedTuple):
    """Execute ``command`` in ``container`` of the Pod (stdout and stderr, no stdin, no TTY)."""

    container: str
    command: tuple[str, ...]


@dataclass(frozen=True)
class RestartStep:
    """What one call decided: the state, the record to persist, the commands to run now."""

    state: RestartState
    message: str
    record: str | None = None
    """The new value of the Pod's restart-record annotation; None: leave it as it is."""
    execs: tuple[ContainerExec, ...] = ()
    retry_count: int = 0
    start_time: str | None = None

    @property
    def need_delete(self) -> bool:
        """Restarting gave up: the Pool deletes the Pod instead (upstream ``NeedDelete``)."""
        return self.state is RestartState.FAILED

    @property
    def recycle_state(self) -> Literal["Succeeded", "Recycling", "Failed"] | None:
        """The recycle state ``RestartRecycler`` reports (None: the pass fails, step 2)."""
        if self.state is RestartState.SUCCEEDED:
            return "Succeeded"
        if self.state is RestartState.FAILED:
            return "Failed"
        if self.state is RestartState.RESTARTING:
            return "Recycling"
        return None

    def record_patch(self) -> dict[str, Any] | None:
        """The JSON merge patch of the Pod that persists :attr:`record` (None: nothing to write)."""
        if self.record is None:
            return None
        return {"metadata": {"annotations": {ANNOTATION_RESTART_RECORD: self.record}}}


# --- the step ----------------------------------------------------------------------------


def decide_restart(
    pod: Mapping[str, Any] | None,
    pool: Mapping[str, Any] | None,
    sandbox_name: str,
    now: datetime,
) -> RestartStep:
    """One pass of the restart state machine for ``pod``, released by ``sandbox_name``."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    metadata = _mapping((pod or {}).get("metadata"))
    if pod is None or metadata.get("deletionTimestamp"):
        return RestartStep(RestartState.SUCCEEDED, "restart recycler: pod is deleted")
    phase = _mapping(pod.get("status")).get("phase") or ""
    if phase != "Running":
        where = f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"
        return RestartStep(
            RestartState.POD_NOT_RUNNING, f"pod {where} is not running (phase: {phase})"
        )
    settings = parse_restart_config(_mapping(_mapping(pool).get("metadata")).get("annotations"))

    written: str | None = None
    record = load_restart_record(pod)
    if record is None or record.id != sandbox_name:
        record = build_restart_record(pod, sandbox_name, settings, now)
        written = encode_restart_record(record)

    def step(state: RestartState, message: str) -> RestartStep:
        return RestartStep(
            state,
            message,
            record=written,
            retry_count=record.retry_count,
            start_time=record.start_time,
        )

    if evaluate_restart(pod, record) is RestartState.SUCCEEDED:
        return step(RestartState.SUCCEEDED, "restart already succeeded")
    if record.retry_count >= settings.max_retries:
        return step(RestartState.FAILED, f"max retries ({settings.max_retries}) exceeded")
    last_retry = _parse_rfc3339(record.last_retry_time or "")
    if last_retry is not None and now - last_retry < settings.retry_interval:
        after = _rfc3339(last_retry + settings.retry_interval)
        return step(
            RestartState.RESTARTING, f"retry interval not elapsed, next retry after {after}"
        )

    retried = msgspec.structs.replace(
        record, last_retry_time=_rfc3339(now), retry_count=record.retry_count + 1
    )
    names = sorted(record.containers)
    return RestartStep(
        RestartState.RESTARTING,
        f"retry #{retried.retry_count} sent to {len(names)} container(s), waiting for restart",
        record=encode_restart_record(retried),
        execs=tuple(ContainerExec(name, settings.restart_command) for name in names),
        retry_count=retried.retry_count,
        start_time=retried.start_time,
    )


def evaluate_restart(pod: Mapping[str, Any], record: RestartRecord) -> RestartState:
    """``Succeeded`` when every recorded container runs under a containerID other than the
    recorded one; else ``Restarting`` (not restarted yet, not running again yet, or gone)."""
    current = {status.get("name"): status for status in _container_statuses(pod)}
    for name, container_id in record.containers.items():
        status = current.get(name)
        if status is None or status.get("containerID", "") == container_id:
            return RestartState.RESTARTING
        if not _running(status):
            return RestartState.RESTARTING
    return RestartState.SUCCEEDED


def build_restart_record(
    pod: Mapping[str, Any], sandbox_name: str, settings: RestartSettings, now: datetime
) -> RestartRecord:
    """A fresh record: every running container not in the blacklist, with its containerID."""
    containers = {
        str(status.get("name") or ""): str(status.get("containerID") or "")
        for status in _container_statuses(pod)
        if _running(status) and status.get("name") not in settings.blacklist
    }
    return RestartRecord(id=sandbox_name, start_time=_rfc3339(now), containers=containers)


# --- the annotations ---------------------------------------------------------------------


def parse_restart_config(annotations: Mapping[str, Any] | None) -> RestartSettings:
    """The settings in a Pool's annotations; whatever is missing or unusable is the default."""
    raw = (annotations or {}).get(ANNOTATION_RESTART_CONFIG)
    fields: dict[str, Any] = {}
    if isinstance(raw, str):
        document = _decode(raw)
        fields = _go_fields(document, _CONFIG_FIELDS) if isinstance(document, dict) else {}
    blacklist = _go_strings(fields.get("blacklist"))
    interval = _go_string(fields.get("retryInterval"))
    max_retries = _go_int(fields.get("maxRetries"), _INT32)
    command = _go_strings(fields.get("restartCommand"))
    retry_interval = parse_go_duration(interval) if isinstance(interval, str) else None
    return RestartSettings(
        blacklist=frozenset(blacklist) if isinstance(blacklist, list) else frozenset(),
        retry_interval=DEFAULT_RETRY_INTERVAL if retry_interval is None else retry_interval,
        max_retries=(
            max_retries if isinstance(max_retries, int) and max_retries > 0 else DEFAULT_MAX_RETRIES
        ),
        restart_command=(
            tuple(command) if isinstance(command, list) and command else DEFAULT_RESTART_COMMAND
        ),
    )


def load_restart_record(pod: Mapping[str, Any]) -> RestartRecord | None:
    """The Pod's restart record; None when it has none or it does not decode."""
    annotations = _mapping(_mapping(pod.get("metadata")).get("annotations"))
    raw = annotations.get(ANNOTATION_RESTART_RECORD)
    if not isinstance(raw, str):
        return None
    document = _decode(raw)
    if document is None and raw.strip() == "null":
        document = {}  # Go decodes null into a zero record without an error
    if not isinstance(document, dict):
        return None
    fields = _go_fields(document, _RECORD_FIELDS)
    sandbox = _go_string(fields.get("id"))
    start_time = _go_string(fields.get("startTime"))
    containers = _go_string_map(fields.get("containers"))
    last_retry_time = _go_string(fields.get("lastRetryTime"))
    retry_count = _go_int(fields.get("retryCount"), _INT64)
    if (
        isinstance(sandbox, _WrongType)
        or isinstance(start_time, _WrongType)
        or isinstance(containers, _WrongType)
        or isinstance(last_retry_time, _WrongType)
        or isinstance(retry_count, _WrongType)
    ):
        return None
    return RestartRecord(
        id=sandbox or "",
        start_time=start_time or "",
        containers=containers or {},
        last_retry_time=last_retry_time or None,
        retry_count=retry_count or 0,
    )


def encode_restart_record(record: RestartRecord) -> str:
    """The annotation value, as Go's ``json.Marshal`` writes the record (keys of maps sorted)."""
    return msgspec.json.encode(record, order="deterministic").decode()


# --- Go's time formats --------------------------------------------------------------------

_DURATION_UNITS: Final = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_NUMBER = re.compile(r"([0-9]*)(?:\.([0-9]*))?")
_UNIT = re.compile(r"[^0-9.]*")
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.(\d+))?(?:Z|[+-]\d{2}:\d{2})")


def parse_go_duration(text: str) -> timedelta | None:
    """``text`` as Go's ``time.ParseDuration`` reads it (``"1h30m"``, ``"1.5s"``, ``"-2m"``,
    ``"0"``), to the microsecond; None where Go returns an error."""
    rest = text
    negative = rest[:1] == "-"
    if rest[:1] in ("-", "+"):
        rest = rest[1:]
    if rest == "0":
        return timedelta(0)
    if not rest:
        return None
    total = 0
    while rest:
        number = _NUMBER.match(rest)
        assert number is not None  # both groups may be empty
        whole, fraction = number.group(1), number.group(2)
        if not whole and not fraction:
            return None  # no digits (".s"), or not a number at all
        rest = rest[number.end() :]
        unit_match = _UNIT.match(rest)
        assert unit_match is not None
        unit = _DURATION_UNITS.get(unit_match.group())
        if unit is None:
            return None  # a missing or unknown unit
        rest = rest[unit_match.end() :]
        value = int(whole or "0")
        if value > (1 << 63) // unit:
            return None
        value *= unit
        if fraction:
            # Go keeps the digits that fit in 63 bits and scales them in floating point.
            kept = _fraction_digits(fraction)
            digits = int(fraction[:kept] or "0")
            if digits:
                value += int(float(digits) * (float(unit) / 10.0**kept))
                if value > 1 << 63:
                    return None
        total += value
        if total > 1 << 63:
            return None
    if not negative and total > (1 << 63) - 1:
        return None
    nanoseconds = -total if negative else total
    return timedelta(microseconds=nanoseconds // 1000)


def _fraction_digits(fraction: str) -> int:
    """How many leading digits of a fraction Go's ``leadingFraction`` keeps."""
    value = 0
    for index, digit in enumerate(fraction):
        if value > ((1 << 63) - 1) // 10:
            return index
        candidate = value * 10 + int(digit)
        if candidate > 1 << 63:
            return index
        value = candidate
    return len(fraction)


def _parse_rfc3339(text: str) -> datetime | None:
    match = _RFC3339.fullmatch(text)
    if match is None:
        return None
    fraction = match.group(1)
    if fraction is not None and len(fraction) > 6:
        text = text.replace(f".{fraction}", f".{fraction[:6]}", 1)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- Go's encoding/json, as far as these two annotations need it ---------------------------

_CONFIG_FIELDS: Final = ("blacklist", "retryInterval", "maxRetries", "restartCommand")
_RECORD_FIELDS: Final = ("id", "startTime", "containers", "lastRetryTime", "retryCount")


class _WrongType:
    """A JSON value Go cannot store in the field (an ``UnmarshalTypeError``)."""


_WRONG_TYPE: Final = _WrongType()
_decoder = msgspec.json.Decoder()


def _decode(raw: str) -> Any:
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError:
        return None


def _go_fields(document: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The object's values by field name: a key names a field exactly or case-insensitively."""
    folded = {name.casefold(): name for name in names}
    fields: dict[str, Any] = {}
    for key, value in document.items():
        name = key if key in names else folded.get(key.casefold())
        if name is not None:
            fields[name] = value
    return fields


def _go_string(value: Any) -> str | _WrongType | None:
    if value is None or isinstance(value, str):
        return value
    return _WRONG_TYPE


def _go_int(value: Any, bounds: tuple[int, int]) -> int | _WrongType | None:
    if value is None:
        return None
    if type(value) is int and bounds[0] <= value <= bounds[1]:
        return value
    return _WRONG_TYPE  # a fraction, an exponent, out of range, or not a number


def _go_strings(value: Any) -> list[str] | _WrongType | None:
    if value is None:
        return None
    if not isinstance(value, list):
        return _WRONG_TYPE
    return [item if isinstance(item, str) else "" for item in value]


def _go_string_map(value: Any) -> dict[str, str] | _WrongType | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        item is None or isinstance(item, str) for item in value.values()
    ):
        return _WRONG_TYPE
    return {key: item or "" for key, item in value.items()}


# --- reading the Pod ---------------------------------------------------------------------


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _container_statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    statuses = _mapping(pod.get("status")).get("containerStatuses")
    if not isinstance(statuses, list):
        return []
    return [status for status in statuses if isinstance(status, Mapping)]


def _running(status: Mapping[str, Any]) -> bool:
    return isinstance(_mapping(status.get("state")).get("running"), Mapping)
