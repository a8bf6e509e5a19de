"""The per-service NATS users, against a real nats-server running the committed nats.conf.

Each test does what a service really does, through the project's own bus code where there is some:
ensure_bus, publish_event, enqueue_warm, the watcher's removal of a tombstone, the workers' BusFeed
and MemoStore. It passes when the server lets it through. What a user must not do is tried too;
the server must refuse it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime

import nats
import nats.js.errors
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from api.opensandbox import LABEL_POOL_NAME
from devtools.natsd import find_nats_server
from events.codec import nats_subject, state_table_subject
from events.subjects import (
    MEMO_SUBJECTS,
    decision_subject,
    event_filter,
    memo_filter,
    memo_subject,
    warm_consumer_name,
    warm_queue_filter,
)
from events.types import ObjectEvent, WarmEntry, WarmQueued, observed_event, warm_queued_event
from services.runtime.bus import (
    BusConfig,
    enqueue_warm,
    ensure_bus,
    publish_dead_letter,
    publish_event,
)
from services.runtime.reconcile.feeding import BusFeed, durable_name
from services.runtime.reconcile.memory import KeyRecord, MemoStore
from tests.component.deploy.securednats import Client, SecuredNats
from tests.support.statetable import state_table_copied
from tests.unit.deploy.manifests import (
    BASE,
    NATS_CONF,
    example_password_variables,
    nats_conf_value,
    provision_script,
    render,
)

Connect = Callable[..., Awaitable[Client]]
BUS = BusConfig()
STREAMS = {
    BUS.event_log_stream,
    BUS.state_stream,
    BUS.warm_stream,
    BUS.dead_letter_stream,
    BUS.memo_stream,
}
WORKERS = ("sandbox", "pool", "claim", "snapshot")
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _sandbox_event(name: str = "s1", resource_version: str = "7") -> ObjectEvent:
    return observed_event(
        "added",
        {
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"uid-{name}",
                "resourceVersion": resource_version,
            },
            "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
        },
        time=NOW,
    )


def _pod_event(name: str) -> ObjectEvent:
    return observed_event(
        "added",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"uid-{name}",
                "resourceVersion": "3",
                "labels": {LABEL_POOL_NAME: "p"},
            },
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
        time=NOW,
    )


async def _provision(connect: Connect) -> None:
    provisioner = await connect("provisioner")
    await ensure_bus(provisioner.js, BUS)


# --- the server and its configuration ----------------------------------------------------------


def test_the_server_accepts_the_config_with_every_password_set() -> None:
    passwords = {variable: "x" for variable in example_password_variables()}

    result = _check_config(passwords)

    assert result.returncode == 0, result.stderr + result.stdout


def test_a_missing_password_stops_the_server_and_names_it() -> None:
    passwords = {variable: "x" for variable in example_password_variables()}
    del passwords["SANDBUS_NATS_PASSWORD_CLAIM"]
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("SANDBUS_NATS_PASSWORD_")
    }

    result = _check_config(passwords, environment)

    assert result.returncode != 0
    assert "SANDBUS_NATS_PASSWORD_CLAIM" in result.stderr + result.stdout


def test_a_password_of_digits_alone_stops_the_server() -> None:
    # deploy/README.md warns of this: nats-server reads such a value as a number, not a string.
    passwords = {variable: "x" for variable in example_password_variables()}
    passwords["SANDBUS_NATS_PASSWORD_READER"] = "12345678"

    result = _check_config(passwords)

    assert result.returncode != 0
    assert "is int64, not string" in result.stderr + result.stdout


async def test_a_wrong_password_is_refused(secured_nats: SecuredNats) -> None:
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(
            f"nats://watcher:wrong@127.0.0.1:{secured_nats.port}", allow_reconnect=False
        )


# --- provisioning ------------------------------------------------------------------------------


def test_the_init_containers_script_provisions_the_streams_as_provisioner(
    secured_nats: SecuredNats,
) -> None:
    script = provision_script(render(BASE))
    environment = {**os.environ, "SANDBUS_NATS_URL": secured_nats.url("provisioner")}

    def run() -> str:
        result = subprocess.run(
            [sys.executable, "-c", script],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    first, second = run(), run()

    assert sorted(first.splitlines()) == sorted(f"stream {name}: created" for name in STREAMS)
    assert sorted(second.splitlines()) == sorted(f"stream {name}: unchanged" for name in STREAMS)


@pytest.mark.parametrize("user", ["watcher", *WORKERS, "reader"])
async def test_only_the_provisioner_creates_or_changes_streams(connect: Connect, user: str) -> None:
    client = await connect(user)

    for action in ("CREATE", "UPDATE", "DELETE", "PURGE"):
        subject = f"$JS.API.STREAM.{action}.{BUS.event_log_stream}"
        assert await client.publish_refused(subject), subject


async def test_the_provisioner_reads_and_writes_no_data_and_deletes_no_stream(
    connect: Connect,
) -> None:
    provisioner = await connect("provisioner")

    assert await provisioner.publish_refused("sandbus.events.sandbox.default.s1")
    assert await provisioner.publish_refused(f"$JS.API.STREAM.DELETE.{BUS.event_log_stream}")
    assert await provisioner.publish_refused(f"$JS.API.CONSUMER.CREATE.{BUS.event_log_stream}")


@pytest.mark.parametrize("user", ["watcher", *WORKERS])
async def test_once_provisioned_a_services_ensure_bus_only_checks(
    connect: Connect, user: str
) -> None:
    # The watcher and the sandbox worker call ensure_bus at start; with the streams in place that
    # is STREAM.INFO only, which every service may do.
    await _provision(connect)
    client = await connect(user)

    assert await ensure_bus(client.js, BUS) == dict.fromkeys(STREAMS, "unchanged")
    assert client.violations == []


async def test_the_provisioner_creates_the_memo_stream_as_the_workers_need_it(
    connect: Connect,
) -> None:
    provisioner = await connect("provisioner")

    report = await ensure_bus(provisioner.js, BUS)
    memo = (await provisioner.js.stream_info(BUS.memo_stream)).config

    assert report[BUS.memo_stream] == "created"
    assert memo.subjects == list(MEMO_SUBJECTS)
    assert memo.max_msgs_per_subject == 1  # one record per worker and key
    assert memo.allow_msg_ttl  # tombstones expire; no worker may purge
    assert provisioner.violations == []


# --- watcher -----------------------------------------------------------------------------------


async def test_the_watcher_appends_to_the_event_log_which_the_state_table_copies(
    connect: Connect,
) -> None:
    await _provision(connect)
    watcher = await connect("watcher")
    event = _sandbox_event()

    ack = await publish_event(watcher.js, event, BUS)
    await state_table_copied(watcher.js, 1, BUS)
    last_event = await watcher.js.get_last_msg(
        BUS.event_log_stream, nats_subject(event), direct=True
    )
    last_state = await watcher.js.get_last_msg(
        BUS.state_stream, state_table_subject(event), direct=True
    )

    assert ack.stream == BUS.event_log_stream
    assert last_event.data == last_state.data
    assert watcher.violations == []


async def test_the_watcher_removes_a_tombstone_from_the_state_table(connect: Connect) -> None:
    await _provision(connect)
    watcher = await connect("watcher")
    await publish_event(watcher.js, _sandbox_event(), BUS)
    await state_table_copied(watcher.js, 1, BUS)
    stored = await watcher.js.get_last_msg(
        BUS.state_stream, state_table_subject(_sandbox_event()), direct=True
    )

    assert await watcher.js.delete_msg(BUS.state_stream, stored.seq)
    assert watcher.violations == []


async def test_the_largest_kubernetes_object_fits_in_one_message(connect: Connect) -> None:
    # etcd stores objects up to 1.5 MiB; nats-server's default max_payload (1 MB) would refuse
    # an event carrying one.
    await _provision(connect)
    watcher = await connect("watcher")
    largest = b"x" * (3 * 1024 * 1024 // 2 + 64 * 1024)  # 1.5 MiB of object + envelope

    ack = await watcher.js.publish(
        "sandbus.events.sandbox.default.big", largest, stream=BUS.event_log_stream
    )

    assert ack.seq == 1


async def test_the_watcher_reads_the_state_table_through_its_own_consumers(
    connect: Connect,
) -> None:
    await _provision(connect)
    watcher = await connect("watcher")
    event = _sandbox_event()
    await publish_event(watcher.js, event, BUS)
    await state_table_copied(watcher.js, 1, BUS)

    subscription = await watcher.js.pull_subscribe(
        "sandbus.state.>",
        stream=BUS.state_stream,
        config=ConsumerConfig(
            ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT
        ),
    )
    (message,) = await subscription.fetch(1, timeout=5)
    await subscription.unsubscribe()

    assert message.subject == state_table_subject(event)


async def test_the_watcher_cannot_act_as_a_worker(connect: Connect) -> None:
    watcher = await connect("watcher")

    assert await watcher.publish_refused(decision_subject("sandbox", "Sandbox", "default", "s1"))
    assert await watcher.publish_refused("sandbus.warm.default.abc.s1")
    assert await watcher.publish_refused("sandbus.state.sandbox.default.s1")
    assert await watcher.publish_refused(f"$JS.API.CONSUMER.CREATE.{BUS.warm_stream}.x")


# --- workers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("worker", WORKERS)
async def test_a_worker_cannot_publish_changes_or_state_or_other_workers_decisions(
    connect: Connect, worker: str
) -> None:
    client = await connect(worker)
    other = "pool" if worker != "pool" else "claim"

    assert await client.publish_refused("sandbus.events.sandbox.default.s1")
    assert await client.publish_refused("sandbus.state.sandbox.default.s1")
    assert await client.publish_refused(decision_subject(other, "Sandbox", "default", "s1"))
    assert await client.publish_refused(
        f"$JS.API.CONSUMER.CREATE.{BUS.event_log_stream}.{durable_name(other)}"
    )
    assert await client.publish_refused(
        f"$JS.API.CONSUMER.MSG.NEXT.{BUS.event_log_stream}.{durable_name(other)}"
    )
    assert await client.publish_refused(f"$JS.API.CONSUMER.CREATE.{BUS.event_log_stream}")


@pytest.mark.parametrize("worker", WORKERS)
async def test_a_worker_records_its_own_decisions_and_dead_letters(
    connect: Connect, worker: str
) -> None:
    await _provision(connect)
    client = await connect(worker)

    decision = await client.js.publish(
        decision_subject(worker, "Sandbox", "default", "s1"), b"{}", stream=BUS.event_log_stream
    )
    dead = await publish_dead_letter(
        client.js,
        original_subject="sandbus.events.sandbox.default.s1",
        payload=b"not json",
        reason="test",
        config=BUS,
        rejected_by=durable_name(worker),
    )

    assert (decision.stream, dead.stream) == (BUS.event_log_stream, BUS.dead_letter_stream)
    assert client.violations == []


async def test_a_worker_loads_the_state_table_then_follows_its_durable(connect: Connect) -> None:
    await _provision(connect)
    watcher = await connect("watcher")
    before, after = _sandbox_event("before"), _sandbox_event("after")
    await publish_event(watcher.js, before, BUS)
    await state_table_copied(watcher.js, 1, BUS)
    sandbox = await connect("sandbox")
    delivered: list[str] = []
    arrived = asyncio.Event()

    def deliver(event: ObjectEvent) -> None:
        delivered.append(event.name)
        if event.name == "after":
            arrived.set()

    feed = BusFeed(
        sandbox.js,
        worker="sandbox",
        kinds=["Sandbox"],
        deliver=deliver,
        load=lambda state: delivered.append(state.key.name),
        bus=BUS,
    )
    running = asyncio.create_task(feed.run())
    try:
        async with asyncio.timeout(20):
            await feed.loaded.wait()
            await publish_event(watcher.js, after, BUS)
            await arrived.wait()
        durable = await sandbox.js.consumer_info(BUS.event_log_stream, durable_name("sandbox"))
        async with asyncio.timeout(20):
            while durable.num_ack_pending or durable.num_pending:
                await asyncio.sleep(0.05)
                durable = await sandbox.js.consumer_info(
                    BUS.event_log_stream, durable_name("sandbox")
                )
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)

    # "before" is loaded from the state table; the durable, which starts a margin before now,
    # may deliver its event again (harmless: the cache keeps the newer state).
    assert delivered[0] == "before" and delivered[-1] == "after"
    assert set(delivered) == {"before", "after"}
    assert durable.num_ack_pending == 0  # its acks were allowed
    assert sandbox.violations == []


@pytest.mark.parametrize(
    ("worker", "durable"), [("pool", "pool-worker"), ("claim", "claim-worker-r1")]
)
async def test_a_worker_follows_kinds_on_demand_through_a_durable_of_its_own(
    connect: Connect, worker: str, durable: str
) -> None:
    """The feed of the kinds a worker follows on demand (its Pods): made, loaded from the state
    table, followed, and deleted again, all under the worker's own user; no other worker's user
    may touch the pool worker's."""
    await _provision(connect)
    watcher = await connect("watcher")
    client = await connect(worker)
    arrived = asyncio.Event()
    feed = BusFeed(
        client.js,
        worker=worker,
        kinds=["Pod"],
        deliver=lambda event: arrived.set(),
        load=lambda state: None,
        bus=BUS,
        durable_suffix="-on-demand",
    )
    feed.durable = f"{durable}-on-demand"  # a claim replica's, as the service names it
    running = asyncio.create_task(feed.run())
    try:
        async with asyncio.timeout(20):
            await feed.loaded.wait()
            await publish_event(watcher.js, _pod_event("p1"), BUS)
            await arrived.wait()
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    await client.js.consumer_info(BUS.event_log_stream, feed.durable)
    await feed.forget_durable()
    with pytest.raises(nats.js.errors.NotFoundError):
        await client.js.consumer_info(BUS.event_log_stream, feed.durable)
    assert client.violations == []
    other = await connect("claim" if worker == "pool" else "snapshot")
    assert await other.publish_refused(
        f"$JS.API.CONSUMER.DELETE.{BUS.event_log_stream}.pool-worker-on-demand"
    )


