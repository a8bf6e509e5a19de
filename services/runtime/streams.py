"""Reading a JetStream stream to its end: the one bounded read of the bus.

The watcher's recovery reads the state table and the event log's tail, a worker reads the
state table on start (:mod:`services.runtime.reconcile.feeding`), and ``sandbus events
replay``, ``state`` and ``explain`` read the event log (:mod:`services.cli.history.reading`).
Each is the same read, :func:`read_to_end`:

- an ephemeral pull consumer of its own, named ``<prefix>-<random>``, with
  ``AckPolicy.NONE`` (nothing is consumed, so a reader can never take a message away from a
  worker), in memory, one replica, removed at the end and, should the reader die, by the
  server after an inactivity threshold;
- server-side filters (one or several subjects) and a start: every message
  (``DeliverPolicy.ALL``), the latest message per subject (``LAST_PER_SUBJECT``, for the state
  table), from a stream sequence, or from a stored time;
- fetched in large batches, but never more than is still pending: a pull that cannot be
  filled waits for its whole expiry before the server answers;
- ending as soon as the server says nothing is pending for the consumer (each message carries
  that count), or, with ``until_seq``, after that stream sequence, so a busy stream cannot keep
  a reader that must end reading forever. When a fetch comes back empty the reader asks the
  consumer rather than guess: messages may have expired meanwhile (the state table's
  deletion tombstones have a TTL).

:func:`push_to_end` is the same read for a large one, a worker's state table on start: the
server pushes the messages to a callback (with flow control, so a slow reader slows the server
instead of losing messages), which spares nats-py's per-message fetch machinery and reads
about twice as fast.

Every step raises a cancellation that nats-py lost on the way
(:func:`~services.runtime.cancellation.honour_lost_cancellation`), so a service that stops
while reading stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Final

from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from services.runtime.cancellation import honour_lost_cancellation

__all__ = ["filter_fields", "push_to_end", "read_to_end"]

FETCH_BATCH: Final = 1000
"""Messages asked for per fetch."""
_FETCH_TIMEOUT: Final = 2.0
_INACTIVE_THRESHOLD: Final = 60.0


def _start(
    deliver_policy: DeliverPolicy, start_seq: int | None, start_time: datetime | None
) -> dict[str, Any]:
    if start_seq is not None and start_time is not None:
        raise ValueError("a read starts at a sequence or at a time, not both")
    if start_seq is not None:
        return {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": start_seq}
    if start_time is not None:
        return {"deliver_policy": DeliverPolicy.BY_START_TIME, "opt_start_time": start_time}
    if deliver_policy not in (
        DeliverPolicy.ALL,
        DeliverPolicy.LAST,
        DeliverPolicy.LAST_PER_SUBJECT,
    ):
        raise ValueError(f"a read to the end cannot start with {deliver_policy}")
    return {"deliver_policy": deliver_policy}


def filter_fields(subjects: Sequence[str]) -> dict[str, Any]:
    """The ``ConsumerConfig`` fields that filter a consumer to ``subjects``."""
    if not subjects:
        raise ValueError("a read needs at least one subject filter")
    # A single filter goes in filter_subject so that servers before 2.10 (no filter_subjects)
    # still serve the common case.
    if len(subjects) == 1:
        return {"filter_subject": subjects[0]}
    return {"filter_subjects": list(subjects)}


async def read_to_end(
    js: JetStreamContext,
    stream: str,
    filters: Sequence[str],
    *,
    deliver_policy: DeliverPolicy = DeliverPolicy.ALL,
    start_seq: int | None = None,
    start_time: datetime | None = None,
    until_seq: int | None = None,
    batch: int = FETCH_BATCH,
    fetch_timeout: float = _FETCH_TIMEOUT,
    name_prefix: str = "sandbus-read",
) -> AsyncIterator[Msg]:
    """The stored messages of ``stream`` under ``filters``, oldest first, up to the end.

    ``start_seq`` or ``start_time`` start the read there; otherwise ``deliver_policy`` says
    which messages (every one, or ``LAST_PER_SUBJECT``). ``until_seq`` ends it after that
    stream sequence even if more arrived meanwhile.
    """
    name = f"{name_prefix}-{secrets.token_hex(6)}"
    config = ConsumerConfig(
        name=name,
        ack_policy=AckPolicy.NONE,
        inactive_threshold=_INACTIVE_THRESHOLD,
        mem_storage=True,
        num_replicas=1,
        **filter_fields(filters),
        **_start(deliver_policy, start_seq, start_time),
    )
    info = await js.add_consumer(stream, config=config)
    try:
        honour_lost_cancellation()
        pending = int(info.num_pending or 0)
        if pending == 0:
            return
        subscription = await js.pull_subscribe_bind(consumer=name, stream=stream)
        try:
            while True:
                honour_lost_cancellation()
                try:
                    messages = await subscription.fetch(
                        max(1, min(batch, pending)), timeout=fetch_timeout
                    )
                except NatsTimeoutError:
                    honour_lost_cancellation()
                    pending = int((await subscription.consumer_info()).num_pending or 0)
                    if pending == 0:
                        return
                    continue
                honour_lost_cancellation()
                for msg in messages:
                    yield msg
                    metadata = msg.metadata
                    pending = metadata.num_pending
                    if pending == 0 or (
                        until_seq is not None and metadata.sequence.stream >= until_seq
                    ):
                        return
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
    finally:
        with contextlib.suppress(Exception):
            await js.delete_consumer(stream, name)


_IDLE_HEARTBEAT: Final = 1.0
"""Seconds of silence after which the server says it is still there (and :func:`push_to_end`
asks whether anything is still pending: messages may expire before they are delivered)."""


def _pending(reply: str) -> int:
    """The messages still pending after this one, from its ack subject: what
    ``msg.metadata.num_pending`` says, without building the rest of the metadata, which was a
    tenth of a worker's reading of its state table."""
    tokens = reply.split(".")
    return int(tokens[8] if len(tokens) == 9 else tokens[10])  # nats-py's v1 and v2 layouts


