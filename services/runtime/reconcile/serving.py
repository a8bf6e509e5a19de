"""A worker as a process: ``serve_worker(settings, service)`` is all a worker's service module
needs to call.

It does the same for every worker, in this order:

1. connect to NATS (:func:`~services.runtime.connection.connect_nats`: reconnect for ever, or
   within ``SANDBUS_NATS_RECONNECT_BUDGET``; a connection closed for good stops the service
   with an error, so Kubernetes restarts it) and make sure the bus exists;
2. open the one Kubernetes client, writing as the worker's field manager, with request timeouts;
3. run the :class:`~.worker.Worker`, either on every replica (``replicas="all"``: the worker's
   inputs are JetStream consumers that already hand each message to one replica), on every
   replica with the keys divided among them (``replicas="shards"``, :mod:`.sharding`: each
   key reconciled by one live replica), or on the replica that holds the worker's Lease
   (``replicas="leader"``: one writer at a time, the others standing by). A leader that
   loses its Lease stops acting at once (the worker asks ``may_act`` before every action),
   stops its worker and stands by again; its successor loads the state table and the memo
   stream and resumes the shared durable consumer from its ack floor, so nothing is missed
   and nothing is done twice that a precondition would not stop.

Environment, besides the connection settings (``SANDBUS_<WORKER>_...`` with the worker's name
in upper case):

``SANDBUS_<WORKER>_CONCURRENCY``     keys reconciled at once (default from the service)
``SANDBUS_<WORKER>_LEASE_SECONDS``   lease duration of an active-passive worker (default 5;
                                     renew deadline and retry period in client-go's
                                     proportions)
``SANDBUS_<WORKER>_LEASE_NAME``      default ``sandbus-<worker>``
``SANDBUS_LEASE_NAMESPACE``          default ``$POD_NAMESPACE``, else ``default``
``SANDBUS_<WORKER>_REPLICA_TTL``     seconds a sharded replica counts as alive after its last
                                     heartbeat (default 6; whole seconds, at least 1)
``SANDBUS_IDENTITY``                 this replica's name on the Lease or among the shards
                                     (default: host and pid)
``SANDBUS_REPORT_FAILURES_AFTER``    seconds a key's passes fail in a row before its planner
                                     reports a failure that passes, such as a 5xx, as it reports
                                     a refusal (default 60; every worker)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import nats.errors

from services.runtime.bus import BusConfig, ensure_bus
from services.runtime.cancellation import stop_tasks, supervise
from services.runtime.connection import (
    ConnectionLost,
    NatsConnection,
    budget_from_environment,
    connect_nats,
)
from services.runtime.election import LeaseElector
from services.runtime.endpoint import READINESS, metrics_endpoint
from services.runtime.kube import KubeApi
from services.runtime.lease import LeaseTimings
from services.runtime.metrics import metrics_address, process_metrics
from services.runtime.reconcile.definition import WorkerDefinition, WorkerSettings
from services.runtime.reconcile.feeding import replica_durable_name
from services.runtime.reconcile.sharding import Membership, owner_of
from services.runtime.reconcile.tracing import tracing_from_environment
from services.runtime.reconcile.worker import Worker
from services.runtime.settings import Settings, kube_api_client, setting

__all__ = ["WorkerService", "serve_worker"]

log = logging.getLogger(__name__)

Replicas = Literal["leader", "all", "shards"]

REPLICA_DURABLE_INACTIVE = 300.0
"""Seconds after which the event-log durable of a sharded replica that is gone is removed."""


@dataclass(frozen=True)
class WorkerService:
    definition: WorkerDefinition
    field_manager: str
    """Who the worker writes as (``managedFields``), upstream's controller name."""
    replicas: Replicas = "leader"
    settings: WorkerSettings = dataclasses.field(default_factory=WorkerSettings)


@dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    name: str
    identity: str
    timings: LeaseTimings


def lease_settings(worker: str, env: Mapping[str, str] | None = None) -> LeaseSettings:
    prefix = f"SANDBUS_{worker.upper()}_"
    seconds = setting(prefix + "LEASE_SECONDS", float, None, minimum=0, above=True, env=env)
    namespace = setting("POD_NAMESPACE", str, "default", env=env)
    return LeaseSettings(
        namespace=setting("SANDBUS_LEASE_NAMESPACE", str, namespace, env=env),
        name=setting(prefix + "LEASE_NAME", str, f"sandbus-{worker}", env=env),
        identity=setting("SANDBUS_IDENTITY", str, f"{socket.gethostname()}-{os.getpid()}", env=env),
        timings=LeaseTimings.for_duration(seconds) if seconds else LeaseTimings(),
    )


def _worker_settings(
    service: WorkerService, env: Mapping[str, str] | None = None
) -> WorkerSettings:
    name = f"SANDBUS_{service.definition.name.upper()}_CONCURRENCY"
    concurrency = setting(name, int, None, minimum=1, env=env)
    report_after = setting("SANDBUS_REPORT_FAILURES_AFTER", float, None, minimum=0, env=env)
    settings = service.settings
    if concurrency is not None:
        settings = dataclasses.replace(settings, concurrency=concurrency)
    if report_after is not None:
        settings = dataclasses.replace(settings, report_failures_after=report_after)
    return settings