# --- the workers' memory ----------------------------------------------------------------------


def _record(name: str, memo: object = None) -> KeyRecord:
    return KeyRecord(kind="Sandbox", namespace="default", name=name, memo=memo)


@pytest.mark.parametrize("worker", WORKERS)
async def test_a_worker_keeps_its_memory_and_its_successor_reads_it_back(
    connect: Connect, worker: str
) -> None:
    await _provision(connect)
    leader, successor = await connect(worker), await connect(worker)
    other = "pool" if worker != "pool" else "claim"
    await MemoStore((await connect(other)).js, worker=other, bus=BUS).put(_record("a", {"x": 0}))
    memos = MemoStore(leader.js, worker=worker, bus=BUS)

    await memos.put(_record("a", {"x": 1}))
    await memos.put(_record("a", {"x": 2}))  # the latest per key is what counts
    await memos.put(_record("b", {"x": 1}))
    await memos.put(_record("b"))  # forgotten: a null with a TTL, no purge
    # MemoStore.load: an ephemeral LAST_PER_SUBJECT consumer filtered to its own memos.
    loaded = await MemoStore(successor.js, worker=worker, bus=BUS).load()

    assert {key.name: record.memo for key, record in loaded.items()} == {"a": {"x": 2}}
    assert leader.violations == successor.violations == []


