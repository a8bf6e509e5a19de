"""The watcher's settings, from ``SANDBUS_WATCHER_*`` environment variables.

``sandbus run watcher`` takes only the connection flags every service shares (``--nats``,
``--kubeconfig``); what is particular to the watcher comes from the environment, which is also
how a Deployment sets it:

=====================================  =========================================================
``SANDBUS_WATCHER_IDENTITY``           this replica's name in the Lease (default: the host name,
                                       which in a Pod is the Pod name, plus the process id)
``SANDBUS_WATCHER_LEASE_NAMESPACE``    namespace of the Lease (default: ``$POD_NAMESPACE``,
                                       else ``default``)
``SANDBUS_WATCHER_LEASE_NAME``         default ``sandbus-watcher``
``SANDBUS_WATCHER_LEASE_SECONDS``      lease duration (default 5); the renew deadline and the
                                       retry period follow client-go's proportions
``SANDBUS_WATCHER_INACTIVITY_SECONDS`` restart a watch that delivered nothing, not even a
                                       bookmark, for this long (default 70, as Kopf: bookmarks
                                       come about every minute)
``SANDBUS_WATCHER_SHARDS``             parallel per-object publishing queues (default 32)
``SANDBUS_WATCHER_MAX_PENDING``        changes queued before the watches pause (default 1024)
``SANDBUS_WATCHER_PAGE_SIZE``          list page size of a relist (default 500)
``SANDBUS_WATCHER_PUBLIC_EVENTS``      ``true``: also publish each event with its secrets redacted
                                       on ``sandbus.public.events.>`` (default ``false``)
``SANDBUS_BUS_DUPLICATE_WINDOW``       the event log's duplicate window in seconds, and
``SANDBUS_BUS_REPLICAS``               each stream's copies in a NATS cluster (defaults:
                                       :meth:`~services.runtime.bus.BusConfig.from_environment`)
=====================================  =========================================================
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from services.runtime.bus import BusConfig
from services.runtime.lease import LeaseTimings
from services.runtime.settings import setting

__all__ = ["WatcherConfig"]

_PREFIX = "SANDBUS_WATCHER_"


def _default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class WatcherConfig:
    identity: str = field(default_factory=_default_identity)
    lease_namespace: str = "default"
    lease_name: str = "sandbus-watcher"
    lease: LeaseTimings = field(default_factory=LeaseTimings)
    inactivity_limit: float = 70.0
    server_timeout: tuple[int, int] = (240, 480)
    """A watch asks the server to end it cleanly after a random time in this range (seconds),
    so long-lived connections are renewed before proxies or load balancers cut them."""
    shards: int = 32
    max_pending: int = 1024
    list_page_size: int = 500
    ack_timeout: float = 5.0
    request_timeout: float = 30.0
    bus: BusConfig = field(default_factory=BusConfig)
    public_events: bool = False
    """Also publish every event, redacted, for external subscribers (events/redaction.py)."""

    def __post_init__(self) -> None:
        if self.shards < 1 or self.max_pending < 1 or self.list_page_size < 1:
            raise ValueError("shards, max_pending and list_page_size must be positive")
        if self.inactivity_limit <= 0:
            raise ValueError("the inactivity limit must be positive")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WatcherConfig:
        env = os.environ if environ is None else environ

        def text(name: str, default: str) -> str:
            return setting(_PREFIX + name, str, default, env=env)

        def whole(name: str, default: int) -> int:
            return setting(_PREFIX + name, int, default, env=env)

        try:
            lease_seconds = setting(
                _PREFIX + "LEASE_SECONDS", float, None, minimum=0, above=True, env=env
            )
            return cls(
                identity=text("IDENTITY", "") or _default_identity(),
                lease_namespace=text(
                    "LEASE_NAMESPACE", setting("POD_NAMESPACE", str, "default", env=env)
                ),
                lease_name=text("LEASE_NAME", "sandbus-watcher"),
                lease=(
                    LeaseTimings.for_duration(lease_seconds) if lease_seconds else LeaseTimings()
                ),
                inactivity_limit=setting(_PREFIX + "INACTIVITY_SECONDS", float, 70.0, env=env),
                shards=whole("SHARDS", 32),
                max_pending=whole("MAX_PENDING", 1024),
                list_page_size=whole("PAGE_SIZE", 500),
                bus=BusConfig.from_environment(env),
                public_events=setting(_PREFIX + "PUBLIC_EVENTS", bool, False, env=env),
            )
        except ValueError as error:
            raise ValueError(f"invalid watcher setting in the environment: {error}") from None
