"""The task executor's wire (services/taskexecutor/core/wire.py, docs/opensandbox.md §5 "wire
type"): what upstream's controller and sandbus's send is decoded, unknown fields ignored; bad
JSON, a bad shape and tasks that cannot run are refused with a message that says where; the
report is camelCase, never carries ``deletionTimestamp``, and always carries an exit code.
And the name rule (core/names.py, upstream's SafeJoin)."""

from __future__ import annotations

import json

import pytest

from services.taskexecutor.core.names import name_problem
from services.taskexecutor.core.wire import (
    Process,
    ProcessStatus,
    TaskReport,
    Terminated,
    WireError,
    decode_task,
    decode_tasks,
    encode,
)

UPSTREAM_TASK = {
    # What upstream's controller sends back on every pass (tec/types.go): its last read status
    # and a deletionTimestamp included, which the executor must ignore.
    "name": "bs-0",
    "deletionTimestamp": "2026-06-12T09:30:00Z",
    "process": {
        "command": ["/bin/sh", "-c"],
        "args": ["echo hi"],
        "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {}}}],
        "workingDir": "/work",
        "timeoutSeconds": 60,
        "execMode": "Local",
        "lifecycle": {
            "preStart": {"exec": {"command": ["stage-in"]}, "timeoutSeconds": 5},
            "postStop": {"exec": {"command": ["stage-out"]}, "execMode": "Remote"},
        },
    },
    "processStatus": {"running": {"startedAt": "2026-06-12T09:30:00Z"}},
    "podStatus": {"phase": "Running"},
    "somethingNewer": {"x": 1},
}


def body(value: object) -> bytes:
    return json.dumps(value).encode()


def test_a_task_as_the_controllers_send_it_is_decoded_and_unknown_fields_are_ignored() -> None:
    task = decode_task(body(UPSTREAM_TASK))
    assert task.name == "bs-0"
    process = task.process
    assert process is not None
    assert process.argv == ["/bin/sh", "-c", "echo hi"]
    assert [(e.name, e.value) for e in process.env] == [("A", "1"), ("B", "")]
    assert process.working_dir == "/work"
    assert process.timeout_seconds == 60
    assert process.lifecycle is not None
    pre_start, post_stop = process.lifecycle.pre_start, process.lifecycle.post_stop
    assert pre_start is not None and pre_start.exec is not None
    assert pre_start.exec.command == ["stage-in"]
    assert pre_start.timeout_seconds == 5
    assert post_stop is not None and post_stop.timeout_seconds == 0


def test_set_tasks_takes_an_array_and_null_means_none() -> None:
    assert [t.name for t in decode_tasks(body([UPSTREAM_TASK, {"name": "bs-1"}]))] == [
        "bs-0",
        "bs-1",
    ]
    assert decode_tasks(b"[]") == []
    # Go encodes a nil slice as null: upstream's Set(nil).
    assert decode_tasks(b"null") == []


def test_a_task_without_a_process_is_a_container_task() -> None:
    task = decode_task(body({"name": "c", "podTemplateSpec": {"spec": {"containers": []}}}))
    assert task.process is None
    assert task.pod_template_spec == {"spec": {"containers": []}}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", "no body"),
        (b"[nope]", "not JSON: JSON is malformed"),
        (b'[{"name": "a"', "not JSON: Input data was truncated"),
        (b'{"name": "a"}', "expected a JSON array of tasks: Expected `array | null`, got `object`"),
        (b'[{"process": {}}]', "missing required field `name`"),
        (b'[{"name": "a", "process": {"timeoutSeconds": "9"}}]', "`$[0].process.timeoutSeconds`"),
        (b'[{"name": "a", "process": {"env": [{"value": "x"}]}}]', "`$[0].process.env[0]`"),
    ],
)
def test_set_tasks_refuses_bad_json_and_bad_shapes(raw: bytes, expected: str) -> None:
    with pytest.raises(WireError) as error:
        decode_tasks(raw)
    assert expected in str(error.value)


def test_create_takes_one_object() -> None:
    with pytest.raises(WireError, match="expected a JSON object"):
        decode_task(b"[]")


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ({"name": ""}, "tasks[0].name '': must not be empty"),
        ({"name": ".."}, "must not be '..'"),
        ({"name": "a/b"}, "path separator"),
        ({"name": "../../etc"}, "path separator"),
        ({"name": "x" * 256}, "at most 255 bytes"),
        (
            {"name": "a", "process": {"command": []}},
            "tasks[0].process.command: nothing to run",
        ),
        (
            {"name": "a", "process": {"command": ["x"], "lifecycle": {"preStart": {}}}},
            "tasks[0].process.lifecycle.preStart: has no exec action",
        ),
        (
            {
                "name": "a",
                "process": {"command": ["x"], "lifecycle": {"postStop": {"exec": {}}}},
            },
            "tasks[0].process.lifecycle.postStop.exec.command: must not be empty",
        ),
    ],
)
def test_tasks_that_cannot_run_are_refused_with_where(
    task: dict[str, object], expected: str
) -> None:
    with pytest.raises(WireError) as error:
        decode_tasks(body([task]))
    assert expected in str(error.value)


def test_args_alone_are_something_to_run_as_upstream_joins_command_and_args() -> None:
    (task,) = decode_tasks(body([{"name": "a", "process": {"args": ["true"]}}]))
    assert task.process is not None and task.process.argv == ["true"]


def test_the_same_name_twice_is_refused() -> None:
    with pytest.raises(WireError, match=r"tasks\[1\]\.name 'a': given twice"):
        decode_tasks(body([{"name": "a"}, {"name": "a"}]))


def test_every_problem_is_told_at_once() -> None:
    with pytest.raises(WireError) as error:
        decode_tasks(body([{"name": ""}, {"name": "b", "process": {}}]))
    assert "tasks[0].name" in str(error.value)
    assert "tasks[1].process.command" in str(error.value)


def test_the_report_is_camel_case_without_deletion_timestamp_and_with_exit_code_zero() -> None:
    report = TaskReport(
        name="bs-0",
        process=Process(command=["true"], working_dir="/w"),
        process_status=ProcessStatus(terminated=Terminated(exit_code=0, reason="Succeeded")),
    )
    sent = json.loads(encode(report))
    assert sent == {
        "name": "bs-0",
        "process": {"command": ["true"], "workingDir": "/w"},
        "processStatus": {"terminated": {"exitCode": 0, "reason": "Succeeded"}},
    }
    assert "deletionTimestamp" not in encode(decode_task(body(UPSTREAM_TASK))).decode()


@pytest.mark.parametrize("name", ["bs-0", "a..b", ".hidden", "ünïcode", "x" * 255])
def test_names_that_are_one_path_component_are_taken(name: str) -> None:
    assert name_problem(name) is None


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "/abs", "a\\b", "a\x00b", "é" * 128])
def test_names_that_are_no_safe_directory_name_are_refused(name: str) -> None:
    assert name_problem(name) is not None
