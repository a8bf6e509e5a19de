"""Latency model and fault injection: the ways a real API server is slow or fails.

**Latency.** Each request sleeps for a seeded log-normal draw for its verb class before it is
served: reads (get/list/watch start), writes (slept *before* the commit lock, like a network
round trip plus etcd), and, per watch event, a propagation delay measured from the commit. So a
watch event can reach a watcher before the writer has its HTTP response, as on a real cluster.
:meth:`LatencyModel.zero` switches it off for fast tests.

**Faults.** A :class:`FaultRule` matches requests by verb, resource, namespace, name regex,
subresource, user-agent regex and field manager, fires on the nth match / every nth / with a
probability / at most ``count`` times, and then does one of:

============================  ====================================================================
``error``                     answer with a Status (429 + Retry-After, 409, 500, 503, 504, ...)
``conflict_once``             a racing writer: bump the target's RV first (the request's RV
                              precondition, if any, then fails with a real 409)
``drop_before_commit``        abort the connection without doing the write
``drop_after_commit``         do the write, then abort: "it succeeded but the client saw an error"
``watch_close``/``_abort``/   end a matching watch cleanly / break it mid-stream / hang it /
``_stall``/``_expire``        send ERROR 410, after ``after_events`` events
``delay_events``              add ``delay_ms`` to every event of matching watches
============================  ====================================================================

Plus cluster-wide knobs: :meth:`Faults.pause` (503 on every request, as during an apiserver
restart), :meth:`Faults.compact` (drop the history, so every resume gets 410) and
:meth:`Faults.break_watches` (act on live watches now). The same operations are served over
HTTP by :mod:`.admin`, so tests of separate processes can inject faults into a running cluster.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from random import Random
from typing import Any, Literal

from devtools.cluster.apirules.errors import StatusError
from devtools.cluster.http.watch import WatchAction, WatchHub
from devtools.cluster.storage.store import Store

__all__ = [
    "FaultAction",
    "FaultRule",
    "Faults",
    "LatencyModel",
    "RequestInfo",
]

FaultAction = Literal[
    "error",
    "conflict_once",
    "drop_before_commit",
    "drop_after_commit",
    "watch_close",
    "watch_abort",
    "watch_stall",
    "watch_expire",
    "delay_events",
]
_ACTIONS = FaultAction.__args__  # type: ignore[attr-defined]
_WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})

_DEFAULT_REASONS = {
    400: ("BadRequest", "the server rejected our request for an unknown reason"),
    401: ("Unauthorized", "Unauthorized"),
    403: ("Forbidden", "forbidden: injected fault"),
    404: ("NotFound", "the server could not find the requested resource"),
    409: ("Conflict", "Operation cannot be fulfilled: injected conflict"),
    410: ("Expired", "too old resource version"),
    422: ("Invalid", "injected validation failure"),
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "Timeout: request did not complete within requested timeout"),
}


@dataclass(frozen=True)
class RequestInfo:
    """What a fault rule can match on."""

    verb: str
    resource: str = ""
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    user_agent: str = ""
    field_manager: str = ""
    storage: str = ""


@dataclass
class LatencyModel:
    """Seeded log-normal latencies per verb class; each range is the ~95 % band, in seconds."""

    read: tuple[float, float] = (0.0005, 0.002)
    write: tuple[float, float] = (0.002, 0.010)
    watch: tuple[float, float] = (0.001, 0.005)
    seed: int = 0
    _rng: Random = field(default_factory=Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._rng = Random(self.seed)

    @classmethod
    def zero(cls) -> LatencyModel:
        return cls(read=(0.0, 0.0), write=(0.0, 0.0), watch=(0.0, 0.0))

    @classmethod
    def with_write_ms(cls, ms: float, *, seed: int = 0) -> LatencyModel:
        """Writes centred on ``ms`` (the ``--write-latency-ms`` knob); reads a tenth of it."""
        w = ms / 1000
        return cls(read=(w / 20, w / 5), write=(w / 2, w * 2), watch=(w / 10, w / 2), seed=seed)

    def reseed(self, seed: int) -> None:
        self.seed = seed
        self._rng = Random(seed)

    def draw(self, verb_class: Literal["read", "write", "watch"]) -> float:
        low, high = getattr(self, verb_class)
        if high <= 0:
            return 0.0
        low = max(low, high / 1000)
        median = math.sqrt(low * high)
        sigma = math.log(high / low) / 4 if high > low else 0.0
        value = self._rng.lognormvariate(math.log(median), sigma)
        return min(max(value, low / 2), high * 2)

    def to_json(self) -> dict[str, Any]:
        return {
            "read": list(self.read),
            "write": list(self.write),
            "watch": list(self.watch),
            "seed": self.seed,
        }

    def update(self, data: dict[str, Any]) -> None:
        for key in ("read", "write", "watch"):
            if key in data:
                low, high = data[key]
                setattr(self, key, (float(low), float(high)))
        if "seed" in data:
            self.reseed(int(data["seed"]))


@dataclass
class FaultRule:
    action: FaultAction
    verb: str | None = None
    resource: str | None = None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    user_agent: str | None = None
    field_manager: str | None = None
    nth: int | None = None
    every: int | None = None
    probability: float | None = None
    count: int | None = None
    code: int = 500
    reason: str | None = None
    message: str | None = None
    retry_after: int | None = None
    after_events: int = 0
    delay_ms: float = 0.0
    id: int = 0
    matched: int = 0
    fired: int = 0

    def __post_init__(self) -> None:
        if self.action not in _ACTIONS:
            raise ValueError(f"unknown fault action {self.action!r}; one of {', '.join(_ACTIONS)}")
        if self.action == "conflict_once" and self.count is None:
            self.count = 1

    def matches(self, info: RequestInfo) -> bool:
        verb_ok = self.verb in (None, info.verb) or (
            self.verb == "write" and info.verb in _WRITE_VERBS
        )
        if not verb_ok:
            return False
        if self.resource is not None and self.resource not in (info.resource, info.storage):
            return False
        if self.namespace is not None and self.namespace != info.namespace:
            return False
        if self.subresource is not None and self.subresource != info.subresource:
            return False
        if self.name is not None and not re.fullmatch(self.name, info.name):
            return False
        if self.user_agent is not None and not re.search(self.user_agent, info.user_agent):
            return False
        return self.field_manager is None or self.field_manager == info.field_manager

    def exhausted(self) -> bool:
        return self.count is not None and self.fired >= self.count

    def triggers(self, rng: Random) -> bool:
        """Count a match and decide whether this one fires."""
        self.matched += 1
        if self.exhausted():
            return False
        if self.nth is not None and self.matched != self.nth:
            return False
        if self.every is not None and self.matched % self.every != 0:
            return False
        return self.probability is None or rng.random() < self.probability

    def error(self) -> StatusError:
        reason, message = _DEFAULT_REASONS.get(self.code, ("", "injected fault"))
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after else None
        details = {"retryAfterSeconds": self.retry_after} if self.retry_after else None
        return StatusError(
            self.code,
            self.reason if self.reason is not None else reason,
            self.message or message,
            details,
            headers=headers,
        )

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Decision:
    """What the fault engine wants done with one request."""

    error: StatusError | None = None
    conflict: bool = False
    drop_before: bool = False
    drop_after: bool = False
    watch_actions: list[tuple[WatchAction, int]] = field(default_factory=list)
    event_delay: float = 0.0


class Faults:
    """The fault rules of one cluster plus the pause/compact/break-watches knobs."""

    def __init__(self, store: Store, hub: WatchHub, *, seed: int = 0) -> None:
        self._store = store
        self._hub = hub
        self._rng = Random(seed)
        self._rules: list[FaultRule] = []
        self._next_id = 1
        self.paused = False

    # -- rules ------------------------------------------------------------------------------

    @property
    def rules(self) -> list[FaultRule]:
        return list(self._rules)

    def add(self, rule: FaultRule) -> FaultRule:
        rule.id = self._next_id
        self._next_id += 1
        self._rules.append(rule)
        return rule

    def add_json(self, data: dict[str, Any]) -> FaultRule:
        known = set(FaultRule.__dataclass_fields__) - {"id", "matched", "fired"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown fault rule fields: {', '.join(sorted(unknown))}")
        return self.add(FaultRule(**data))

    def remove(self, rule_id: int) -> bool:
        before = len(self._rules)
        self._rules = [r for r in self._rules if r.id != rule_id]
        return len(self._rules) != before

    def clear(self) -> None:
        self._rules.clear()
        self.paused = False

    def error(
        self,
        code: int,
        *,
        reason: str | None = None,
        message: str | None = None,
        retry_after: int | None = None,
        **match: Any,
    ) -> FaultRule:
        return self.add(
            FaultRule(
                "error", code=code, reason=reason, message=message, retry_after=retry_after, **match
            )
        )

    def conflict_once(self, **match: Any) -> FaultRule:
        return self.add(FaultRule("conflict_once", **match))

    def drop(self, when: Literal["before_commit", "after_commit"], **match: Any) -> FaultRule:
        action: FaultAction = (
            "drop_before_commit" if when == "before_commit" else "drop_after_commit"
        )
        return self.add(FaultRule(action, **match))

    def watch(
        self,
        action: Literal["close", "abort", "stall", "expire"],
        *,
        after_events: int = 0,
        **match: Any,
    ) -> FaultRule:
        """A rule for watches that start from now on (``verb="watch"`` is implied)."""
        kind: FaultAction = f"watch_{action}"  # type: ignore[assignment]
        return self.add(FaultRule(kind, verb="watch", after_events=after_events, **match))

    def delay_events(self, delay_ms: float, **match: Any) -> FaultRule:
        return self.add(FaultRule("delay_events", verb="watch", delay_ms=delay_ms, **match))

    # -- cluster-wide knobs -----------------------------------------------------------------

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def compact(self) -> int:
        """Drop the change history; returns the RV every resume must now be at or above."""
        return self._store.compact()

    def break_watches(
        self, action: WatchAction, *, resource: str | None = None, namespace: str | None = None
    ) -> int:
        return self._hub.inject(action, resource=resource, namespace=namespace)

    # -- the decision -----------------------------------------------------------------------

    def decide(self, info: RequestInfo) -> Decision:
        decision = Decision()
        if self.paused:
            decision.error = StatusError(
                503, "ServiceUnavailable", "the server is currently unable to handle the request"
            )
            return decision
        for rule in self._rules:
            if not rule.matches(info) or not rule.triggers(self._rng):
                continue
            rule.fired += 1
            if rule.action == "error":
                decision.error = rule.error()
                return decision
            if rule.action == "conflict_once":
                decision.conflict = True
            elif rule.action == "drop_before_commit":
                decision.drop_before = True
                return decision
            elif rule.action == "drop_after_commit":
                decision.drop_after = True
            elif rule.action == "delay_events":
                decision.event_delay += rule.delay_ms / 1000
            else:
                action: WatchAction = rule.action.removeprefix("watch_")  # type: ignore[assignment]
                decision.watch_actions.append((action, rule.after_events))
        return decision
