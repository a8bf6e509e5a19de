"""The watcher service: elect a leader, recover what was published, then list and watch forever.

``serve(settings)`` is what ``sandbus run watcher`` runs. Every replica runs the Lease loop
(:class:`~services.runtime.election.LeaseElector`); the one that leads runs a *session*, and a
session ends the moment leadership is lost (its tasks are cancelled, its memory dropped).
A session:

1. **Recovers** the published view from the bus (:mod:`services.watcher.core.recovery`): the state
   table, plus the event log's observed changes after the last one the server copied into it.
   Nothing is kept from an earlier session of the same process: another replica may have led
   in between. The tombstones it finds are scheduled for removal
   (:mod:`services.watcher.tombstones`).
2. Starts the :class:`~services.watcher.publisher.Publisher` (writes only while leading) and one
   :class:`~services.watcher.watching.ResourceWatcher` per watched resource, each of which
   relists every selection of its resource and diffs it against the recovered view (across
   the selections: an object vanished only when none lists it) before it watches.

A new leader therefore publishes exactly what changed since the last event that reached the
bus, whoever published it, and the fences and deterministic ids absorb a moment of overlap.

Stopping: one cancellation stops a replica, at any moment, within a bound. Every task it
starts (the Lease loop, the session, its publishing and watch tasks) is cancelled and awaited
on the way out, the Lease is released if held, and the NATS connection is closed with a bound;
:mod:`services.runtime.cancellation` explains why that needs more than ``TaskGroup`` on
Python 3.11. Operators read in the log when a replica leads, stands by, recovers and stops
leading (and why); :mod:`.watching` logs the relists and watch restarts.

Connections: NATS reconnects for ever, or within ``SANDBUS_NATS_RECONNECT_BUDGET``, through the
one :func:`~services.runtime.connection.connect_nats` every service uses (nats-py buffers
publishes while it does, and every write is retried until acknowledged); a connection gone for
good stops the service with an error, so that it is restarted. The API server is retried by
each loop with backoff. Neither being down at start-up is fatal: the service waits for both.

Tracing (``SANDBUS_TRACING``, or an OTLP endpoint; :mod:`services.runtime.reconcile.tracing`):
each publish is a ``Publish<Kind>`` span with the ids its event carries
(:mod:`services.watcher.tracing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.js.errors import APIError
from opentelemetry.trace import Tracer

from events.envelope import ObjectKey
from events.subjects import OBSERVED_SUBJECTS, STATE_SUBJECTS
from services.runtime.acked import AckedPublisher
from services.runtime.bus import ensure_bus, source_sequence
from services.runtime.cancellation import honour_lost_cancellation, stop_tasks, supervise
from services.runtime.connection import budget_from_environment, connect_nats
from services.runtime.election import LeaseElector
from services.runtime.endpoint import READINESS, metrics_endpoint
from services.runtime.kube import KubeApi
from services.runtime.kubeclient import ApiClient
from services.runtime.metrics import metrics_address, process_metrics
from services.runtime.reconcile.tracing import tracing_from_environment
from services.runtime.settings import Settings, kube_api_client
from services.runtime.streams import read_to_end
from services.watcher.config import WatcherConfig
from services.watcher.core.diffing import Seen
from services.watcher.core.recovery import (
    Recovered,
    StoredEvent,
    StoredEventError,
    recover,
    stored_event,
)
from services.watcher.publisher import Publisher
from services.watcher.resources import WATCHED_RESOURCES, WatchedResource
from services.watcher.streams import TRANSIENT, Backoff, PublishStats
from services.watcher.tombstones import Tombstones
from services.watcher.tracing import PublishSpans
from services.watcher.watching import ResourceWatcher

__all__ = ["Session", "Watcher", "serve"]

log = logging.getLogger(__name__)

(_EVENTS_FILTER,) = OBSERVED_SUBJECTS
(_STATE_FILTER,) = STATE_SUBJECTS


@dataclass
class Session:
    """One leadership term of this replica, exposed for tests and diagnostics."""

    recovered: Recovered | None = None
    publisher: Publisher | None = None
    tombstones: Tombstones | None = None
    watchers: list[ResourceWatcher] = field(default_factory=list)
    scanned_from: int | None = None
    """Where the event-log tail scan started (None: the whole log)."""
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when every resource has been relisted once and its changes published."""