@pytest.mark.parametrize("worker", WORKERS)
async def test_a_worker_creates_inspects_pulls_and_deletes_its_memo_consumer(
    connect: Connect, worker: str
) -> None:
    await _provision(connect)
    client = await connect(worker)
    await MemoStore(client.js, worker=worker, bus=BUS).put(_record("a", {"x": 1}))

    name = f"{worker}-memo-load"

    # A named consumer with one filter: nats-py puts the filter into the create subject.
    await client.js.add_consumer(
        BUS.memo_stream,
        ConsumerConfig(
            name=name,
            filter_subject=memo_filter(worker),
            ack_policy=AckPolicy.NONE,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            inactive_threshold=60,
        ),
    )
    subscription = await client.js.pull_subscribe_bind(consumer=name, stream=BUS.memo_stream)
    info = await subscription.consumer_info()
    (message,) = await subscription.fetch(1, timeout=5)
    await subscription.unsubscribe()
    deleted = await client.js.delete_consumer(BUS.memo_stream, name)

    assert info.config.filter_subject == memo_filter(worker)
    assert message.subject == memo_subject(worker, "Sandbox", "default", "a")
    assert deleted
    assert client.violations == []


@pytest.mark.parametrize("worker", WORKERS)
async def test_a_worker_cannot_touch_another_workers_memory(connect: Connect, worker: str) -> None:
    client = await connect(worker)
    other = "pool" if worker != "pool" else "claim"
    memo = BUS.memo_stream

    for subject in (
        memo_subject(other, "Sandbox", "default", "s1"),
        # a consumer on another worker's memos, or on all of them, or with no filter in its
        # create subject (whose filter the right could not check)
        f"$JS.API.CONSUMER.CREATE.{memo}.x.{memo_filter(other)}",
        f"$JS.API.CONSUMER.CREATE.{memo}.x.sandbus.memo.>",
        f"$JS.API.CONSUMER.CREATE.{memo}.x",
        f"$JS.API.CONSUMER.CREATE.{memo}",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{memo}.x",
        f"$JS.API.CONSUMER.LIST.{memo}",
        f"$JS.API.CONSUMER.NAMES.{memo}",
        f"$JS.API.DIRECT.GET.{memo}",
        f"$JS.API.DIRECT.GET.{memo}.{memo_subject(other, 'Sandbox', 'default', 's1')}",
        f"$JS.API.STREAM.MSG.GET.{memo}",
        f"$JS.API.STREAM.PURGE.{memo}",
    ):
        assert await client.publish_refused(subject), subject


