"""The one way a service connects to NATS: reconnect for as long as it takes, or fail loudly.

nats-py's defaults give up after 60 reconnect attempts two seconds apart, and then leave a
closed client behind: every later call raises ``ConnectionClosedError`` while the process stays
alive. That is the worst of both worlds for a controller on Kubernetes, which restarts a
process that exits but cannot see one that idles. So every service connects through
:func:`connect_nats`:

- **Reconnect for ever by default**, paced (nats-py's wait between attempts, with jitter), and
  log the outage and the recovery once each. JetStream keeps the durable consumers and streams
  across a server restart on the same store, so a reconnected service carries on where it
  was.
- **Or within a budget** (``SANDBUS_NATS_RECONNECT_BUDGET`` seconds): a connection that stays
  down longer is closed on purpose.
- **A connection closed for good is fatal**: :meth:`NatsConnection.lost` raises
  :class:`ConnectionLost`; a service runs it beside its work (``supervise``), so it exits
  non-zero and its Deployment restarts it. Never alive doing nothing.

The first connection is retried the same way, so a service that starts before NATS waits for
it rather than crash-looping. URLs are logged :func:`redacted`: in a Pod the URL carries the
service's password.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext

from services.runtime.cancellation import honour_lost_cancellation
from services.runtime.settings import setting

__all__ = [
    "ConnectionLost",
    "NatsConnection",
    "budget_from_environment",
    "connect_nats",
    "server_urls",
    "tls_context",
]

log = logging.getLogger(__name__)

RECONNECT_BUDGET_ENV: Final = "SANDBUS_NATS_RECONNECT_BUDGET"
RECONNECT_WAIT: Final = 1.0
"""Seconds between reconnect attempts (nats-py adds jitter)."""


def redacted(url: str) -> str:
    """``url`` (one or several, comma-separated) with its secrets masked, fit for a log line:
    the NATS URL of a Deployment carries the service's password (``user:password@``), and a
    lone ``token@`` is a secret too."""

    def one(part: str) -> str:
        split = urlsplit(part.strip())
        _, at, host = split.netloc.rpartition("@")
        if not at:
            return part.strip()
        shown = f"{split.username}:***" if split.password is not None else "***"
        return urlunsplit(split._replace(netloc=f"{shown}@{host}"))

    return ",".join(one(part) for part in url.split(","))


async def close_quietly(client: Client, *, bound: float = 2.0) -> None:
    """Close ``client``, giving up after ``bound`` seconds: a stop must not hang on a NATS that
    is away (whatever was still buffered for it is lost either way)."""
    try:
        async with asyncio.timeout(bound):
            await client.close()
    except Exception as error:
        log.debug("closing the NATS connection: %r", error)


class ConnectionLost(RuntimeError):
    """The NATS connection is gone for good: the service must stop (and be restarted)."""


def reconnect_budget(value: str | None) -> float | None:
    """Seconds from ``SANDBUS_NATS_RECONNECT_BUDGET``: None (unset or empty) is for ever."""
    env = {RECONNECT_BUDGET_ENV: value or ""}
    return setting(RECONNECT_BUDGET_ENV, float, None, minimum=0, above=True, env=env)


@dataclass
class NatsConnection:
    client: Client
    name: str
    _lost: asyncio.Future[None] = field(repr=False)

    @property
    def js(self) -> JetStreamContext:
        return self.client.jetstream()

    async def lost(self) -> None:
        """Return never; raise :class:`ConnectionLost` once the connection is gone for good."""
        await asyncio.shield(self._lost)
        raise ConnectionLost(f"{self.name}: the NATS connection was closed")

    async def close(self) -> None:
        if not self._lost.done():
            self._lost.set_result(None)  # a close of ours is not a loss
        await close_quietly(self.client)


TLS_CA_ENV: Final = "SANDBUS_NATS_TLS_CA"
TLS_CERT_ENV: Final = "SANDBUS_NATS_TLS_CERT"
TLS_KEY_ENV: Final = "SANDBUS_NATS_TLS_KEY"


def tls_context(env: Mapping[str, str] | None = None) -> ssl.SSLContext | None:
    """The TLS a service talks to NATS with, from the environment: ``SANDBUS_NATS_TLS_CA`` (the
    CA that signed the servers' certificates; else the system's), and ``SANDBUS_NATS_TLS_CERT``
    with ``SANDBUS_NATS_TLS_KEY`` (a client certificate, for a server that verifies clients).
    None when none is set: a ``tls://`` URL then uses the system's CAs, a ``nats://`` one no
    TLS. A file that cannot be read raises ValueError naming the variable."""
    env = os.environ if env is None else env
    ca, cert, key = (env.get(name, "").strip() for name in (TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV))
    if not (ca or cert or key):
        return None
    if bool(cert) != bool(key):
        raise ValueError(f"{TLS_CERT_ENV} and {TLS_KEY_ENV} go together: set both or neither")
    try:
        context = ssl.create_default_context(cafile=ca or None)
    except (OSError, ssl.SSLError) as error:
        raise ValueError(f"{TLS_CA_ENV}={ca!r}: {error}") from None
    if cert:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as error:
            raise ValueError(f"{TLS_CERT_ENV}={cert!r}, {TLS_KEY_ENV}={key!r}: {error}") from None
    return context


def server_urls(url: str) -> list[str]:
    """The servers a URL names: ``nats://a:4222,nats://b:4222`` (a cluster, as the NATS tools
    write it) is two."""
    urls = [part.strip() for part in url.split(",") if part.strip()]
    if not urls:
        raise ValueError(f"no NATS server in {url!r}")
    return urls


async def connect_nats(
    url: str,
    *,
    name: str,
    budget: float | None = None,
    reconnect_wait: float = RECONNECT_WAIT,
    **options: Any,
) -> NatsConnection:
    """Connect as ``name``; ``budget`` bounds how long the connection may stay down (None: for
    ever), the first connection included. TLS comes from the environment (:func:`tls_context`)
    unless ``options`` give it. Extra ``options`` go to ``nats.connect``."""
    if "tls" not in options:
        context = tls_context()
        if context is not None:
            options["tls"] = context
    loop = asyncio.get_running_loop()
    lost: asyncio.Future[None] = loop.create_future()
    give_up: asyncio.TimerHandle | None = None
    client: Client | None = None
    closing: set[asyncio.Task[None]] = set()

    def fail(reason: str) -> None:
        if not lost.done():
            log.error("%s: %s; stopping", name, reason)
            lost.set_exception(ConnectionLost(f"{name}: {reason}"))
            lost.exception()  # retrieved here: whoever awaits lost() sees it anyway
        if client is not None and not client.is_closed:
            task = loop.create_task(client.close())
            closing.add(task)
            task.add_done_callback(closing.discard)

    async def disconnected() -> None:
        nonlocal give_up
        if lost.done():
            return
        log.warning("%s: NATS disconnected; reconnecting", name)
        if budget is not None and give_up is None:
            give_up = loop.call_later(budget, fail, f"NATS unreachable for more than {budget:g} s")

    async def reconnected() -> None:
        nonlocal give_up
        log.info("%s: NATS reconnected", name)
        if give_up is not None:
            give_up.cancel()
            give_up = None

    async def closed() -> None:
        fail("the NATS connection was closed")

    async def error(exception: Exception) -> None:
        if client is None and not warned:
            warned.append(exception)
            log.warning("%s: cannot connect to NATS at %s: %r; retrying", name, shown, exception)
        else:
            log.debug("%s: NATS: %r", name, exception)

    warned: list[Exception] = []

    shown = redacted(url)

    callbacks: dict[str, Callable[..., Awaitable[None]]] = {
        "disconnected_cb": disconnected,
        "reconnected_cb": reconnected,
        "closed_cb": closed,
        "error_cb": error,
    }
    try:
        # nats-py retries a first connection by itself as it reconnects (for ever here); the
        # budget bounds that wait too.
        async with asyncio.timeout(budget):
            client = await nats.connect(
                server_urls(url),
                name=name,
                connect_timeout=2,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=reconnect_wait,
                ping_interval=10,
                max_outstanding_pings=3,
                **callbacks,
                **options,
            )
    except TimeoutError:
        raise ConnectionLost(
            f"{name}: NATS at {shown} did not answer within {budget:g} s"
        ) from None
    try:
        honour_lost_cancellation()
    except asyncio.CancelledError:
        await close_quietly(client)
        raise
    log.info("%s: connected to NATS at %s", name, shown)
    return NatsConnection(client, name, lost)


def budget_from_environment() -> float | None:
    return reconnect_budget(os.environ.get(RECONNECT_BUDGET_ENV))
