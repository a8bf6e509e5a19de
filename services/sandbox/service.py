"""``sandbus run sandbox``: the sandbox worker as a process.

Connects to NATS (provisioning the bus if needed) and to the Kubernetes API, then runs the
worker (:mod:`services.sandbox.worker` on :mod:`services.runtime.reconcile`) until cancelled.
It writes with field manager ``sandbox-controller``, as upstream does.

Environment: ``SANDBUS_CLUSTER_DOMAIN`` (default ``cluster.local``, upstream's
``--cluster-domain``) for ``status.serviceFQDN``; ``SANDBUS_SANDBOX_CONCURRENCY`` (default 16)
for how many Sandboxes are reconciled at once.
"""

from __future__ import annotations

import contextlib
import logging
import os

import nats

from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.reconcile.kube import KubeApi
from services.runtime.reconcile.worker import Worker, WorkerSettings
from services.runtime.settings import Settings, kube_api_client
from services.sandbox.observation import DEFAULT_CLUSTER_DOMAIN
from services.sandbox.plan import CONTROLLER_NAME
from services.sandbox.worker import WORKER_NAME, sandbox_worker

__all__ = ["CLUSTER_DOMAIN_ENV", "CONCURRENCY_ENV", "serve"]

log = logging.getLogger(__name__)

CLUSTER_DOMAIN_ENV = "SANDBUS_CLUSTER_DOMAIN"
CONCURRENCY_ENV = "SANDBUS_SANDBOX_CONCURRENCY"


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
    nc = await nats.connect(settings.nats_url, name=f"sandbus-{WORKER_NAME}")
    try:
        js = nc.jetstream()
        await ensure_bus(js, bus)
        api_client = await kube_api_client(settings)
        async with api_client:
            worker = Worker(
                sandbox_worker(cluster_domain=cluster_domain),
                js=js,
                api=KubeApi(api_client, field_manager=CONTROLLER_NAME),
                bus=bus,
                settings=worker_settings or WorkerSettings(concurrency=concurrency),
            )
            log.info("sandbox worker starting (%d at a time)", concurrency)
            await worker.run()
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
