"""The Lease loop of one replica: acquire, renew, notice the loss, release on stop.

For any service of which one replica must be active at a time. The decisions are in
:mod:`services.runtime.lease`; this is the loop that reads and writes the Lease once per retry
period and keeps :meth:`LeaseElector.is_leader` true exactly as long as the last successful
renewal allows. A leader that cannot renew (API server unreachable, a Conflict because someone
else took the Lease) stops counting itself leader when its renew deadline passes, whatever the
loop is doing at that moment: :meth:`~LeaseElector.is_leader` reads the clock, it is not a flag
that a stuck request could fail to clear.

Use::

    async with LeaseElector(kube, namespace=ns, name="sandbus-sandbox", identity=pod) as lease:
        while True:
            await lease.wait_leading()
            ...  # act while lease.is_leader(); lease.wait_lost() returns when that ends

Leaving the block stops the loop and releases the Lease if this replica holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from events.envelope import ObjectKey
from services.runtime.cancellation import stop_tasks
from services.runtime.kube import KubeApi, KubeError
from services.runtime.lease import (
    LeaseTimings,
    Observation,
    acquired_lease,
    holder_of,
    leader_until,
    next_action,
    observe,
    released_lease,
    renewed_lease,
)

__all__ = ["LeaseElector"]

_RELEASE_PATIENCE = 5.0
"""Seconds a stopping leader waits for the API server to accept the released Lease."""

log = logging.getLogger(__name__)


class LeaseElector:
    """One replica's side of the election for the Lease ``namespace/name``."""

    def __init__(
        self,
        kube: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        timings: LeaseTimings | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings or LeaseTimings()
        self._clock = clock
        self._key = ObjectKey("Lease", namespace, name)
        self._lease: dict[str, Any] | None = None
        self._observation: Observation | None = None
        self._leading_until = 0.0
        self._changed = asyncio.Event()
        self._entered: contextlib.AbstractAsyncContextManager[LeaseElector] | None = None
        self.transitions = 0
        """How many times this replica became leader."""
        self.standing_by_for: str | None = None
        """The holder this replica last found on the Lease while not leading (None: it leads,
        or has not read the Lease yet)."""

    # -- what the service asks --------------------------------------------------------------

    def is_leader(self) -> bool:
        return self._clock() < self._leading_until

    async def wait_leading(self) -> None:
        """Return once this replica leads (at once if it does)."""
        while not self.is_leader():
            self._changed.clear()
            await self._changed.wait()

    async def wait_lost(self) -> None:
        """Return once this replica is not the leader (at once if it is not)."""
        while True:
            remaining = self._leading_until - self._clock()
            if remaining <= 0:
                return
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._changed.wait()

    # -- the loop ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[LeaseElector]:
        """Run the Lease loop in the background; on exit, release the Lease if held."""
        task = asyncio.create_task(self._loop(), name=f"lease-{self.name}")
        try:
            yield self
        finally:
            # Not ``suppress(CancelledError)`` around ``await task``: that would also swallow
            # a cancellation of the caller arriving meanwhile; stop_tasks defers it instead.
            try:
                await stop_tasks((task,))
            finally:
                await self._release()

    async def __aenter__(self) -> LeaseElector:
        if self._entered is not None:
            raise RuntimeError(f"the election for lease {self.name} is already running")
        self._entered = self.running()
        return await self._entered.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        entered, self._entered = self._entered, None
        assert entered is not None
        return await entered.__aexit__(exc_type, exc, traceback)

    async def _loop(self) -> None:
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except KubeError as error:
                # 409: another replica wrote the Lease first; read it again next round.
                log.log(
                    logging.DEBUG if error.status == 409 else logging.WARNING,
                    "lease %s/%s: %s%s",
                    self.namespace,
                    self.name,
                    "API server unreachable: " if error.unanswered else "",
                    error,
                )
                self._lease = None
            except Exception:
                log.exception("lease %s/%s: unexpected failure", self.namespace, self.name)
                self._lease = None
            self._changed.set()
            await asyncio.sleep(self.timings.retry_period)

    async def _step(self) -> None:
        started = self._clock()
        now = datetime.now(UTC)
        held = self._lease if self.is_leader() else None
        if held is not None and holder_of(held) == self.identity:
            # Renew straight from our last write: its resourceVersion is the precondition.
            written = await self._kube.replace(renewed_lease(held, now=now))
            self._won(started, written, renewal=True)
            return
        lease = await self._read()
        if lease is not None:
            self._observation = observe(self._observation, lease, started)
        action = next_action(lease, self._observation, self.identity, started, self.timings)
        if action == "wait":
            self._lease = lease
            self._note_holder(holder_of(lease))
            return
        if action == "renew":
            # The Lease names us but we do not lead: a previous run of this replica (same
            # identity) held it. Taking it back is an acquisition.
            assert lease is not None
            renewal = self.is_leader()
            written = await self._kube.replace(renewed_lease(lease, now=now))
            self._won(started, written, renewal=renewal)
            return
        body = acquired_lease(
            lease,
            namespace=self.namespace,
            name=self.name,
            identity=self.identity,
            now=now,
            timings=self.timings,
        )
        if action == "create":
            written = await self._kube.create(body)
        else:
            written = await self._kube.replace(body)
        self._won(started, written, renewal=False)

    async def _read(self) -> dict[str, Any] | None:
        try:
            return await self._kube.get(self._key)
        except KubeError as error:
            if error.not_found:
                return None
            raise

    def _note_holder(self, holder: str) -> None:
        """Log once per holder, not once per retry, that this replica stands by."""
        if holder != self.standing_by_for:
            self.standing_by_for = holder
            log.info(
                "%s is a standby: lease %s/%s is held by %s",
                self.identity,
                self.namespace,
                self.name,
                holder or "nobody",
            )

    def _won(self, started: float, written: dict[str, Any], *, renewal: bool) -> None:
        self.standing_by_for = None
        self._lease = written
        if not renewal:
            self.transitions += 1
            log.info(
                "%s leads %s/%s (transition %s)",
                self.identity,
                self.namespace,
                self.name,
                written.get("spec", {}).get("leaseTransitions"),
            )
        self._leading_until = leader_until(started, self.timings)
        self._changed.set()

    async def _release(self) -> None:
        # Not gated on is_leader(): a loaded replica may stop just after its renew deadline,
        # and its Lease should still be handed back. The write is conditional on the
        # resourceVersion of our last write, so it fails (409) if anyone took the Lease since.
        lease = self._lease
        if lease is None or holder_of(lease) != self.identity:
            return
        self._leading_until = 0.0
        self._changed.set()
        try:
            # A stop has the Pod's grace period; a slow API server should not cost the handover.
            async with asyncio.timeout(max(self.timings.retry_period * 2, _RELEASE_PATIENCE)):
                try:
                    await self._kube.replace(self._released(lease))
                except KubeError as error:
                    if error.status != 409:
                        raise
                    # Written since: by a renewal of ours still in flight when the stop came,
                    # or by a new holder. Hand it back only if it is still ours.
                    lease = await self._kube.get(self._key)
                    if holder_of(lease) != self.identity:
                        log.info("%s/%s is no longer ours to release", self.namespace, self.name)
                        return
                    await self._kube.replace(self._released(lease))
            log.info("%s released %s/%s", self.identity, self.namespace, self.name)
        except (KubeError, TimeoutError) as error:
            log.warning("releasing lease %s/%s failed: %r", self.namespace, self.name, error)

    def _released(self, lease: dict[str, Any]) -> dict[str, Any]:
        return released_lease(lease, now=datetime.now(UTC))
