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

from collections.abc import Mapping

from services.pool.core.observation import PoolSettings
from services.pool.core.plan import CONTROLLER_NAME
from services.pool.worker import pool_worker
from services.runtime.worker_api import (
    BusConfig,
    Settings,
    WorkerDefinition,
    WorkerService,
    serve_worker,
    setting,
)

__all__ = ["definition", "serve", "settings_from"]

_PREFIX = "SANDBUS_POOL_"


def settings_from(env: Mapping[str, str] | None = None) -> PoolSettings:
    """The settings of ``env`` (the process's environment by default)."""

    def seconds(name: str, default: float) -> float:
        return setting(_PREFIX + name, float, default, minimum=0, env=env)

    defaults = PoolSettings()
    return PoolSettings(
        max_batch=max(
            setting(_PREFIX + "MAX_BATCH", int, defaults.max_batch, minimum=0, env=env), 1
        ),
        readiness_grace=seconds("READINESS_GRACE", defaults.readiness_grace),
        unschedulable_recheck=seconds("UNSCHEDULABLE_RECHECK", defaults.unschedulable_recheck),
        replenish_delay=seconds("REPLENISH_DELAY", defaults.replenish_delay),
        max_refill_rate=seconds("MAX_REFILL_RATE", defaults.max_refill_rate),
        eviction=setting(_PREFIX + "EVICTION", bool, True, env=env),
    )


def definition() -> WorkerDefinition:
    """The pool worker as this environment configures it."""
    return pool_worker(settings_from())


async def serve(settings: Settings, *, bus: BusConfig | None = None) -> None:
    """Run the pool worker until cancelled."""
    service = WorkerService(definition(), field_manager=CONTROLLER_NAME, replicas="leader")
    await serve_worker(settings, service, bus=bus)
