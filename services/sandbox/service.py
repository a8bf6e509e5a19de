"""``sandbus run sandbox``: the sandbox worker as a process.

The worker (:mod:`services.sandbox.worker`) on the runtime's process shell
(:func:`~services.runtime.reconcile.serving.serve_worker`), active-passive: one replica holds
the Lease ``sandbus-sandbox`` and writes, the others stand by (every Sandbox has one owner of
its Pod, and two writers would only race for it). It writes with field manager
``sandbox-controller``, as upstream does.

Environment (besides the shell's: concurrency, Lease, NATS reconnect budget):

``SANDBUS_CLUSTER_DOMAIN``
    Default ``cluster.local`` (upstream's ``--cluster-domain``), for ``status.serviceFQDN``.
``SANDBUS_SANDBOX_CONCURRENCY``
    Default 16: how many Sandboxes are reconciled at once.
``SANDBUS_SANDBOX_EVENTS``
    ``true`` (default) or ``false``: record Kubernetes Events about each Sandbox's lifecycle
    (``SandboxPodCreated``, ``SandboxPodCreateFailed``, ``SandboxReady``, ``SandboxSuspended``,
    ``SandboxExpired``, ``PodSucceeded``, ``PodFailed``) and the ``MultiplePods`` warning;
    ``false`` is upstream's ``--disable-sandbox-events`` (see
    :mod:`services.sandbox.core.lifecycle_events`).
``SANDBUS_SANDBOX_LEASE_SECONDS``
    Default 5: how long a standby waits for the leader's renewal before it takes over.
``SANDBUS_SANDBOX_WRITE_BEHIND``
    Seconds, default 0 (off); upstream's ``--sandbox-write-behind-window``. How long the
    metadata patch of a Pod a Sandbox already owns may be held back, so that the redeliveries
    that follow a warm adoption coalesce into one write; bounded at 1 s whatever the value
    (see :mod:`services.sandbox.core.plan`).
``SANDBUS_SANDBOX_STATUS_WINDOW``
    Seconds, default 5; 0 writes every change at once, as upstream does. How long a status
    write that only reports a starting Pod's progress (scheduled, running, an IP, Ready still
    False) may be held back, so that a Pod that gets Ready within the window costs one status
    write instead of four. Becoming Ready, losing readiness, an error, a suspension or an
    ending is never held (see :mod:`services.sandbox.core.plan`). Five seconds cover a Pod
    whose image is on its node even when the API server is busy: measured with 200 Sandboxes
    at once on the development cluster, their Pods took 1.4-2.5 s from create to Ready, and a
    window of 2 s missed about half of them, each miss a further status write.
``SANDBUS_TRACING``
    ``off`` (default), ``on`` or ``console``: OpenTelemetry spans of each reconcile, joined to
    the trace named by a Sandbox's ``opentelemetry.io/trace-context`` annotation (upstream's
    ``--enable-tracing``); see :mod:`services.runtime.reconcile.tracing`.

A value that does not parse stops the service at start, with the variable named.
"""

from __future__ import annotations

import os

from services.runtime.worker_api import (
    BusConfig,
    Settings,
    WorkerDefinition,
    WorkerService,
    WorkerSettings,
    serve_worker,
    setting,
)
from services.sandbox.core.observation import DEFAULT_CLUSTER_DOMAIN
from services.sandbox.core.plan import CONTROLLER_NAME
from services.sandbox.worker import sandbox_worker

__all__ = [
    "CLUSTER_DOMAIN_ENV",
    "CONCURRENCY_ENV",
    "EVENTS_ENV",
    "STATUS_WINDOW_ENV",
    "WRITE_BEHIND_ENV",
    "definition",
    "serve",
    "write_behind",
]

CLUSTER_DOMAIN_ENV = "SANDBUS_CLUSTER_DOMAIN"
CONCURRENCY_ENV = "SANDBUS_SANDBOX_CONCURRENCY"
EVENTS_ENV = "SANDBUS_SANDBOX_EVENTS"
WRITE_BEHIND_ENV = "SANDBUS_SANDBOX_WRITE_BEHIND"
STATUS_WINDOW_ENV = "SANDBUS_SANDBOX_STATUS_WINDOW"
DEFAULT_STATUS_WINDOW = 5.0


def seconds_from(name: str, value: str | None, default: float = 0.0) -> float:
    """Seconds, 0 or more, from the environment variable ``name`` (``value``; unset or empty:
    ``default``)."""
    return setting(name, float, default, minimum=0, env={name: value or ""})


def write_behind(value: str | None) -> float:
    """The write-behind window in seconds, from ``SANDBUS_SANDBOX_WRITE_BEHIND``."""
    return seconds_from(WRITE_BEHIND_ENV, value)


def definition() -> WorkerDefinition:
    """The sandbox worker as this environment configures it."""
    return sandbox_worker(
        cluster_domain=setting(CLUSTER_DOMAIN_ENV, str, DEFAULT_CLUSTER_DOMAIN),
        write_behind=write_behind(os.environ.get(WRITE_BEHIND_ENV)),
        status_window=seconds_from(
            STATUS_WINDOW_ENV, os.environ.get(STATUS_WINDOW_ENV), DEFAULT_STATUS_WINDOW
        ),
        events=setting(EVENTS_ENV, bool, True),
    )


async def serve(
    settings: Settings,
    *,
    bus: BusConfig | None = None,
    worker_settings: WorkerSettings | None = None,
) -> None:
    """Run the sandbox worker until cancelled."""
    service = WorkerService(
        definition(),
        field_manager=CONTROLLER_NAME,
        replicas="leader",
        settings=worker_settings or WorkerSettings(),
    )
    await serve_worker(settings, service, bus=bus)