async def push_to_end(
    js: JetStreamContext,
    stream: str,
    filters: Sequence[str],
    handle: Callable[[Msg], Awaitable[None]],
    *,
    deliver_policy: DeliverPolicy = DeliverPolicy.ALL,
    name_prefix: str = "sandbus-push",
) -> int:
    """Hand every stored message of ``stream`` under ``filters`` to ``handle``, oldest first,
    up to the end; returns how many. ``handle`` runs for one message at a time, in order; a
    heartbeat queues behind the messages before it, so the end is never declared while some
    are still waiting to be handled."""
    nc = js._nc  # the connection the context publishes on: its inbox, its subscription
    inbox = nc.new_inbox()
    done = asyncio.Event()
    handled = 0
    failure: list[BaseException] = []

    async def on_message(msg: Msg) -> None:
        nonlocal handled
        if msg.headers and msg.headers.get("Status") == "100":  # flow control or heartbeat
            if msg.reply:
                await msg.respond(b"")
            elif not done.is_set():
                done.set()  # a heartbeat: the server has nothing more to push right now
            return
        try:
            await handle(msg)
        except Exception as error:
            failure.append(error)
            done.set()
            return
        handled += 1
        if _pending(msg.reply) == 0:
            done.set()

    subscription = await nc.subscribe(inbox, cb=on_message)
    name = f"{name_prefix}-{secrets.token_hex(6)}"
    try:
        info = await js.add_consumer(
            stream,
            config=ConsumerConfig(
                name=name,
                deliver_subject=inbox,
                ack_policy=AckPolicy.NONE,
                inactive_threshold=_INACTIVE_THRESHOLD,
                mem_storage=True,
                num_replicas=1,
                flow_control=True,
                idle_heartbeat=_IDLE_HEARTBEAT,
                **filter_fields(filters),
                **_start(deliver_policy, None, None),
            ),
        )
        honour_lost_cancellation()
        if int(info.num_pending or 0) == 0:
            return 0
        while True:
            await done.wait()
            honour_lost_cancellation()
            if failure:
                raise failure[0]
            # Done, or a heartbeat: ask whether anything is still pending to be sure.
            if int((await js.consumer_info(stream, name)).num_pending or 0) == 0:
                return handled
            done.clear()
    finally:
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()
        with contextlib.suppress(Exception):
            await js.delete_consumer(stream, name)