class Watcher:
    """One watcher replica."""

    def __init__(
        self,
        nc: Client,
        api_client: ApiClient,
        config: WatcherConfig,
        *,
        resources: Sequence[WatchedResource] = WATCHED_RESOURCES,
        tracer: Tracer | None = None,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.acked = AckedPublisher(nc)
        """Every write of the event log, whichever session leads."""
        self.config = config
        self.resources = tuple(resources)
        self._by_kind = {resource.kind: resource for resource in self.resources}
        self.kube = KubeApi(api_client, request_timeout=config.request_timeout)
        self.elector = LeaseElector(
            KubeApi(api_client, request_timeout=max(1.0, config.lease.renew_deadline / 2)),
            namespace=config.lease_namespace,
            name=config.lease_name,
            identity=config.identity,
            timings=config.lease,
        )
        self.stats = PublishStats()
        self.spans = PublishSpans(tracer)
        self.session: Session | None = None
        self.sessions = 0

    def waiting_for(self, connected: bool) -> str | None:
        """What ``/readyz`` says: ready once connected to NATS and, leading, in sync with the
        cluster; a standby once it knows who leads."""
        if not connected:
            return "not connected to NATS"
        if not self.elector.is_leader():
            return None if self.elector.standing_by_for else "no leader known yet"
        if self.session is None or not self.session.ready.is_set():
            return "relisting the cluster"
        return None

    async def run(self) -> None:
        """Run until cancelled; on cancellation the Lease is released if held."""
        try:
            await self._provision()
            async with self.elector.running():
                while True:
                    await self.elector.wait_leading()
                    await self._lead_until_lost()
        finally:
            await self.acked.close()

    async def _provision(self) -> None:
        backoff = Backoff(initial=0.2, maximum=5.0)
        while True:
            try:
                await ensure_bus(self.js, self.config.bus)
                honour_lost_cancellation()
                return
            except (*TRANSIENT, APIError) as error:
                log.warning("provisioning the bus: %r; retrying", error)
                await backoff.wait()

    async def _lead_until_lost(self) -> None:
        self.sessions += 1
        session = Session()
        self.session = session
        leading = asyncio.create_task(self._lead(session), name="watcher-session")
        lost = asyncio.create_task(self.elector.wait_lost(), name="watcher-lost")
        try:
            await asyncio.wait({leading, lost}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            log.info("%s is stopping; ending its session", self.config.identity)
            raise
        finally:
            await stop_tasks((leading, lost))
        error = leading.exception() if leading.done() and not leading.cancelled() else None
        if error is not None and self.elector.is_leader():
            # Losing the lease fails the session's writes (LeadershipLost) by design; anything
            # else while still leading is a fault worth a log line and a pause.
            log.error("the watcher session failed; starting a new one", exc_info=error)
            await asyncio.sleep(1.0)
        else:
            log.info(
                "%s stopped leading: %s",
                self.config.identity,
                "its session ended" if self.elector.is_leader() else "it lost the Lease",
            )

    async def _lead(self, session: Session) -> None:
        bus = self.config.bus
        tombstones = Tombstones(self.js, bus.state_stream, bus.state_tombstone_ttl)
        session.tombstones = tombstones
        recovered = await self._recover(session, tombstones)
        session.recovered = recovered
        log.info(
            "%s recovered what was published: %d objects, event log read from sequence %s",
            self.config.identity,
            len(recovered.view),
            session.scanned_from or 1,
        )
        views: dict[str, dict[ObjectKey, Seen]] = defaultdict(dict)
        for key, seen in recovered.view.items():
            views[key.kind][key] = seen
        publisher = Publisher(
            self.nc,
            bus=self.config.bus,
            resources=self._by_kind,
            may_write=self.elector.is_leader,
            seqs=recovered.seqs,
            tombstones=tombstones,
            shards=self.config.shards,
            max_pending=self.config.max_pending,
            ack_timeout=self.config.ack_timeout,
            stats=self.stats,
            public=self.config.public_events,
            spans=self.spans,
            acked=self.acked,
        )
        session.publisher = publisher
        session.watchers = [
            ResourceWatcher(
                self.kube,
                resource,
                views[resource.kind],
                publisher.submit,
                inactivity_limit=self.config.inactivity_limit,
                server_timeout=self.config.server_timeout,
                page_size=self.config.list_page_size,
            )
            for resource in self.resources
        ]
        await supervise(
            [
                ("watcher-publisher", publisher.run()),
                ("watcher-tombstones", tombstones.run()),
                *((f"watch-{w.resource.plural}", w.run()) for w in session.watchers),
                ("watcher-ready", self._mark_ready(session)),
            ]
        )

    async def _mark_ready(self, session: Session) -> None:
        for watcher in session.watchers:
            await watcher.synced.wait()
        assert session.publisher is not None
        await session.publisher.idle()
        session.ready.set()
        log.info("%s is in sync with the cluster", self.config.identity)

    # -- recovery ---------------------------------------------------------------------------

    async def _recover(self, session: Session, tombstones: Tombstones) -> Recovered:
        bus = self.config.bus
        state: dict[ObjectKey, StoredEvent] = {}
        copied_through = 0
        async for msg in read_to_end(
            self.js, bus.state_stream, [_STATE_FILTER], name_prefix="watcher-recovery"
        ):
            try:
                entry = stored_event(msg.data, source_sequence(msg.headers))
            except StoredEventError as error:
                log.warning("state table: %s", error)
                continue
            state[entry.key] = entry
            copied_through = max(copied_through, entry.seq or 0)
            if entry.id.change == "deleted":
                tombstones.schedule(
                    msg.subject, entry.event_id, entry.seq, msg.metadata.timestamp.timestamp()
                )
        # The server copies in the log's order: what is not in the table comes after the
        # highest sequence it holds (all of the log when it names none).
        start = copied_through + 1 if copied_through else None
        session.scanned_from = start
        tail: dict[ObjectKey, StoredEvent] = {}
        async for msg in read_to_end(
            self.js,
            bus.event_log_stream,
            [_EVENTS_FILTER],
            start_seq=start,
            name_prefix="watcher-recovery",
        ):
            try:
                entry = stored_event(msg.data, msg.metadata.sequence.stream)
            except StoredEventError as error:
                log.debug("event log: %s", error)
                continue
            tail[entry.key] = entry  # oldest first: the last one read is the newest
        return recover(state, tail)


async def serve(settings: Settings) -> None:
    """``sandbus run watcher``: run one replica until cancelled, or until its NATS connection is
    gone for good (:mod:`services.runtime.connection`)."""
    config = WatcherConfig.from_env()
    address = metrics_address()
    tracing = tracing_from_environment("sandbus-watcher")
    connection = await connect_nats(
        settings.nats_url,
        name=f"sandbus-watcher {config.identity}",
        budget=budget_from_environment(),
        reconnect_wait=0.5,
    )
    try:
        api_client = await kube_api_client(settings)
        try:
            watcher = Watcher(
                connection.client,
                api_client,
                config,
                tracer=tracing.tracer if tracing is not None else None,
            )
            metrics = process_metrics()
            metrics.read_from(
                "sandbus_watcher",
                "The watcher's publishing: changes published, duplicates, fenced writes, "
                "retries, superseded state writes, dead letters.",
                lambda: dataclasses.asdict(watcher.stats),
            )
            READINESS.add("watcher", lambda: watcher.waiting_for(connection.client.is_connected))
            async with contextlib.AsyncExitStack() as stack:
                if address is not None:
                    await stack.enter_async_context(metrics_endpoint(metrics, *address))
                await supervise([("watcher", watcher.run()), ("nats", connection.lost())])
        finally:
            READINESS.discard("watcher")
            await api_client.close()
    finally:
        await connection.close()
        if tracing is not None:
            tracing.shutdown()