async def test_the_server_holds_a_memo_consumer_to_the_filter_its_create_subject_names(
    connect: Connect,
) -> None:
    # The right names the filter in the create subject; nats-server refuses a request whose
    # configured filter differs from it, so another worker's memos stay out of reach.
    await _provision(connect)
    sandbox = await connect("sandbox")
    subject = f"$JS.API.CONSUMER.CREATE.{BUS.memo_stream}.x.{memo_filter('sandbox')}"
    refusals = []

    for filters in (
        {"filter_subject": memo_filter("pool")},
        {"filter_subjects": [memo_filter("pool")]},
        {"filter_subjects": [memo_filter("sandbox"), memo_filter("pool")]},
        {},
    ):
        request = {
            "stream_name": BUS.memo_stream,
            "config": {"name": "x", "ack_policy": "none", **filters},
        }
        reply = await sandbox.nc.request(subject, json.dumps(request).encode(), timeout=5)
        refusals.append(json.loads(reply.data).get("error", {}).get("err_code"))

    # 10131: filter does not match the create subject; 10137: several filters with that API.
    assert refusals == [10131, 10137, 10137, 10131]
    assert sandbox.violations == []


async def test_the_watcher_and_the_reader_do_not_touch_the_memos(connect: Connect) -> None:
    watcher, reader = await connect("watcher"), await connect("reader")
    memo = BUS.memo_stream
    consumer = f"$JS.API.CONSUMER.CREATE.{memo}.x.{memo_filter('sandbox')}"

    for client in (watcher, reader):
        assert await client.publish_refused(memo_subject("sandbox", "Sandbox", "default", "s1"))
        assert await client.publish_refused(consumer)
        assert await client.publish_refused(f"$JS.API.DIRECT.GET.{memo}")
    assert await reader.publish_refused(f"$JS.API.STREAM.INFO.{memo}")
    assert await reader.subscribe_refused("sandbus.memo.>")


