"""``sandbus run pool``: the pool worker as a process.

The worker (:mod:`services.pool.worker`) on the runtime's process shell
(:func:`~services.runtime.reconcile.serving.serve_worker`), active-passive on the Lease
``sandbus-pool``: one pool's creates come from one writer, and its expectations, kept on the
bus, pass to the standby with the Lease. It writes as ``sandboxwarmpool-controller``.

Environment, besides the shell's (upstream's flag after each):

``SANDBUS_POOL_MAX_BATCH``
    Creates or deletes per pass, default 300 (``--sandbox-warm-pool-max-batch-size``).
``SANDBUS_POOL_READINESS_GRACE``
    Seconds a member may stay not Ready before it is replaced, default 300
    (``--sandbox-warm-pool-readiness-grace-period``).
``SANDBUS_POOL_UNSCHEDULABLE_RECHECK``
    Seconds between looks at held Unschedulable members, default 60
    (``--sandbox-warm-pool-unschedulable-recheck-interval``).
``SANDBUS_POOL_REPLENISH_DELAY``
    Seconds to hold a refill after the pool shrank, default 0
    (``--sandbox-warm-pool-replenish-delay``).
``SANDBUS_POOL_MAX_REFILL_RATE``
    Creates per second, default 0 = unlimited (``--sandbox-warm-pool-max-refill-rate``).
``SANDBUS_POOL_EVICTION``
    ``true`` (default) or ``false``: members carry the autoscaler's safe-to-evict marker
    (``--enable-warm-pool-eviction``).

A value that does not parse stops the service at start, with the variable named.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from services.pool.core.observation import PoolSettings
from services.pool.core.plan import CONTROLLER_NAME
from services.pool.worker import pool_worker
from services.runtime.bus import BusConfig
from services.runtime.reconcile.serving import WorkerService, serve_worker
from services.runtime.reconcile.worker import WorkerDefinition
from services.runtime.settings import Settings

__all__ = ["definition", "serve", "settings_from"]

_PREFIX = "SANDBUS_POOL_"


def _number(env: Mapping[str, str], name: str, default: float, *, integer: bool = False) -> float:
    text = env.get(_PREFIX + name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0) or (integer and value != int(value)):
        kind = "a whole number" if integer else "seconds or a rate"
        raise ValueError(f"{_PREFIX}{name}={text!r}: expected {kind}, 0 or more")
    return value


def settings_from(env: Mapping[str, str]) -> PoolSettings:
    eviction = env.get(_PREFIX + "EVICTION", "").strip().lower() or "true"
    if eviction not in ("true", "false"):
        raise ValueError(f"{_PREFIX}EVICTION={eviction!r}: expected true or false")
    defaults = PoolSettings()
    return PoolSettings(
        max_batch=max(int(_number(env, "MAX_BATCH", defaults.max_batch, integer=True)), 1),
        readiness_grace=_number(env, "READINESS_GRACE", defaults.readiness_grace),
        unschedulable_recheck=_number(env, "UNSCHEDULABLE_RECHECK", defaults.unschedulable_recheck),
        replenish_delay=_number(env, "REPLENISH_DELAY", defaults.replenish_delay),
        max_refill_rate=_number(env, "MAX_REFILL_RATE", defaults.max_refill_rate),
        eviction=eviction == "true",
    )


def definition() -> WorkerDefinition:
    """The pool worker as this environment configures it."""
    return pool_worker(settings_from(os.environ))


async def serve(settings: Settings, *, bus: BusConfig | None = None) -> None:
    """Run the pool worker until cancelled."""
    service = WorkerService(definition(), field_manager=CONTROLLER_NAME, replicas="leader")
    await serve_worker(settings, service, bus=bus)
