"""``sandbus run sandbox``: the sandbox worker as a process.

Connects to NATS (provisioning the bus if needed) and to the Kubernetes API, then runs the
worker (:mod:`services.sandbox.worker` on :mod:`services.runtime.reconcile`) until cancelled.
It writes with field manager ``sandbox-controller``, as upstream does.

Environment:

``SANDBUS_CLUSTER_DOMAIN``
    Default ``cluster.local`` (upstream's ``--cluster-domain``), for ``status.serviceFQDN``.
``SANDBUS_SANDBOX_CONCURRENCY``
    Default 16: how many Sandboxes are reconciled at once.
``SANDBUS_SANDBOX_WRITE_BEHIND``
    Seconds, default 0 (off); upstream's ``--sandbox-write-behind-window``. How long the
    metadata patch of a Pod a Sandbox already owns may be held back, so that the redeliveries
    that follow a warm adoption coalesce into one write; bounded at 1 s whatever the value
    (see :mod:`services.sandbox.plan`).
``SANDBUS_TRACING``
    ``off`` (default), ``on`` or ``console``: OpenTelemetry spans of each reconcile, joined to
    the trace named by a Sandbox's ``opentelemetry.io/trace-context`` annotation (upstream's
    ``--enable-tracing``); see :mod:`services.runtime.reconcile.tracing`.

A value that does not parse stops the service at start, with the variable named.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os

import nats

from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.reconcile.kube import KubeApi
from services.runtime.reconcile.tracing import tracing_from_environment
from services.runtime.reconcile.worker import Worker, WorkerSettings
from services.runtime.settings import Settings, kube_api_client
from services.sandbox.observation import DEFAULT_CLUSTER_DOMAIN
from services.sandbox.plan import CONTROLLER_NAME
from services.sandbox.worker import WORKER_NAME, sandbox_worker

__all__ = ["CLUSTER_DOMAIN_ENV", "CONCURRENCY_ENV", "WRITE_BEHIND_ENV", "serve", "write_behind"]

log = logging.getLogger(__name__)

CLUSTER_DOMAIN_ENV = "SANDBUS_CLUSTER_DOMAIN"
CONCURRENCY_ENV = "SANDBUS_SANDBOX_CONCURRENCY"
WRITE_BEHIND_ENV = "SANDBUS_SANDBOX_WRITE_BEHIND"


def write_behind(value: str | None) -> float:
    """The write-behind window in seconds, from ``SANDBUS_SANDBOX_WRITE_BEHIND``."""
    text = (value or "").strip()
    try:
        seconds = float(text) if text else 0.0
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"{WRITE_BEHIND_ENV}={value!r}: expected seconds, 0 or more")
    return seconds


async def serve(
    settings: Settings,
    *,
    bus: BusConfig | None = None,
    worker_settings: WorkerSettings | None = None,
) -> None:
    """Run the sandbox worker until cancelled."""
    bus = bus or BusConfig()
    concurrency = int(os.environ.get(CONCURRENCY_ENV) or 16)
    cluster_domain = os.environ.get(CLUSTER_DOMAIN_ENV) or DEFAULT_CLUSTER_DOMAIN
    window = write_behind(os.environ.get(WRITE_BEHIND_ENV))
    tracing = tracing_from_environment(f"sandbus-{WORKER_NAME}")
    nc = await nats.connect(settings.nats_url, name=f"sandbus-{WORKER_NAME}")
    try:
        js = nc.jetstream()
        await ensure_bus(js, bus)
        api_client = await kube_api_client(settings)
        async with api_client:
            worker = Worker(
                sandbox_worker(cluster_domain=cluster_domain, write_behind=window),
                js=js,
                api=KubeApi(api_client, field_manager=CONTROLLER_NAME),
                bus=bus,
                settings=worker_settings or WorkerSettings(concurrency=concurrency),
                tracer=tracing.tracer if tracing else None,
            )
            log.info(
                "sandbox worker starting (%d at a time; write-behind %g s; tracing %s)",
                concurrency,
                window,
                "on" if tracing else "off",
            )
            await worker.run()
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
        if tracing is not None:
            tracing.shutdown()