# --- warm queues -------------------------------------------------------------------------------


def _warm(name: str) -> WarmQueued:
    return warm_queued_event(
        "Sandbox",
        "default",
        name,
        WarmEntry(uid=f"uid-{name}", resource_version="1", template_hash="abc"),
        time=NOW,
        source="sandbus/pool",
    )


async def test_pool_fills_the_warm_queue_and_claim_empties_it(connect: Connect) -> None:
    await _provision(connect)
    pool, claim = await connect("pool"), await connect("claim")

    assert await enqueue_warm(pool.js, _warm("w1"), BUS)
    assert not await enqueue_warm(pool.js, _warm("w1"), BUS)
    subscription = await claim.js.pull_subscribe(
        warm_queue_filter("default", "abc", "", ""),
        durable=warm_consumer_name("default", "abc", "", ""),
        stream=BUS.warm_stream,
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=30),
    )
    (entry,) = await subscription.fetch(1, timeout=5)
    await entry.ack_sync()

    assert (await claim.js.stream_info(BUS.warm_stream)).state.messages == 0
    assert pool.violations == claim.violations == []


async def test_pool_purges_ghost_entries(connect: Connect) -> None:
    await _provision(connect)
    pool = await connect("pool")
    await enqueue_warm(pool.js, _warm("ghost"), BUS)

    await pool.js.purge_stream(BUS.warm_stream, subject=nats_subject(_warm("ghost")))

    assert (await pool.js.stream_info(BUS.warm_stream)).state.messages == 0