async def serve_worker(
    settings: Settings, service: WorkerService, *, bus: BusConfig | None = None
) -> None:
    """Run ``service`` until cancelled (then exit cleanly) or until its connection to NATS is
    lost for good (then raise)."""
    bus = bus or BusConfig.from_environment()
    name = service.definition.name
    worker_settings = _worker_settings(service)
    lease = lease_settings(name) if service.replicas == "leader" else None
    tracing = tracing_from_environment(f"sandbus-{name}")
    metrics = process_metrics()
    metrics.declare(service.definition.metrics)
    address = metrics_address()
    connection = await connect_nats(
        settings.nats_url, name=f"sandbus-{name}", budget=budget_from_environment()
    )
    live = _Live()
    READINESS.add(name, lambda: _waiting_for(connection, live))
    try:
        async with contextlib.AsyncExitStack() as stack:
            if address is not None:
                await stack.enter_async_context(metrics_endpoint(metrics, *address))
            await _provision(connection, bus, name)
            api_client = await stack.enter_async_context(await kube_api_client(settings))
            api = KubeApi(api_client, field_manager=service.field_manager)

            def make_worker() -> Worker:
                live.worker = Worker(
                    service.definition,
                    js=connection.js,
                    api=api,
                    bus=bus,
                    settings=worker_settings,
                    tracer=tracing.tracer if tracing else None,
                    metrics=metrics,
                )
                return live.worker

            log.info(
                "%s worker starting (%d at a time; %s; tracing %s)",
                name,
                worker_settings.concurrency,
                f"active-passive on Lease {lease.namespace}/{lease.name} as {lease.identity}"
                if lease
                else "active on every replica",
                "on" if tracing else "off",
            )
            if lease is not None:
                work = _lead(make_worker, api, lease, live)
            elif service.replicas == "shards":
                membership = Membership(
                    connection.js,
                    worker=name,
                    identity=lease_settings(name).identity,
                    bus=bus,
                    ttl=setting(
                        f"SANDBUS_{name.upper()}_REPLICA_TTL", float, 6.0, minimum=0, above=True
                    ),
                )
                work = _shard(make_worker(), membership)
            else:
                work = make_worker().run()
            await supervise([(f"{name}-work", work), (f"{name}-nats", connection.lost())])
    finally:
        READINESS.discard(name)
        await connection.close()
        if tracing is not None:
            tracing.shutdown()


async def _provision(connection: NatsConnection, bus: BusConfig, name: str) -> None:
    """Make the streams, waiting while JetStream does not answer though NATS does (a cluster
    restarting elects its leaders first), as the watcher does, rather than exit and be started
    again in a loop (the chaos soak saw a pool worker fail 28 times so in 30 minutes); but not
    once the connection is gone for good."""
    while True:
        try:
            await ensure_bus(connection.js, bus)
            return
        except nats.errors.Error as error:
            if connection.client.is_closed:
                raise ConnectionLost(f"sandbus-{name}: the NATS connection was closed") from error
            log.warning("%s: provisioning the bus: %r; again in 1 s", name, error)
            await asyncio.sleep(1.0)


@dataclasses.dataclass
class _Live:
    """What a running service is made of now, for its readiness."""

    worker: Worker | None = None
    elector: LeaseElector | None = None


def _waiting_for(connection: NatsConnection, live: _Live) -> str | None:
    """Ready: connected to NATS and, as the leader or an active replica, with its view of the
    world loaded from the bus (its consumers bound); as a standby, knowing who leads."""
    if not connection.client.is_connected:
        return "not connected to NATS"
    elector = live.elector
    if elector is not None and not elector.is_leader():
        return None if elector.standing_by_for else "no leader known yet"
    if live.worker is None or not live.worker.feed.loaded.is_set():
        return "loading the state table"
    return None


async def _shard(worker: Worker, membership: Membership) -> None:
    """Run ``worker`` on this replica's share of the keys, following the membership."""
    me = membership.identity
    worker.owns = membership.owns
    # Every replica sees every change (its cache is the whole world); only the reconciles are
    # divided. A replica that dies leaves its durable to the server's inactivity timeout.
    for feed in worker.feeds:
        feed.durable = replica_durable_name(worker.definition.name, me) + feed.durable_suffix
        feed.inactive_threshold = REPLICA_DURABLE_INACTIVE

    def changed(before: frozenset[str], now: frozenset[str]) -> None:
        worker.reshard(lambda key: owner_of(key, now) == me and owner_of(key, before) != me)

    membership.on_change = changed
    follow = asyncio.create_task(membership.run(), name=f"{worker.definition.name}-replicas")
    try:
        await membership.joined.wait()
        log.info("%s: sharing the keys with %s", me, ", ".join(sorted(membership.members)))
        await supervise(
            [(f"{worker.definition.name}-sharded", worker.run()), ("replicas", _forever(follow))]
        )
    finally:
        await stop_tasks((follow,))


async def _forever(task: asyncio.Task[None]) -> None:
    await task
    raise RuntimeError("the membership heartbeat stopped")


async def _lead(
    make_worker: Callable[[], Worker], api: KubeApi, lease: LeaseSettings, live: _Live
) -> None:
    """Stand by until this replica holds the Lease, run a worker while it does, repeat."""
    elector = LeaseElector(
        api,
        namespace=lease.namespace,
        name=lease.name,
        identity=lease.identity,
        timings=lease.timings,
    )
    live.elector = elector
    async with elector:
        while True:
            await elector.wait_leading()
            log.info("%s: leading on Lease %s; starting the worker", lease.identity, lease.name)
            worker = make_worker()
            worker.may_act = elector.is_leader
            run = asyncio.create_task(worker.run(), name=f"{worker.definition.name}-leading")
            lost = asyncio.create_task(elector.wait_lost(), name=f"{lease.name}-lost")
            try:
                done, _ = await asyncio.wait({run, lost}, return_when=asyncio.FIRST_COMPLETED)
                if run in done:
                    run.result()
                    raise RuntimeError(f"the {worker.definition.name} worker stopped by itself")
            finally:
                await stop_tasks((run, lost))
            log.warning("%s: lost the Lease %s; standing by", lease.identity, lease.name)
