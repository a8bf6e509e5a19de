"""`sandbus queue ls` against a real nats-server: the warm stream's queues beside the state table.

The world: two warm pools in the state table with their members as the pool worker makes them
(:func:`services.domain.agentsandbox.blueprint.pool_sandbox`), some adoptable and some not; the
queue entries the pool worker would have put (one missing, to be flagged); the claim worker's
durable consumer on one queue, holding one entry it took and has not acked; and noise the
command must not count: an event on the event log, a message on the warm stream outside the
subject scheme, a deleted member's tombstone and a garbage message in the state table.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from api.keys import name_hash
from events.codec import nats_subject
from events.types import ObjectEvent, WarmEntry, observed_event, warm_queued_event
from services.cli import build_parser
from services.cli.history.queues import NO_QUEUES, QueueOptions, list_queues
from services.domain.agentsandbox.blueprint import pool_sandbox
from services.domain.agentsandbox.warmqueue import WarmQueue
from services.runtime.bus import BusConfig, enqueue_warm, ensure_bus, publish_event
from services.runtime.reconcile.warm import WarmTaker
from tests.component.cli.commands import COMMAND_TIMEOUT, Result
from tests.support.statetable import state_table_copied
from tests.unit.cli.histories import at, sandbox

BUS = BusConfig()
PYTHON = name_hash("python")
NODE = name_hash("node")
AGE = timedelta(seconds=100)


def template(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": "1",
        },
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "app", "image": "x:1"}]}}},
    }


def pool(name: str, namespace: str, template_ref: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": "2",
        },
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template_ref}},
    }


def member(of_pool: dict[str, Any], tpl: dict[str, Any], name: str, **changes: Any) -> Any:
    """A member as the pool worker makes it, Ready unless ``ready`` says otherwise."""
    body = pool_sandbox(of_pool, tpl)
    metadata = body["metadata"]
    metadata.pop("generateName")
    metadata.update(name=name, uid=f"uid-{name}", resourceVersion="10")
    metadata.update(changes.pop("metadata", {}))
    body["status"] = {"conditions": [{"type": "Ready", "status": changes.pop("ready", "True")}]}
    assert not changes
    return body


PYTHON_TEMPLATE = template("python", "default")
NODE_TEMPLATE = template("node", "team")  # never in the state table: the name stays unknown
PYTHON_POOL = pool("python-warm", "default", "python", 4)
NODE_POOL = pool("node-warm", "team", "node", 2)

PY = [member(PYTHON_POOL, PYTHON_TEMPLATE, f"python-warm-{i}") for i in range(3)]
PY_NOT_READY = member(PYTHON_POOL, PYTHON_TEMPLATE, "python-warm-starting", ready="False")
PY_DELETING = member(
    PYTHON_POOL,
    PYTHON_TEMPLATE,
    "python-warm-going",
    metadata={"deletionTimestamp": "2026-05-04T10:00:00Z"},
)
PY_DELETED = member(PYTHON_POOL, PYTHON_TEMPLATE, "python-warm-gone")
NODE_MEMBERS = [member(NODE_POOL, NODE_TEMPLATE, f"node-warm-{i}") for i in range(2)]


def entry(sandbox_body: dict[str, Any]) -> Any:
    metadata = sandbox_body["metadata"]
    owner = metadata["ownerReferences"][0]["name"]
    return warm_queued_event(
        "Sandbox",
        metadata["namespace"],
        metadata["name"],
        WarmEntry(
            uid=metadata["uid"],
            resource_version=metadata["resourceVersion"],
            template_hash=metadata["labels"]["agents.x-k8s.io/sandbox-template-ref-hash"],
            pool=owner,
        ),
        time=at(0),
        source="/sandbus/pool",
    )


async def put_state(js: JetStreamContext, event: ObjectEvent) -> None:
    """What the watcher does: the event on the log, which the server copies into the table."""
    await publish_event(js, event)
    await state_table_copied(js, 1)


async def _world(js: JetStreamContext) -> tuple[datetime, Msg]:
    """Fill the bus; returns when the last entry was stored and the entry a claim holds."""
    for obj in [PYTHON_TEMPLATE, PYTHON_POOL, NODE_POOL, *PY, PY_NOT_READY, PY_DELETING]:
        await put_state(js, observed_event("added", obj, time=at(1)))
    await put_state(js, observed_event("added", PY_DELETED, time=at(1)))
    gone = copy.deepcopy(PY_DELETED)
    gone["metadata"]["resourceVersion"] = "11"
    await put_state(js, observed_event("deleted", gone, time=at(2)))
    for obj in NODE_MEMBERS:
        await put_state(js, observed_event("added", obj, time=at(1)))
    await js.publish(
        "sandbus.events.sandbox.default.garbage", b"{not json", stream=BUS.event_log_stream
    )
    # An event on the event log about a pool member: not a queue entry.
    await publish_event(js, observed_event("added", PY[0], time=at(1)))
    await publish_event(js, observed_event("added", sandbox("unrelated", 3), time=at(1)))

    for obj in [*PY, NODE_MEMBERS[0]]:  # node-warm-1 is adoptable but was never queued
        assert await enqueue_warm(js, entry(obj))
    await js.publish("sandbus.warm.junk", b"{}", stream=BUS.warm_stream)
    stored = datetime.now(UTC)

    # The claim worker's consumer of the python queue takes its oldest entry and holds it.
    taker = WarmTaker()
    config = taker.consumer_config(WarmQueue("default", PYTHON, "python-warm"), "")
    await js.add_consumer(BUS.warm_stream, config)
    subscription = await js.pull_subscribe_bind(
        consumer=str(config.durable_name), stream=BUS.warm_stream
    )
    [held] = await subscription.fetch(1, timeout=5)
    assert held.subject == nats_subject(entry(PY[0]))
    return stored, held


async def _ls(nats_url: str, *, now: datetime, **options: Any) -> Result:
    out, err = io.StringIO(), io.StringIO()
    options = QueueOptions(nats_url=nats_url, clock=lambda: now, **options)
    code = await asyncio.wait_for(list_queues(options, out=out, err=err), COMMAND_TIMEOUT)
    return Result(code, out.getvalue(), err.getvalue())


async def test_every_queue_with_its_depth_age_in_flight_and_adoptable_members(
    js: JetStreamContext, nats_url: str
) -> None:
    before = datetime.now(UTC)
    stored, held = await _world(js)
    result = await _ls(nats_url, now=stored + AGE)
    assert result.code == 0, result.err
    assert result.lines == [
        "NAMESPACE   HASH       TEMPLATE   POOL          DEPTH   OLDEST   IN-FLIGHT   ADOPTABLE   "
        "MISMATCH",
        f"default     {PYTHON}   python     python-warm   3       1m       1           3",
        f"team        {NODE}   -          node-warm     1       1m       -           2           "
        "1 not queued",
    ]
    garbage, junk = result.err.splitlines()
    assert garbage.startswith(
        "warning: sandbus.state.sandbox.default.garbage in SANDBUS_STATE is not a valid event: "
        "payload: not valid JSON"
    )
    assert junk == (
        "warning: sandbus.warm.junk in SANDBUS_WARM is not a warm-queue subject; not counted"
    )

    document = json.loads((await _ls(nats_url, now=stored + AGE, json=True)).out)
    assert [
        {key: value for key, value in item.items() if key not in ("oldest", "oldestAgeSeconds")}
        for item in document
    ] == [
        {
            "namespace": "default",
            "templateHash": PYTHON,
            "template": "python",
            "pool": "python-warm",
            "depth": 3,
            "inFlight": 1,
            "adoptable": 3,
            "mismatch": None,
        },
        {
            "namespace": "team",
            "templateHash": NODE,
            "template": None,
            "pool": "node-warm",
            "depth": 1,
            "inFlight": None,
            "adoptable": 2,
            "mismatch": "1 not queued",
        },
    ]
    # The oldest entry was stored between `before` and `stored`: its age is AGE plus at most
    # that span (the server and this process read the same clock).
    slack = (stored - before).total_seconds() + 0.05
    for item in document:
        oldest = datetime.fromisoformat(item["oldest"].replace("Z", "+00:00"))
        assert before - timedelta(milliseconds=5) <= oldest <= stored
        assert 100 <= item["oldestAgeSeconds"] <= 100 + slack
    await held.ack()


async def test_an_acked_entry_leaves_the_depth_and_the_in_flight_count(
    js: JetStreamContext, nats_url: str
) -> None:
    stored, held = await _world(js)
    await held.ack_sync()
    # Adopted: the claim worker acked, and the sandbox is not adoptable any more.
    adopted = copy.deepcopy(PY[0])
    adopted["metadata"]["ownerReferences"] = []
    adopted["metadata"]["resourceVersion"] = "12"
    await put_state(js, observed_event("modified", adopted, time=at(3)))
    result = await _ls(nats_url, now=stored + AGE, namespace="default")
    assert result.code == 0, result.err
    assert [line.split() for line in result.lines[1:]] == [
        ["default", PYTHON, "python", "python-warm", "2", "1m", "0", "2"]
    ]


async def test_the_command_line_prints_the_table_and_filters_by_namespace(
    js: JetStreamContext, nats_url: str
) -> None:
    _, held = await _world(js)
    args = build_parser().parse_args(["queue", "ls", "-n", "team", "--nats", nats_url])
    out, err = io.StringIO(), io.StringIO()
    code = await args.run(args, out=out, err=err)
    assert code == 0, err.getvalue()
    header, row = out.getvalue().splitlines()
    assert header.split() == [
        "NAMESPACE",
        "HASH",
        "TEMPLATE",
        "POOL",
        "DEPTH",
        "OLDEST",
        "IN-FLIGHT",
        "ADOPTABLE",
        "MISMATCH",
    ]
    cells = row.split()
    assert cells[:5] == ["team", NODE, "-", "node-warm", "1"]
    assert cells[5].endswith("s")  # seconds old
    assert cells[6:] == ["-", "2", "1", "not", "queued"]
    await held.ack()


@pytest.mark.parametrize("namespace", [None, "nowhere"])
async def test_no_queues_says_so_and_json_is_an_empty_array(
    js: JetStreamContext, nats_url: str, namespace: str | None
) -> None:
    if namespace is not None:
        await _world(js)
    now = datetime.now(UTC)
    table = await _ls(nats_url, now=now, namespace=namespace)
    assert (table.code, table.out, table.err) == (0, f"{NO_QUEUES}\n", "")
    document = await _ls(nats_url, now=now, namespace=namespace, json=True)
    assert (document.code, json.loads(document.out), document.err) == (0, [], "")


async def test_without_the_bus_it_says_which_stream_is_missing(nats_url: str) -> None:
    result = await _ls(nats_url, now=datetime.now(UTC))
    assert result.code == 1
    assert result.out == ""
    assert "the stream SANDBUS_WARM does not exist" in result.err


async def test_a_state_table_missing_is_said_too(nats_url: str, js: JetStreamContext) -> None:
    await js.delete_stream(BUS.state_stream)
    result = await _ls(nats_url, now=datetime.now(UTC))
    assert result.code == 1
    assert "the stream SANDBUS_STATE does not exist" in result.err
    await ensure_bus(js)
