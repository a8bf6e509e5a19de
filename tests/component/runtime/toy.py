"""A toy worker on the runtime, to show the runtime is not the sandbox worker's alone.

Its work items come from a further input source: a JetStream work-queue stream of *requests*
(``toy.requests.<namespace>.<name>``, JSON ``{"image": ...}``), each joined to the key
``Sandbox/<namespace>/<name>``. A request is served by three actions, in this order:

1. create the Sandbox (Suspended: no Pod, so no kubelet is involved) unless the cache has it;
2. a custom action, :class:`Receipt`, with its own executor: publish a receipt to
   ``toy.receipts.<namespace>.<name>`` (deduplicated by the request's token);
3. ack the request.

So a worker that dies after the Kubernetes write and before the ack leaves the request to be
redelivered, and the redelivered request finds the Sandbox in the cache (the state table, the
watcher having published it) and does not create it again.

``TOY_HANG_MARKER=<path>`` makes the receipt executor write that file and hang, once per
process: the test's moment to SIGKILL the worker between the write and the ack.

Run as a process with ``python -m tests.component.runtime.toy --nats URL --kubeconfig FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from api.objects import Json
from events.envelope import ObjectKey, key_of
from events.subjects import decode_token, encode_token
from services.runtime.reconcile.actions import Ack, Create, Plan
from services.runtime.reconcile.executing import ActionFailed, Executed, ExecutionContext
from services.runtime.reconcile.serving import WorkerService, serve_worker
from services.runtime.reconcile.sources import PullSource
from services.runtime.runner import configure_logging, serve_until_signalled
from services.runtime.settings import Settings, add_connection_args
from services.runtime.worker_api import Observed, Reconciler, WorkerDefinition, WorkerSettings

REQUESTS_STREAM = "TOY_REQUESTS"
RECEIPTS_STREAM = "TOY_RECEIPTS"
DURABLE = "toy-requests"
HANG_ENV = "TOY_HANG_MARKER"


def request_subject(namespace: str, name: str) -> str:
    return f"toy.requests.{encode_token(namespace)}.{encode_token(name)}"


def receipt_subject(namespace: str, name: str) -> str:
    return f"toy.receipts.{encode_token(namespace)}.{encode_token(name)}"


TOY_STREAMS = (
    StreamConfig(
        name=REQUESTS_STREAM,
        subjects=["toy.requests.>"],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
    ),
    StreamConfig(
        name=RECEIPTS_STREAM,
        subjects=["toy.receipts.>"],
        storage=StorageType.FILE,
        duplicate_window=120.0,
    ),
)


def request_key(subject: str, data: Any) -> ObjectKey | None:
    parts = subject.split(".")
    if len(parts) != 4 or not isinstance(data, dict) or not isinstance(data.get("image"), str):
        return None
    return ObjectKey("Sandbox", decode_token(parts[2]), decode_token(parts[3]))


def toy_sandbox(key: ObjectKey, image: str) -> Json:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": key.name, "namespace": key.namespace, "labels": {"toy": "yes"}},
        "spec": {
            "operatingMode": "Suspended",
            "podTemplate": {"spec": {"containers": [{"name": "app", "image": image}]}},
        },
    }


@dataclass(frozen=True)
class Receipt:
    """The toy's own action: say on the bus that a request was served."""

    target: ObjectKey
    token: str
    why: str = ""
    step: str = ""
    verb = "receipt"


@dataclass
class ReceiptExecutor:
    hang_marker: Path | None = None
    hung: bool = field(default=False)

    async def __call__(self, action: Receipt, context: ExecutionContext) -> Executed:
        if self.hang_marker is not None and not self.hung:
            self.hung = True
            self.hang_marker.write_text(action.token)
            await asyncio.Event().wait()  # until SIGKILL
        if context.js is None:
            raise ActionFailed("no bus")
        key = action.target
        await context.js.publish(
            receipt_subject(key.namespace, key.name),
            action.token.encode(),
            stream=RECEIPTS_STREAM,
            headers={"Nats-Msg-Id": action.token},
        )
        return Executed()


def observe_requests(key: ObjectKey, observed: Observed) -> dict[str, Any]:
    return {
        "key": list(key),
        "exists": observed.cache.get(key) is not None,
        "requests": [
            {"source": m.source, "token": m.token, "image": m.data["image"]}
            for m in observed.messages
        ],
    }


def plan_requests(inputs: dict[str, Any], now: datetime) -> Plan:
    del now
    key = ObjectKey(*inputs["key"])
    if not inputs["requests"]:
        return Plan(reason="no request")
    actions: list[Any] = []
    first = inputs["requests"][0]
    if not inputs["exists"]:
        actions.append(Create(toy_sandbox(key, first["image"]), why="requested"))
    for request in inputs["requests"]:
        actions.append(Receipt(key, request["token"], why="served"))
        actions.append(Ack(request["source"], request["token"], key, why="served"))
    return Plan(actions=tuple(actions), reason=f"{len(inputs['requests'])} request(s)")


def toy_definition(*, hang_marker: Path | None = None, ack_wait: float = 30.0) -> WorkerDefinition:
    return WorkerDefinition(
        name="toy",
        reconcilers=(Reconciler("Sandbox", observe_requests, plan_requests),),
        watched_kinds=("Sandbox",),
        wakes=lambda kind, obj, cache: [key_of(obj, kind)],
        executors={Receipt: ReceiptExecutor(hang_marker)},
        sources=(
            PullSource(
                name="requests",
                stream=REQUESTS_STREAM,
                durable=DURABLE,
                filter_subject="toy.requests.>",
                key_for=request_key,
                ack_wait=ack_wait,
            ),
        ),
    )


async def ensure_toy_streams(js: Any) -> None:
    for config in TOY_STREAMS:
        await js.add_stream(config)


async def serve(settings: Settings) -> None:
    marker = os.environ.get(HANG_ENV)
    ack_wait = float(os.environ.get("TOY_ACK_WAIT") or 30.0)
    service = WorkerService(
        toy_definition(hang_marker=Path(marker) if marker else None, ack_wait=ack_wait),
        field_manager="toy-controller",
        replicas="all",
        settings=WorkerSettings(max_delay=1.0),
    )
    await serve_worker(settings, service)


def main() -> int:
    parser = argparse.ArgumentParser(prog="toy")
    add_connection_args(parser)
    settings = Settings.from_args(parser.parse_args())
    configure_logging()
    return asyncio.run(serve_until_signalled(serve(settings)))


if __name__ == "__main__":
    raise SystemExit(main())
