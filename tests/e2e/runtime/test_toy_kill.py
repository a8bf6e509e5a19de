"""End to end: a worker of a toy kind, with a custom action and a further input source, killed
(SIGKILL) between its Kubernetes write and the ack of the message that asked for it.

The toy (:mod:`tests.component.runtime.toy`) serves requests from a work-queue stream: create a
Sandbox, publish a receipt (its own action kind), ack the request. Killed inside the receipt,
after the create committed and before the ack, the request must come back to the restarted
worker, which publishes the receipt and acks, and the Sandbox must have been created once: the
development cluster's record of every commit is the reference.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import nats
import pytest
from nats.js import JetStreamContext

from devtools.cluster import DevCluster, LatencyModel
from devtools.natsd import NatsServer
from events.codec import decode_event
from events.subjects import decision_subject
from events.types import DecisionMade
from services.runtime.bus import BusConfig
from services.runtime.streams import read_to_end
from tests.component.runtime.toy import (
    HANG_ENV,
    RECEIPTS_STREAM,
    REQUESTS_STREAM,
    ensure_toy_streams,
    request_subject,
)
from tests.component.watcher.harness import ClusterHistory
from tests.e2e.services import log_tails, service
from tests.support.samples import NS
from tests.support.waiting import until

pytestmark = pytest.mark.slow

TOY = (sys.executable, "-m", "tests.component.runtime.toy")


async def test_a_kill_between_the_write_and_the_ack_redelivers_and_writes_once(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    marker = tmp_path / "hung"
    history = ClusterHistory()
    async with (
        NatsServer(store_dir=tmp_path / "nats") as nats_server,
        DevCluster(port=0, latency=LatencyModel.zero()) as cluster,
    ):
        cluster.store.subscribe(None, history.sink)
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        nc = await nats.connect(nats_server.url)
        try:
            js = nc.jetstream()
            await ensure_toy_streams(js)
            toy_env = {"TOY_ACK_WAIT": "2"}
            try:
                async with service("watcher", nats_server.url, kubeconfig, logs):
                    async with service(
                        "toy",
                        nats_server.url,
                        kubeconfig,
                        logs,
                        command=TOY,
                        env={**toy_env, HANG_ENV: str(marker)},
                        log_name="toy-1",
                    ) as first:
                        await js.publish(
                            request_subject(NS, "r1"),
                            json.dumps({"image": "busybox"}).encode(),
                            stream=REQUESTS_STREAM,
                        )
                        await until(_exists(marker), within=60)
                        first.send_signal(signal.SIGKILL)
                        await first.wait()

                    creates = _creates(history, "r1")
                    assert len(creates) == 1, "the write committed before the kill"
                    requests = await js.stream_info(REQUESTS_STREAM)
                    assert requests.state.messages == 1, "the request was not acked"
                    receipts = await js.stream_info(RECEIPTS_STREAM)
                    assert receipts.state.messages == 0

                    async with service(
                        "toy",
                        nats_server.url,
                        kubeconfig,
                        logs,
                        command=TOY,
                        env=toy_env,
                        log_name="toy-2",
                    ):

                        async def served() -> bool:
                            info = await js.stream_info(REQUESTS_STREAM)
                            receipts = await js.stream_info(RECEIPTS_STREAM)
                            return info.state.messages == 0 and receipts.state.messages == 1

                        await until(served, within=60, interval=0.2)
                    assert len(_creates(history, "r1")) == 1, "no second create"
                    verbs = await _decided_verbs(js)
                    assert "create" not in verbs, "the restarted worker knew the Sandbox"
                    assert verbs[-2:] == ["receipt", "ack"], verbs
            except AssertionError as failure:
                raise AssertionError(f"{failure}\n{log_tails(logs)}") from None
        finally:
            await nc.close()


async def _decided_verbs(js: JetStreamContext) -> list[str]:
    """The actions of every decision the toy recorded about r1, in order."""
    verbs: list[str] = []
    subject = decision_subject("toy", "Sandbox", NS, "r1")
    async for msg in read_to_end(js, BusConfig().event_log_stream, [subject]):
        event = decode_event(msg.data)
        assert isinstance(event, DecisionMade)
        verbs += [action.verb for action in event.data.actions]
    return verbs


def _exists(path: Path):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        return path.exists()

    return check


def _creates(history: ClusterHistory, name: str) -> list[object]:
    return [
        change
        for change in history.of(["Sandbox"])
        if change.name == name and change.type == "ADDED"
    ]
