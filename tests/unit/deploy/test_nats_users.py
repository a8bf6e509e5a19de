"""nats.conf, the password template, the Secret references and compose agree on the NATS users.

Whether the users' rights work is tested against a real nats-server in
tests/component/deploy/test_nats_permissions.py. These tests check, without a server, that the
names line up across files and with the bus's own stream and subject names.
"""

from __future__ import annotations

import re

import pytest

from events.redaction import PUBLIC_EVENTS
from events.subjects import (
    DEAD_LETTER_SUBJECTS,
    EVENT_LOG_SUBJECTS,
    MEMO_SUBJECTS,
    STATE_SUBJECTS,
    WARM_SUBJECTS,
    memo_filter,
    replica_filter,
)
from services.claim.worker import claim_worker
from services.pool.worker import pool_worker
from services.runtime.bus import BusConfig, stream_configs
from services.runtime.reconcile.feeding import durable_name
from services.sandbox.worker import sandbox_worker
from services.snapshot.worker import snapshot_worker
from tests.unit.deploy.manifests import (
    BASE,
    NATS_CONF,
    NATS_SECRET,
    PROVISIONER,
    READER,
    compose,
    example_password_variables,
    nats_users,
    password_variable,
    render,
)

WORKERS = {"sandbox", "pool", "claim", "snapshot"}
OBSERVER = "observer"
SERVICES_WITH_USERS = {"watcher", *WORKERS}


def _block(name: str) -> str:
    """The text of the permission block NAME = { ... } in nats.conf."""
    text = NATS_CONF.read_text()
    start = text.index(f"\n{name} = {{")
    end = text.index("\n}\n", start)
    return text[start:end]


def test_there_is_one_user_per_service_plus_provisioner_reader_and_observer() -> None:
    users = nats_users()

    assert set(users) == SERVICES_WITH_USERS | {PROVISIONER, READER, OBSERVER}
    for user, variable in users.items():
        assert variable == password_variable(user)


def test_each_user_has_its_own_permission_block() -> None:
    declared = re.findall(r"\{\s*user:\s*(\w+),.*permissions:\s*\$(\w+)", NATS_CONF.read_text())

    assert declared
    for user, block in declared:
        assert block == user.upper()
        assert "publish:" in _block(block)


def test_the_password_template_has_only_placeholders_for_every_user() -> None:
    variables = example_password_variables()

    assert set(variables) == set(nats_users().values())
    assert set(variables.values()) == {"REPLACE_ME"}


def test_every_secret_reference_names_a_password_of_the_template() -> None:
    keys = set()
    for doc in render(BASE):
        for container in _containers(doc):
            for entry in container.get("env", []):
                reference = entry.get("valueFrom", {}).get("secretKeyRef")
                if reference:
                    assert reference["name"] == NATS_SECRET
                    keys.add(reference["key"])

    assert keys
    assert keys <= set(example_password_variables())


def test_compose_gives_nats_every_password_and_refuses_to_start_without() -> None:
    environment = compose()["services"]["nats"]["environment"]

    assert set(environment) == set(example_password_variables())
    for variable, value in environment.items():
        assert value.startswith(f"${{{variable}:?"), value


def test_the_rights_name_the_streams_that_the_bus_creates() -> None:
    named = set(re.findall(r"\bSANDBUS_[A-Z]+\b", _rights_text()))

    assert named == _streams()
    assert {stream.name for stream in stream_configs(BusConfig())} == _streams()


def test_every_data_subject_a_user_may_publish_is_stored_by_a_stream() -> None:
    stored = (
        *EVENT_LOG_SUBJECTS,
        *STATE_SUBJECTS,
        *WARM_SUBJECTS,
        *DEAD_LETTER_SUBJECTS,
        *MEMO_SUBJECTS,
    )
    roots = {subject.removesuffix(".>") for subject in stored}

    # The redacted copies for external subscribers are live only, by design (events/redaction.py).
    published = set(re.findall(r'"(sandbus\.[^"]+)"', _rights_text())) - {f"{PUBLIC_EVENTS}.>"}

    assert published
    for subject in published:
        assert any(subject == f"{root}.>" or subject.startswith(f"{root}.") for root in roots), (
            subject
        )


def test_workers_record_decisions_only_under_their_own_name() -> None:
    for service in SERVICES_WITH_USERS:
        decisions = re.findall(r'"sandbus\.decisions\.([^"]+)"', _block(service.upper()))
        assert decisions == [f"{service}.>"], service


SHARDED_WORKERS = {"claim"}
"""Workers whose replicas each have a durable of their own (``<worker>-worker-<identity>``):
a NATS permission cannot match a prefix of a token, so theirs name any consumer."""
ON_DEMAND_WORKERS = {
    "sandbox": sandbox_worker().on_demand,
    "pool": pool_worker().on_demand,
    "claim": claim_worker().on_demand,
    "snapshot": snapshot_worker().on_demand,
}
"""The kinds each worker follows on demand, through a second durable."""


