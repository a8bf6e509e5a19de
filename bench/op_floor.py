"""The least client CPU each kind of operation a claim is made of costs on this machine, with
no controller code around it: the floor under what sandbus's services spend per claim.

``claim_cost.py --floor`` starts this as a process of its own, on the services' event loop
(uvloop), against the stack it measured, and hands it one of the run's own event-log messages
(a Pod change, the kind most often delivered) and its headers. Each operation runs ``--count``
times after a warm-up, and its figure is the process's CPU (``time.process_time``) over the
stretch, per operation, in microseconds:

- **published**: the message published and acknowledged by JetStream, 32 in flight (the
  watcher's pipelining; a decision is sent the same way without waiting for its answer, and a
  memo or a warm-queue entry the same way waiting for it);
- **delivered**: the message delivered by a pull consumer (64 asked for at a time, all already
  waiting) and acked: what nats-py spends on a delivery before any worker code sees it;
- **written**: a JSON merge patch of a ConfigMap through :class:`services.runtime.kube.KubeApi`,
  the workers' client (the lean HTTP/1.1 transport: ``kube_client_cost.py`` measures it below
  any aiohttp client);
- **watched**: one watch event read and decoded by ``KubeApi.watch`` (the watcher's path): the
  patches again with a watch following them, less the patches alone.

The messages go to a scratch stream of their own (``FLOOR``, file storage as the event log),
deleted at the end. The answer is one line of JSON on stdout::

    .venv/bin/python bench/op_floor.py --nats URL --kubeconfig PATH --sample FILE [--count 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import uvloop
from nats.js.api import StorageType, StreamConfig

from events.envelope import ObjectKey
from services.runtime.kube import KubeApi
from services.runtime.kubeclient import Configuration, kube_config, new_api_client

STREAM = "FLOOR"
IN_FLIGHT = 32
BATCH = 64
NAMESPACE = "default"
CONFIG_MAP = "bench-op-floor"


async def cpu_per_call(count: int, run: Callable[[int], Awaitable[None]]) -> float:
    """Microseconds of this process's CPU per call of ``run(count)``, after a warm-up."""
    await run(min(200, count))
    started = time.process_time()
    await run(count)
    return (time.process_time() - started) / count * 1e6


async def bus_floors(
    url: str, data: bytes, headers: dict[str, str], count: int
) -> dict[str, float]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=STREAM, subjects=["floor.>"], storage=StorageType.FILE))
    published = 0

    async def publish(n: int) -> None:
        nonlocal published
        for start in range(0, n, IN_FLIGHT):
            answers = []
            for index in range(start, min(n, start + IN_FLIGHT)):
                published += 1
                answers.append(
                    await js.publish_async(
                        f"floor.{index % 100}",
                        data,
                        headers={**headers, "Nats-Msg-Id": f"{uuid.uuid4()}"},
                    )
                )
            await asyncio.gather(*answers)

    subscription = await js.pull_subscribe("floor.>", durable="floor")

    async def deliver(n: int) -> None:
        taken = 0
        while taken < n:
            for msg in await subscription.fetch(min(BATCH, n - taken), timeout=5):
                await msg.ack()
                taken += 1

    try:
        publishing = await cpu_per_call(count, publish)
        delivering = await cpu_per_call(count, deliver)
    finally:
        await js.delete_stream(STREAM)
        await nc.close()
    return {"published": publishing, "delivered": delivering}


async def api_floors(kubeconfig: Path, count: int) -> dict[str, float]:
    configuration = Configuration()
    await kube_config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    client = new_api_client(configuration)
    kube = KubeApi(client, field_manager="bench-op-floor")
    key = ObjectKey("ConfigMap", NAMESPACE, CONFIG_MAP)
    await kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
            "data": {"n": "0"},
        }
    )
    calls = 0

    async def write(n: int) -> None:
        nonlocal calls
        for _ in range(n):
            calls += 1
            await kube.patch(key, {"data": {"n": str(calls)}})

    async def write_watched(n: int) -> None:
        seen = 0
        current = await kube.get(key)
        async with kube.watch(
            "ConfigMap",
            resource_version=str(current["metadata"]["resourceVersion"]),
            timeout_seconds=600,
            namespace=NAMESPACE,
        ) as stream:

            async def follow() -> None:
                nonlocal seen
                while seen < n:
                    event = await stream.next_event(60)
                    if event is None:
                        raise RuntimeError("the watch ended early")
                    if event.get("type") == "MODIFIED":
                        seen += 1

            following = asyncio.create_task(follow())
            await write(n)
            await following

    try:
        written = await cpu_per_call(count, write)
        both = await cpu_per_call(count, write_watched)
    finally:
        await kube.delete(key)
        await client.close()
    return {"written": written, "watched": max(0.0, both - written)}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    sample = json.loads(Path(args.sample).read_text())
    data = sample["data"].encode()
    # The fence's headers cannot go to another stream as they are; under other names they still
    # make the message as large, and as many lines to parse, as the event log's.
    headers = {
        f"X-{key}" if key.startswith("Nats-Expected") else key: value
        for key, value in sample["headers"].items()
    }
    floors = await bus_floors(args.nats, data, headers, args.count)
    floors.update(await api_floors(Path(args.kubeconfig), args.count))
    return floors


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats", required=True, help="the stack's nats-server URL")
    parser.add_argument("--kubeconfig", required=True, help="the development cluster's")
    parser.add_argument("--sample", required=True, help="JSON {data, headers}: one message")
    parser.add_argument("--count", type=int, default=2000, help="operations of each kind")
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(uvloop.run(main(parse_args()))))
