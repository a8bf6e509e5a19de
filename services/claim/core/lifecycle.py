"""When a SandboxClaim expires (docs/agent-sandbox.md §3.3 steps 5-6; upstream
internal/lifecycle/expiry.go).

The claim expires at the earlier of ``spec.lifecycle.shutdownTime`` and the time its mirrored
``Finished`` condition turned True plus ``ttlSecondsAfterFinished``. Expiry takes two passes:
the first only persists Ready=False/ClaimExpired (so the reason is on record before anything
is deleted), the second acts on ``shutdownPolicy``: ``Delete`` deletes the claim (its Sandbox
goes with it through the garbage collector), ``DeleteForeground`` deletes it with foreground
propagation, ``Retain`` deletes only the Sandbox the claim controls and keeps the claim. A
warm-adopted Sandbox is controlled by the claim like a cold one, so it is removed too
(upstream #587).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from api.objects import condition_of
from services.runtime.times import parse_time

__all__ = ["EXPIRED_MESSAGE", "expires_at", "shutdown_policy"]

EXPIRED_MESSAGE: Final = "Claim expired. Sandbox cleanup initiated."


def expires_at(claim: Mapping[str, Any]) -> datetime | None:
    """The moment the claim expires (None: never, as far as its spec and status say now)."""
    lifecycle = (claim.get("spec") or {}).get("lifecycle") or {}
    moments = []
    shutdown = parse_time(lifecycle.get("shutdownTime"))
    if shutdown is not None:
        moments.append(shutdown)
    ttl = lifecycle.get("ttlSecondsAfterFinished")
    finished = condition_of(claim, "Finished")
    if isinstance(ttl, int) and finished is not None and finished.get("status") == "True":
        since = parse_time(finished.get("lastTransitionTime"))
        if since is not None:
            moments.append(since + timedelta(seconds=ttl))
    return min(moments) if moments else None


def shutdown_policy(claim: Mapping[str, Any]) -> str:
    lifecycle = (claim.get("spec") or {}).get("lifecycle") or {}
    return str(lifecycle.get("shutdownPolicy") or "Retain")
