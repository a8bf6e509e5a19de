"""The account of a pass's failed action, as the key's next pass reads it.

When an action fails, its pass stops there, and the runtime hands the key's next pass the
failure as ``Observed.last_error``: one line that a person reads in the decision,
``"<verb> <Kind/namespace/name>: <error>"`` (:func:`describe_failure`), where a write the API
server refused reads ``"<Reason> (<code>): <message>"``, the server's own words. A planner that
reports a refused write on its object (a condition, a Warning Event) reads the line back with
:func:`failed_write` instead of a pattern of its own: this module is the one place that writes
it and reads it. A planner reports a refusal at once, and a failure that passes (a Conflict,
throttling, a timeout, a 5xx) only once it persists (``Observed.failure_persists``: the key's
passes have failed in a row for a while); :func:`reportable` says which to report. Pure:
planners import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from events.envelope import ObjectKey

__all__ = ["FailedWrite", "describe_failure", "failed_write", "reportable"]


@dataclass(frozen=True)
class FailedWrite:
    """A failed action: ``verb`` of ``target``, and the error's words; when the API server
    answered, its ``reason`` (``Invalid``, ``Forbidden``…), ``code`` and ``message``."""

    verb: str
    target: ObjectKey
    error: str
    reason: str | None = None
    code: int | None = None
    message: str | None = None

    @property
    def refused(self) -> bool:
        """The API server refused it for a reason that retrying the same write cannot fix (a
        4xx answer: Invalid, Forbidden, NotFound of a parent…), not for one that passes (a
        Conflict, TooManyRequests, a timeout, a 5xx)."""
        return self.code is not None and 400 <= self.code < 500 and self.code not in _PASSING

    def anonymous(self) -> str:
        """The server's message with the target's own name left out (``Pod "p-7x" is
        invalid: …`` → ``Pod is invalid: …``): the same words from one retry to the next,
        whatever name each attempt had."""
        return _NAMED.sub(r"\g<kind>", (self.message or self.error).strip())


def describe_failure(verb: str, target: ObjectKey, error: str) -> str:
    """The line a pass's failed action leaves for the next pass (see the module doc)."""
    return f"{verb} {target}: {error}"


_LINE: Final = re.compile(r"^(?P<verb>\S+) (?P<subject>[^\s:]+): (?P<error>.*)$", re.DOTALL)
_ANSWER: Final = re.compile(r"^(?P<reason>\w*) \((?P<code>\d{3})\): (?P<message>.*)$", re.DOTALL)
_NAMED: Final = re.compile(r'^(?P<kind>[\w.-]+) "[^"]*"')
_PASSING: Final = frozenset({408, 409, 429})
"""The 4xx answers that another attempt may not get: a timeout, a conflict, throttling."""


def failed_write(last_error: str | None) -> FailedWrite | None:
    """The failed action ``last_error`` describes; None when it is not such a line (no error,
    or a failure of the pass itself, such as the bus refusing the key's memo)."""
    line = _LINE.match(last_error or "")
    if line is None:
        return None
    parts = line["subject"].split("/")
    if len(parts) not in (2, 3) or not all(parts[:1] + parts[-1:]):
        return None
    target = ObjectKey(parts[0], parts[1] if len(parts) == 3 else "", parts[-1])
    answer = _ANSWER.match(line["error"])
    if answer is None:
        return FailedWrite(line["verb"], target, line["error"])
    return FailedWrite(
        line["verb"],
        target,
        line["error"],
        reason=answer["reason"],
        code=int(answer["code"]),
        message=answer["message"],
    )


def reportable(last_error: str | None, *, persists: bool) -> FailedWrite | None:
    """The failed action of ``last_error`` when its object should say so: a refusal at once
    (``refused``), any other failed action once the key's failures persist (``persists``:
    ``Observed.failure_persists``); None otherwise."""
    failed = failed_write(last_error)
    if failed is None or not (failed.refused or persists):
        return None
    return failed