@pytest.mark.parametrize("worker", sorted(WORKERS))
def test_a_worker_reads_the_event_log_through_its_own_durable_only(worker: str) -> None:
    # The allowed rights (a sharded worker's deny list names the other workers' durables).
    block = _block(worker.upper()).split("deny:")[0]
    if worker in SHARDED_WORKERS:
        durables = {"*"}  # a replica's, and its durable on demand, are one token each
    else:
        durables = {durable_name(worker)}
        if ON_DEMAND_WORKERS.get(worker):
            durables.add(f"{durable_name(worker)}-on-demand")

    for durable in durables:
        for api in ("CREATE", "DURABLE.CREATE", "INFO", "DELETE", "MSG.NEXT"):
            assert f'"$JS.API.CONSUMER.{api}.SANDBUS_EVENTS.{durable}"' in block
        assert f'"$JS.ACK.SANDBUS_EVENTS.{durable}.>"' in block
    # No right on the event log names another consumer.
    for named in re.findall(
        r'"\$JS\.(?:API\.CONSUMER\.[A-Z.]+|ACK)\.SANDBUS_EVENTS\.([^".]+)', block
    ):
        assert named in durables


@pytest.mark.parametrize("worker", sorted(WORKERS))
def test_the_reader_is_denied_every_workers_durable(worker: str) -> None:
    deny = _block("READER").split("deny:", 1)[1]
    durables = [durable_name(worker)]
    if ON_DEMAND_WORKERS[worker] and worker not in SHARDED_WORKERS:
        durables.append(f"{durable_name(worker)}-on-demand")

    for durable in durables:
        assert f'"$JS.API.CONSUMER.*.SANDBUS_EVENTS.{durable}"' in deny
        assert f'"$JS.API.CONSUMER.*.SANDBUS_EVENTS.{durable}.>"' in deny
        assert f'"$JS.API.CONSUMER.MSG.NEXT.SANDBUS_EVENTS.{durable}"' in deny


def test_the_provisioner_may_create_update_and_inspect_every_stream() -> None:
    rights = _rights(_block("PROVISIONER"))

    for stream in _streams():
        for api in ("INFO", "CREATE", "UPDATE"):
            assert f'"$JS.API.STREAM.{api}.{stream}"' in rights, (api, stream)


@pytest.mark.parametrize("user", sorted(SERVICES_WITH_USERS))
def test_every_service_may_inspect_every_stream_for_ensure_bus(user: str) -> None:
    rights = _rights(_block(user.upper()))

    for stream in _streams():
        assert f'"$JS.API.STREAM.INFO.{stream}"' in rights, stream


@pytest.mark.parametrize("worker", sorted(WORKERS))
def test_a_worker_keeps_its_memory_under_its_own_name_only(worker: str) -> None:
    rights = _rights(_block(worker.upper()))
    memo = BusConfig().memo_stream

    # Publishing: its own memo subjects, nothing wider.
    assert re.findall(r'"(sandbus\.memo\.[^"]*)"', rights) == [memo_filter(worker)]
    # Reading back: a consumer may be created only with its own memos as the filter, which the
    # create subject carries (the server holds the request to it).
    creates = re.findall(rf'"(\$JS\.API\.CONSUMER\.[A-Z.]*CREATE\.{memo}[^"]*)"', rights)
    assert creates == [f"$JS.API.CONSUMER.CREATE.{memo}.*.{memo_filter(worker)}"]
    for api in ("INFO", "MSG.NEXT", "DELETE"):
        assert f'"$JS.API.CONSUMER.{api}.{memo}.*"' in rights, api
    # Nothing else on the memo stream: no purge, no ack (AckPolicy.NONE), and a direct get
    # only of its own replicas' heartbeats (a sharded worker reads who left).
    on_memo = set(re.findall(rf'"([^"]*\.{memo}(?:\.[^"]*)?)"', rights))
    heartbeats = f"$JS.API.DIRECT.GET.{memo}.{replica_filter(worker).removesuffix('*')}>"
    assert on_memo - {heartbeats} == {
        f"$JS.API.STREAM.INFO.{memo}",
        *creates,
        *(f"$JS.API.CONSUMER.{api}.{memo}.*" for api in ("INFO", "MSG.NEXT", "DELETE")),
    }


@pytest.mark.parametrize("user", ["watcher", PROVISIONER, READER, OBSERVER])
def test_no_other_user_touches_the_memos(user: str) -> None:
    rights = _rights(_block(user.upper()))
    memo = BusConfig().memo_stream

    assert "sandbus.memo" not in rights
    assert not re.findall(rf"CONSUMER\.[A-Z.]+\.{memo}|DIRECT\.GET\.{memo}", rights)


def _streams() -> set[str]:
    """The streams' names as BusConfig has them (the provisioner creates exactly these)."""
    config = BusConfig()
    return {
        config.event_log_stream,
        config.state_stream,
        config.warm_stream,
        config.dead_letter_stream,
        config.memo_stream,
    }


def _rights(block: str) -> str:
    """A permission block without its comments."""
    return "\n".join(line.split("#", 1)[0] for line in block.splitlines())


def _rights_text() -> str:
    """nats.conf without its comments: only what the server reads."""
    return "\n".join(line.split("#", 1)[0] for line in NATS_CONF.read_text().splitlines())


def _containers(doc: dict) -> list[dict]:
    if doc.get("kind") not in ("Deployment", "StatefulSet"):
        return []
    pod = doc["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"]]