async def test_only_pool_enqueues_and_only_claim_consumes(connect: Connect) -> None:
    consumer = (
        f"$JS.API.CONSUMER.CREATE.{BUS.warm_stream}.{warm_consumer_name('default', 'abc', '', '')}"
    )
    for user in ("watcher", "sandbox", "claim", "snapshot", "reader"):
        client = await connect(user)
        assert await client.publish_refused("sandbus.warm.default.abc.=.=.w1"), user
    for user in ("watcher", "sandbox", "pool", "snapshot", "reader"):
        client = await connect(user)
        assert await client.publish_refused(consumer), user
        assert await client.publish_refused(f"$JS.ACK.{BUS.warm_stream}.x.1.1.1.1.0"), user
    claim = await connect("claim")
    assert await claim.publish_refused(f"$JS.API.STREAM.PURGE.{BUS.warm_stream}")
    # A work-queue stream refuses overlapping consumers; unnamed ones would take entries at random.
    assert await claim.publish_refused(f"$JS.API.CONSUMER.CREATE.{BUS.warm_stream}")


# --- observer ----------------------------------------------------------------------------------


async def test_the_observer_sees_only_the_redacted_copies(connect: Connect) -> None:
    """SANDBUS_WATCHER_PUBLIC_EVENTS: the watcher publishes redacted copies on
    sandbus.public.events.>; the observer may follow those and nothing else."""
    await _provision(connect)
    observer, watcher = await connect("observer"), await connect("watcher")
    copies = await observer.follow("sandbus.public.events.>")
    await watcher.nc.publish("sandbus.public.events.sandbox.default.s1", b"{}")
    assert (await copies.next_msg(timeout=10)).subject == "sandbus.public.events.sandbox.default.s1"
    assert observer.violations == []
    assert await observer.subscribe_refused("sandbus.events.>")
    assert await observer.subscribe_refused("sandbus.decisions.>")
    assert await observer.publish_refused("sandbus.public.events.sandbox.default.s1")
    assert await observer.publish_refused(f"$JS.API.STREAM.INFO.{BUS.event_log_stream}")


# --- reader ------------------------------------------------------------------------------------


async def test_the_reader_follows_events_and_decisions_live(connect: Connect) -> None:
    await _provision(connect)
    reader, watcher, sandbox = (
        await connect("reader"),
        await connect("watcher"),
        await connect("sandbox"),
    )
    events = await reader.follow("sandbus.events.>")
    decisions = await reader.follow("sandbus.decisions.>")

    await publish_event(watcher.js, _sandbox_event(), BUS)
    await sandbox.js.publish(
        decision_subject("sandbox", "Sandbox", "default", "s1"), b"{}", stream=BUS.event_log_stream
    )

    assert (await events.next_msg(timeout=10)).subject == "sandbus.events.sandbox.default.s1"
    assert (await decisions.next_msg(timeout=10)).subject == (
        "sandbus.decisions.sandbox.sandbox.default.s1"
    )
    assert reader.violations == []


