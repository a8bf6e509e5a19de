"""The API rendering (services/taskexecutor/core/render.py, docs/opensandbox.md §5 "API
rendering"; upstream's handler_test.go "Timeout → 137"): each state as a container state, the
Pod status of container tasks, ``lifecycleStatus``, and Go's timestamps."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from services.taskexecutor.core.records import LifecycleRecord, State
from services.taskexecutor.core.render import render, rfc3339
from services.taskexecutor.core.wire import TaskSpec, encode
from tests.unit.taskexecutor.world import T0, at, record, spec, step

NOW = at(20)


def sent(task: object) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(encode(task))
    return value


def with_pod_template(task: TaskSpec) -> TaskSpec:
    return msgspec.structs.replace(task, pod_template_spec={"spec": {}})


def test_timestamps_are_rfc3339_utc_to_the_second() -> None:
    assert rfc3339(1_780_000_000.75) == "2026-05-28T20:26:40Z"
    assert rfc3339(None) is None


def test_pending_is_waiting() -> None:
    out = sent(render(record(state=State.PENDING, reason="Pending"), NOW))
    assert out["processStatus"] == {"waiting": {"reason": "Pending"}}


def test_a_task_never_inspected_is_waiting_pending() -> None:
    out = sent(render(record(state=None), NOW))
    assert out["processStatus"] == {"waiting": {"reason": "Pending"}}


def test_running_is_running_since_its_start() -> None:
    out = sent(render(record(state=State.RUNNING, started_at=T0), NOW))
    assert out["processStatus"] == {"running": {"startedAt": rfc3339(T0)}}


def test_timeout_is_terminated_137_task_timeout_finished_now() -> None:
    task = record(
        spec(timeout=5),
        state=State.TIMEOUT,
        exit_code=137,
        reason="TaskTimeout",
        message="the task ran longer than its timeout of 5s",
        started_at=T0,
    )
    out = sent(render(task, NOW))
    assert out["processStatus"] == {
        "terminated": {
            "exitCode": 137,
            "reason": "TaskTimeout",
            "message": "the task ran longer than its timeout of 5s",
            "startedAt": rfc3339(T0),
            "finishedAt": rfc3339(NOW),
        }
    }


def test_ended_is_terminated_with_code_signal_reason_and_times() -> None:
    task = record(
        state=State.FAILED,
        exit_code=143,
        signal=15,
        reason="Failed",
        message="the process was killed by SIGTERM",
        started_at=T0,
        finished_at=at(3),
    )
    terminated = sent(render(task, NOW))["processStatus"]
    assert terminated == {
        "terminated": {
            "exitCode": 143,
            "signal": 15,
            "reason": "Failed",
            "message": "the process was killed by SIGTERM",
            "startedAt": rfc3339(T0),
            "finishedAt": rfc3339(at(3)),
        }
    }


def test_success_says_exit_code_zero() -> None:
    task = record(state=State.SUCCEEDED, exit_code=0, reason="Succeeded", finished_at=at(3))
    assert sent(render(task, NOW))["processStatus"]["terminated"]["exitCode"] == 0


def test_not_found_is_waiting_with_its_reason() -> None:
    out = sent(render(record(state=State.NOT_FOUND, reason="NotFound"), NOW))
    assert out["processStatus"] == {"waiting": {"reason": "NotFound"}}


def test_no_deletion_timestamp_is_sent_for_a_deleting_task() -> None:
    out = sent(render(record(deleting=True), NOW))
    assert "deletionTimestamp" not in out
    assert out["name"] == "bs-0"
    assert out["process"] == {"command": ["sleep", "30"]}


def test_the_hooks_are_reported_in_lifecycle_status() -> None:
    lifecycle = LifecycleRecord(
        pre_start=step(0, "Succeeded"),
        process=step(0, "Succeeded"),
        post_stop=step(None, started_at=at(2)),
    )
    out = sent(render(record(state=State.RUNNING, started_at=T0, lifecycle=lifecycle), NOW))
    assert out["lifecycleStatus"] == {
        "preStart": {
            "exitCode": 0,
            "reason": "Succeeded",
            "startedAt": rfc3339(T0),
            "finishedAt": rfc3339(at(1)),
        },
        "postStop": {"startedAt": rfc3339(at(2))},
    }


def test_no_lifecycle_status_without_hooks() -> None:
    lifecycle = LifecycleRecord(process=step(0, "Succeeded"))
    out = sent(render(record(state=State.RUNNING, lifecycle=lifecycle), NOW))
    assert "lifecycleStatus" not in out


def test_a_container_task_reports_a_failed_pod_status_and_no_process_status() -> None:
    task = record(
        spec(container=True),
        state=State.FAILED,
        reason="ContainerTaskNotSupported",
        message="container tasks are not supported",
        finished_at=T0,
    )
    out = sent(render(task, NOW))
    assert "processStatus" not in out
    pod = out["podStatus"]
    assert pod["phase"] == "Failed"
    assert pod["reason"] == "ContainerTaskNotSupported"
    assert [c["status"] for c in pod["conditions"]] == ["False", "False"]


def test_a_process_task_with_a_pod_template_reports_both_ready_while_running() -> None:
    task = record(with_pod_template(spec()), state=State.RUNNING, started_at=T0)
    out = sent(render(task, NOW))
    assert out["processStatus"] == {"running": {"startedAt": rfc3339(T0)}}
    pod = out["podStatus"]
    assert pod["phase"] == "Running"
    assert pod["conditions"] == [
        {"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(T0)},
        {"type": "ContainersReady", "status": "True", "lastTransitionTime": rfc3339(T0)},
    ]


def test_a_timed_out_task_with_a_pod_template_is_pod_phase_unknown_as_upstream() -> None:
    task = record(with_pod_template(spec()), state=State.TIMEOUT, exit_code=137, started_at=T0)
    assert sent(render(task, NOW))["podStatus"]["phase"] == "Unknown"
