"""The redacted copies for external subscribers (``SANDBUS_WATCHER_PUBLIC_EVENTS``,
events/redaction.py): with the option on, every event also goes to ``sandbus.public.events.>``
with its env values redacted and the log's own id; with it off, nothing is published there.
A real nats-server and the development cluster; the watcher runs in-process."""

from __future__ import annotations

import dataclasses

from kubernetes_asyncio import client as k8s
from nats.aio.client import Client

from events.codec import decode_event
from events.redaction import REDACTED
from tests.component.watcher.harness import event_log, example, running_watcher, watcher_config
from tests.support.waiting import until

GROUP, VERSION, PLURAL = "extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims"


async def logged(nc: Client, name: str) -> list[object]:
    return [e for e in await event_log(nc.jetstream()) if e.object_id[2] == name]


def claim_with_env(name: str) -> dict[str, object]:
    body = example("SandboxClaim", name)
    body["spec"]["env"] = [{"name": "TOKEN", "value": "s3cret"}]
    return body


async def test_public_copies_are_redacted_and_carry_the_log_id(
    nc: Client, client: k8s.ApiClient
) -> None:
    config = dataclasses.replace(watcher_config(), public_events=True)
    copies = await nc.subscribe("sandbus.public.events.>")
    custom = k8s.CustomObjectsApi(client)
    async with running_watcher(nc, client, config):
        await custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, claim_with_env("ada")
        )
        message = await copies.next_msg(timeout=10)
    copy = decode_event(message.data)
    assert message.subject.startswith("sandbus.public.events.sandboxclaim.default.")
    assert copy.data.object["spec"]["env"] == [{"name": "TOKEN", "value": REDACTED}]
    logged = [e for e in await event_log(nc.jetstream()) if e.object_id[2] == "ada"]
    assert [e.event.id for e in logged] == [copy.id]
    assert logged[0].event.data.object["spec"]["env"][0]["value"] == "s3cret"


async def test_without_the_option_nothing_is_public(nc: Client, client: k8s.ApiClient) -> None:
    copies = await nc.subscribe("sandbus.public.events.>")
    custom = k8s.CustomObjectsApi(client)
    async with running_watcher(nc, client, watcher_config()):
        await custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, claim_with_env("bob")
        )
        await until(lambda: logged(nc, "bob"), within=10)
        await nc.flush()
    assert copies.pending_msgs == 0