async def test_the_reader_replays_the_event_log_through_ephemeral_consumers(
    connect: Connect,
) -> None:
    await _provision(connect)
    watcher, reader = await connect("watcher"), await connect("reader")
    for name in ("a", "b"):
        await publish_event(watcher.js, _sandbox_event(name), BUS)

    # `sandbus events replay`: a named pull consumer that acknowledges nothing, deleted after.
    await reader.js.add_consumer(
        BUS.event_log_stream,
        ConsumerConfig(
            name="replay-1",
            filter_subject=event_filter("Sandbox"),
            ack_policy=AckPolicy.NONE,
            inactive_threshold=60,
        ),
    )
    replay = await reader.js.pull_subscribe_bind(consumer="replay-1", stream=BUS.event_log_stream)
    replayed = await replay.fetch(2, timeout=5)
    await replay.unsubscribe()
    await reader.js.delete_consumer(BUS.event_log_stream, "replay-1")
    # `sandbus events tail`: an ordered push consumer, with flow control the reader answers.
    tail = await reader.js.subscribe(
        "sandbus.events.>",
        stream=BUS.event_log_stream,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL,
    )
    tailed = [await tail.next_msg(timeout=5) for _ in range(2)]
    await tail.unsubscribe()

    assert [message.subject.rsplit(".", 1)[1] for message in replayed] == ["a", "b"]
    assert [message.subject.rsplit(".", 1)[1] for message in tailed] == ["a", "b"]
    assert reader.violations == []


async def test_the_reader_cannot_publish_ack_or_touch_the_workers_durables(
    connect: Connect,
) -> None:
    reader = await connect("reader")
    log = BUS.event_log_stream

    for subject in (
        "sandbus.events.sandbox.default.s1",
        decision_subject("reader", "Sandbox", "default", "s1"),
        "sandbus.dlq.events.sandbox.default.s1",
        f"$JS.ACK.{log}.{durable_name('sandbox')}.1.1.1.1.0",
        f"$JS.API.CONSUMER.CREATE.{log}.{durable_name('sandbox')}",
        f"$JS.API.CONSUMER.CREATE.{log}.{durable_name('claim')}.sandbus.events.>",
        f"$JS.API.CONSUMER.DELETE.{log}.{durable_name('pool')}",
        f"$JS.API.CONSUMER.MSG.NEXT.{log}.{durable_name('pool')}-on-demand",
        f"$JS.API.CONSUMER.MSG.NEXT.{log}.{durable_name('snapshot')}",
        f"$JS.API.CONSUMER.CREATE.{BUS.state_stream}",
        f"$JS.API.DIRECT.GET.{BUS.state_stream}",
        f"$JS.API.STREAM.INFO.{BUS.dead_letter_stream}",
        f"$JS.API.CONSUMER.CREATE.{BUS.memo_stream}",
    ):
        assert await reader.publish_refused(subject), subject


async def test_the_reader_cannot_see_the_services_replies_or_state(connect: Connect) -> None:
    reader = await connect("reader")

    for subject in (
        "_INBOX.>",
        "sandbus.state.>",
        "sandbus.warm.>",
        "sandbus.dlq.>",
        "sandbus.memo.>",
        ">",
    ):
        assert await reader.subscribe_refused(subject), subject


async def test_a_reader_without_its_inbox_prefix_gets_no_jetstream_replies(
    connect: Connect,
) -> None:
    await _provision(connect)
    reader = await connect("reader", inbox_prefix="_INBOX")

    with pytest.raises(nats.errors.TimeoutError):
        await reader.nc.jetstream(timeout=0.5).stream_info(BUS.event_log_stream)

    assert any('subscription to "_inbox.' in violation for violation in reader.violations)


# --- lame duck mode ------------------------------------------------------------------------


def test_the_pre_stop_signal_puts_the_server_into_lame_duck_mode(secured_nats: SecuredNats) -> None:
    # The StatefulSet's preStop runs `nats-server --signal ldm=<pid_file>`; here the pid file is
    # where the test server wrote it.
    (pre_stop,) = [
        doc["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
        for doc in render(BASE)
        if doc["kind"] == "StatefulSet"
    ]
    assert pre_stop[1:] == ["--signal", f"ldm={nats_conf_value('pid_file')}"]

    result = subprocess.run(
        [_nats_server(), "--signal", f"ldm={secured_nats.pid_file}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + 10
    while "lame duck" not in secured_nats.log.read_text().lower():
        assert time.monotonic() < deadline, secured_nats.log.read_text()[-2000:]
        time.sleep(0.02)


def _nats_server() -> str:
    return find_nats_server()


def _check_config(
    passwords: dict[str, str], environment: Mapping[str, str] = os.environ
) -> subprocess.CompletedProcess[str]:
    """``nats-server -t``: parse the committed config with these passwords, start nothing."""
    return subprocess.run(
        [_nats_server(), "-t", "-c", str(NATS_CONF)],
        env={**environment, **passwords},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
