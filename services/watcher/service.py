"""The watcher service: elect a leader, recover what was published, then list and watch forever.

``serve(settings)`` is what ``sandbus run watcher`` runs. Every replica runs the Lease loop
(:class:`~services.runtime.election.LeaseElector`); the one that leads runs a *session*, and a
session ends the moment leadership is lost (its tasks are cancelled, its memory dropped). The
watcher keeps one piece of its own state on the Lease: its event-log low-water mark, in an
annotation that every renewal records and a new leader reads
(:data:`~services.watcher.core.recovery.LOW_WATER_ANNOTATION`).
A session:

1. **Recovers** the published view from the bus (:mod:`services.watcher.core.recovery`): the state
   table, plus the event log's tail from the low-water mark found on the Lease and in the state
   table, repairing state-table entries that a predecessor's crash left behind. Nothing is
   kept from an earlier session of the same process: another replica may have led in between.
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
import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.js.errors import APIError
from opentelemetry.trace import Tracer

from events.codec import EventDecodeError, decode_event
from events.envelope import ObjectKey
from events.headers import CONTENT_TYPE, TRACEPARENT, TRACESTATE
from events.subjects import EVENT_LOG_SUBJECTS, STATE_SUBJECTS, state_subject
from events.types import ObjectAdded, ObjectDeleted, ObjectModified
from services.runtime.acked import AckedPublisher
from services.runtime.bus import ensure_bus
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
    LowWater,
    Recovered,
    Seqs,
    StoredEvent,
    StoredEventError,
    low_water_annotations,
    low_water_of,
    newest_per_key,
    recover,
    stored_event,
)
from services.watcher.publisher import (
    EVENT_SEQUENCE_HEADER,
    LOW_WATER_HEADER,
    Publisher,
    event_id_of_state_message,
    keeps_stored_message,
)
from services.watcher.resources import WATCHED_RESOURCES, WatchedResource
from services.watcher.streams import TRANSIENT, Backoff, PublishStats, fenced_publish
from services.watcher.tracing import PublishSpans
from services.watcher.watching import ResourceWatcher

__all__ = ["Session", "Watcher", "serve"]

log = logging.getLogger(__name__)

_EVENTS_FILTER = EVENT_LOG_SUBJECTS[0]  # sandbus.events.>: the watcher's part of the log
_STATE_FILTER = STATE_SUBJECTS[0]


@dataclass
class Session:
    """One leadership term of this replica, exposed for tests and diagnostics."""

    recovered: Recovered | None = None
    low_water: LowWater | None = None
    publisher: Publisher | None = None
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
        """Every write of the event log and the state table, whichever session leads."""
        self.config = config
        self.resources = tuple(resources)
        self._by_kind = {resource.kind: resource for resource in self.resources}
        self.kube = KubeApi(api_client, request_timeout=config.request_timeout)
        self._low_water: Callable[[], int | None] = lambda: None
        """The mark each renewal of the Lease records (None: the Lease keeps the one it has)."""
        self.elector = LeaseElector(
            KubeApi(api_client, request_timeout=max(1.0, config.lease.renew_deadline / 2)),
            namespace=config.lease_namespace,
            name=config.lease_name,
            identity=config.identity,
            timings=config.lease,
            annotations=lambda: low_water_annotations(self._low_water()),
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
            # The session's last mark stays true after it: record it on release.
            final = session.low_water.value if session.low_water is not None else None
            self._low_water = lambda: final
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
        # Until recovered, renewals keep the mark the Lease already carries (the predecessor's).
        self._low_water = lambda: None
        recovered, low_water = await self._recover(session)
        session.recovered, session.low_water = recovered, low_water
        log.info(
            "%s recovered what was published: %d objects, event log read from sequence %s",
            self.config.identity,
            len(recovered.view),
            session.scanned_from or 1,
        )
        self._low_water = lambda: low_water.value
        views: dict[str, dict[ObjectKey, Seen]] = defaultdict(dict)
        for key, seen in recovered.view.items():
            views[key.kind][key] = seen
        publisher = Publisher(
            self.nc,
            bus=self.config.bus,
            resources=self._by_kind,
            may_write=self.elector.is_leader,
            low_water=low_water,
            seqs=recovered.seqs,
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

    async def _recover(self, session: Session) -> tuple[Recovered, LowWater]:
        bus = self.config.bus
        state: dict[ObjectKey, StoredEvent] = {}
        marks: list[int] = []
        inherited = low_water_of(self.elector.inherited_annotations)
        if inherited:
            marks.append(inherited)
        async for msg in read_to_end(
            self.js, bus.state_stream, [_STATE_FILTER], name_prefix="watcher-recovery"
        ):
            try:
                entry = stored_event(
                    msg.data,
                    msg.metadata.sequence.stream,
                    msg.headers,
                    event_seq_header=EVENT_SEQUENCE_HEADER,
                    low_water_header=LOW_WATER_HEADER,
                )
            except StoredEventError as error:
                log.warning("state table: %s", error)
                continue
            state[entry.key] = entry
            if entry.low_water:
                marks.append(entry.low_water)
        start = max(marks) if marks else None
        session.scanned_from = start
        last_seq = (await self.js.stream_info(bus.event_log_stream)).state.last_seq
        honour_lost_cancellation()
        logged: dict[ObjectKey, tuple[StoredEvent, bytes, dict[str, str]]] = {}
        if start is None or start <= last_seq:
            async for msg in read_to_end(
                self.js,
                bus.event_log_stream,
                [_EVENTS_FILTER],
                start_seq=start,
                name_prefix="watcher-recovery",
            ):
                seq = msg.metadata.sequence.stream
                last_seq = max(last_seq, seq)
                try:
                    entry = stored_event(msg.data, seq)
                except StoredEventError as error:
                    log.debug("event log: %s", error)
                    continue
                logged[entry.key] = (entry, msg.data, dict(msg.headers or {}))
        recovered = recover(state, newest_per_key(entry for entry, _, _ in logged.values()))
        for repair in recovered.repairs:
            _, payload, headers = logged[repair.key]
            await self._repair_state(recovered, repair, payload, headers, start or 1)
        if recovered.repairs:
            log.info("repaired %d state-table entries from the event log", len(recovered.repairs))
        low_water = LowWater(start or 1)
        low_water.recovered(last_seq)
        return recovered, low_water

    async def _repair_state(
        self,
        recovered: Recovered,
        repair: StoredEvent,
        payload: bytes,
        log_headers: dict[str, str],
        low_water: int,
    ) -> None:
        key = repair.key
        seqs = recovered.seqs.get(key, Seqs(None, None))
        headers = {
            name: log_headers[name]
            for name in (CONTENT_TYPE, TRACEPARENT, TRACESTATE)
            if name in log_headers
        }
        headers[EVENT_SEQUENCE_HEADER] = str(repair.seq)
        headers[LOW_WATER_HEADER] = str(low_water)
        try:
            ours = decode_event(payload)
        except EventDecodeError:
            ours = None
        state_seq = await fenced_publish(
            self.js,
            self.acked,
            stream=self.config.bus.state_stream,
            subject=state_subject(key.kind, key.namespace or None, key.name),
            payload=payload,
            headers=headers,
            expected=seqs.state,
            event_id=repair.event_id,
            stored_id=event_id_of_state_message,
            may_write=self.elector.is_leader,
            repair_bus=self._provision,
            stats=self.stats,
            ack_timeout=self.config.ack_timeout,
            msg_ttl=(
                self.config.bus.state_tombstone_ttl if repair.id.change == "deleted" else None
            ),
            keep_stored=(
                functools.partial(keeps_stored_message, ours)
                if isinstance(ours, ObjectAdded | ObjectModified | ObjectDeleted)
                else None
            ),
        )
        recovered.seqs[key] = Seqs(repair.seq, state_seq)


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
