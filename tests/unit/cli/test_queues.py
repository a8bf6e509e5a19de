"""The pure half of ``sandbus queue ls``: the mismatch rule, the queues from subjects and consumer
names, the rows from the state table's objects, and the two printed forms."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from api.keys import LABEL_SANDBOX_TEMPLATE_REF_HASH, LABEL_WARM_POOL_SANDBOX, name_hash
from events.subjects import warm_consumer_name, warm_subject
from services.cli import build_parser
from services.cli.history.queues import (
    NO_QUEUES,
    QueueKey,
    QueueRow,
    depths,
    in_flight_by_queue,
    mismatch,
    queue_json,
    queue_of_consumer,
    queue_rows,
    queue_table,
)
from tests.unit.cli.histories import T0, at

PYTHON = name_hash("python")
NODE = name_hash("node")


def member(
    name: str,
    *,
    pool: str = "warm",
    template: str = "python",
    namespace: str = "default",
    ready: str = "True",
    controller: bool = True,
    deleting: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {
            LABEL_WARM_POOL_SANDBOX: name_hash(pool),
            LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(template),
        },
        "ownerReferences": [
            {
                "kind": "SandboxWarmPool",
                "name": pool,
                "uid": f"uid-{pool}",
                "controller": controller,
            }
        ],
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-05-04T10:00:00Z"
    return {
        "kind": "Sandbox",
        "metadata": metadata,
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def template(name: str, namespace: str = "default") -> dict[str, Any]:
    return {"kind": "SandboxTemplate", "metadata": {"name": name, "namespace": namespace}}


@pytest.mark.parametrize(
    ("depth", "adoptable", "expected"),
    [
        (3, 3, None),
        (0, 0, None),
        (1, 3, "2 not queued"),
        (0, 1, "1 not queued"),
        (4, 1, "3 stale"),
    ],
)
def test_a_queue_is_right_when_its_depth_is_its_adoptable_members(
    depth: int, adoptable: int, expected: str | None
) -> None:
    assert mismatch(depth, adoptable) == expected


def test_in_flight_entries_are_part_of_the_depth_not_added_to_it() -> None:
    # Three members, three entries stored, one of them taken by a claim and not yet acked.
    row = QueueRow(
        key=QueueKey("default", PYTHON, "warm"),
        template="python",
        depth=3,
        oldest=T0,
        in_flight=1,
        adoptable=3,
    )
    assert row.mismatch is None


def test_depths_sum_subjects_per_queue_and_keep_the_malformed_apart() -> None:
    counted = depths(
        {
            warm_subject("default", PYTHON, "warm", "n1", "a"): 1,
            warm_subject("default", PYTHON, "warm", "n2", "b.c"): 1,
            warm_subject("default", PYTHON, "", "", "lonely"): 1,
            warm_subject("team", NODE, "warm", "n1", "a"): 1,
            "sandbus.warm.junk": 1,
        }
    )
    assert counted.by_queue == {
        QueueKey("default", PYTHON, "warm"): 2,
        QueueKey("default", PYTHON, ""): 1,
        QueueKey("team", NODE, "warm"): 1,
    }
    assert counted.malformed == ["sandbus.warm.junk"]


def test_only_queue_durables_count_in_flight_and_only_in_the_namespace_asked() -> None:
    consumers = {
        warm_consumer_name("default", PYTHON, "warm", "n1"): 2,
        warm_consumer_name("default", PYTHON, "warm", "n2"): 1,
        warm_consumer_name("team", NODE, "warm", ""): 0,
        "sandbus-read-0a1b": 7,
    }
    assert in_flight_by_queue(consumers, None) == {
        QueueKey("default", PYTHON, "warm"): 3,
        QueueKey("team", NODE, "warm"): 0,
    }
    assert in_flight_by_queue(consumers, "team") == {QueueKey("team", NODE, "warm"): 0}


@pytest.mark.parametrize(
    "key",
    [QueueKey("default", PYTHON, "warm"), QueueKey("my.team", NODE, ""), QueueKey("x", "h", "p_1")],
)
def test_a_warm_consumer_name_gives_back_its_queue(key: QueueKey) -> None:
    for node in ("", "node-1", "n.2"):
        assert queue_of_consumer(warm_consumer_name(*key, node)) == key


@pytest.mark.parametrize(
    "name",
    [
        "sandbus-read-0a1b",
        "warm:default:h",
        "warm:default:=:warm",
        "warm:a:b:c",
        "warm:a:b:c:d:e",
        "x:a:b:c:d",
    ],
)
def test_other_consumers_are_no_queue(name: str) -> None:
    assert queue_of_consumer(name) is None


def test_rows_count_only_adoptable_members_and_name_templates_in_their_namespace() -> None:
    sandboxes = [
        member("a"),
        member("b"),
        member("not-ready", ready="False"),
        member("deleting", deleting=True),
        member("not-controlled", controller=False),
        member("other-pool", pool="other"),
        member("node-1", namespace="team", template="node"),
    ]
    unlabelled = member("unlabelled")
    del unlabelled["metadata"]["labels"][LABEL_WARM_POOL_SANDBOX]
    sandboxes.append(unlabelled)
    rows = queue_rows(
        depths={QueueKey("default", PYTHON, "warm"): 2, QueueKey("default", NODE, "gone"): 1},
        oldest={QueueKey("default", PYTHON, "warm"): at(0)},
        consumers={QueueKey("default", PYTHON, "warm"): 1, QueueKey("team", NODE, "idle"): 0},
        sandboxes=sandboxes,
        # "node" exists in default, not in team: the hash names a template per namespace.
        templates=[template("python"), template("node"), template("python", "team")],
    )
    assert [(row.key, row.template, row.depth, row.in_flight, row.adoptable) for row in rows] == [
        (QueueKey("default", PYTHON, "other"), "python", 0, None, 1),
        (QueueKey("default", PYTHON, "warm"), "python", 2, 1, 2),
        (QueueKey("default", NODE, "gone"), "node", 1, None, 0),
        (QueueKey("team", NODE, "idle"), None, 0, 0, 0),
        (QueueKey("team", NODE, "warm"), None, 0, None, 1),
    ]
    assert [row.mismatch for row in rows] == [
        "1 not queued",
        None,
        "1 stale",
        None,
        "1 not queued",
    ]


def _rows() -> list[QueueRow]:
    return [
        QueueRow(
            key=QueueKey("default", PYTHON, "warm"),
            template="python",
            depth=3,
            oldest=at(0),
            in_flight=1,
            adoptable=3,
        ),
        QueueRow(
            key=QueueKey("team", NODE, ""),
            template=None,
            depth=0,
            oldest=None,
            in_flight=None,
            adoptable=2,
        ),
    ]


def test_the_table_is_aligned_with_dashes_for_what_is_not_there() -> None:
    now = at(0) + timedelta(minutes=3, seconds=5)
    assert queue_table(_rows(), now).splitlines() == [
        "NAMESPACE   HASH       TEMPLATE   POOL   DEPTH   OLDEST   IN-FLIGHT   ADOPTABLE   "
        "MISMATCH",
        f"default     {PYTHON}   python     warm   3       3m       1           3",
        f"team        {NODE}   -          -      0       -        -           2           "
        "2 not queued",
    ]


def test_no_queue_is_said_in_words_and_in_json_an_empty_array() -> None:
    assert queue_table([], T0) == NO_QUEUES
    assert json.loads(queue_json([], T0)) == []


def test_the_json_has_every_field_with_nulls_for_what_is_not_there() -> None:
    now = at(0) + timedelta(seconds=90.5)
    assert json.loads(queue_json(_rows(), now)) == [
        {
            "namespace": "default",
            "templateHash": PYTHON,
            "template": "python",
            "pool": "warm",
            "depth": 3,
            "oldest": "2026-05-04T10:03:01.002Z",
            "oldestAgeSeconds": 90.5,
            "inFlight": 1,
            "adoptable": 3,
            "mismatch": None,
        },
        {
            "namespace": "team",
            "templateHash": NODE,
            "template": None,
            "pool": "",
            "depth": 0,
            "oldest": None,
            "oldestAgeSeconds": None,
            "inFlight": None,
            "adoptable": 2,
            "mismatch": "2 not queued",
        },
    ]


def test_the_command_is_registered_with_the_others() -> None:
    args = build_parser().parse_args(["queue", "ls", "-n", "team", "--json"])
    assert (args.command, args.queue_command, args.namespace, args.json) == (
        "queue",
        "ls",
        "team",
        True,
    )
    assert callable(args.func) and callable(args.run)
