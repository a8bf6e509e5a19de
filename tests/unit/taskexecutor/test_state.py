"""The state machine (services/taskexecutor/core/state.py, docs/opensandbox.md §5 "state
machine"), from (files, alive, now): upstream's process_test.go cases (a short-lived task, a
failing one, a timeout detected or not, a crashed supervisor) read off the directory, and the
additions: a timeout survives the stop, a failed preStart hook is the reason, the process's
own message, container tasks, an exit file that holds no number."""

from __future__ import annotations

import pytest

from services.taskexecutor.core.records import (
    LifecycleRecord,
    State,
    Status,
)
from services.taskexecutor.core.state import (
    CONTAINER_UNSUPPORTED_MESSAGE,
    TERMINAL,
    inspect,
)
from tests.unit.taskexecutor.world import T0, at, observed, record, spec, step


def test_nothing_in_the_directory_is_pending() -> None:
    status = inspect(record(), observed(pid=False), at(1))
    assert status == Status(state=State.PENDING, reason="Pending")


def test_a_live_supervisor_is_running_since_the_pid_file_was_written() -> None:
    status = inspect(record(), observed(), at(100))
    assert status == Status(state=State.RUNNING, started_at=T0)


def test_exit_zero_is_succeeded_from_start_to_the_exit_file() -> None:
    status = inspect(record(), observed(exit="0"), at(5))
    assert (status.state, status.exit_code, status.reason) == (State.SUCCEEDED, 0, "Succeeded")
    assert (status.started_at, status.finished_at) == (T0, at(3))


def test_a_non_zero_exit_is_failed_with_its_code_and_the_process_message() -> None:
    lifecycle = LifecycleRecord(
        process=step(143, "Failed", "the process was killed by SIGTERM", signal=15)
    )
    status = inspect(record(), observed(exit="143\n", lifecycle=lifecycle), at(5))
    assert status.state is State.FAILED
    assert (status.exit_code, status.signal, status.reason) == (143, 15, "Failed")
    assert status.message == "the process was killed by SIGTERM"


def test_an_exit_file_wins_over_a_live_pid() -> None:
    # The supervisor writes exit last and may still be exiting: the task has ended.
    assert inspect(record(), observed(exit="3"), at(5)).state is State.FAILED


def test_a_dead_supervisor_without_an_exit_file_crashed() -> None:
    status = inspect(record(), observed(alive=False), at(50))
    assert status.state is State.FAILED
    assert (status.exit_code, status.reason) == (137, "ProcessCrashed")
    # A finish time that does not move: the status stays equal, and is persisted once.
    assert status == inspect(record(), observed(alive=False), at(90))


def test_timeout_not_detected_before_timeout_seconds() -> None:
    task = record(spec(timeout=10))
    assert inspect(task, observed(), at(10)).state is State.RUNNING


def test_timeout_detected_once_running_longer_than_timeout_seconds() -> None:
    status = inspect(record(spec(timeout=10)), observed(), at(10.5))
    assert status.state is State.TIMEOUT
    assert (status.exit_code, status.reason) == (137, "TaskTimeout")
    assert "timeout of 10s" in status.message


@pytest.mark.parametrize("limit", [0, -5])
def test_no_timeout_means_never(limit: int) -> None:
    assert inspect(record(spec(timeout=limit)), observed(), at(10**6)).state is State.RUNNING


@pytest.mark.parametrize(("code", "expected"), [("143", 143), ("137", 137), ("0", 137)])
def test_a_task_stopped_for_its_timeout_keeps_reporting_task_timeout(
    code: str, expected: int
) -> None:
    task = record(spec(timeout=1), stopped_for_timeout=True)
    status = inspect(task, observed(exit=code), at(5))
    assert status.state is State.FAILED
    assert (status.exit_code, status.reason) == (expected, "TaskTimeout")
    assert "timeout of 1s" in status.message


def test_a_timeout_stop_that_lost_the_supervisor_is_still_a_timeout() -> None:
    task = record(spec(timeout=1), stopped_for_timeout=True)
    status = inspect(task, observed(alive=False), at(5))
    assert (status.state, status.exit_code, status.reason) == (State.FAILED, 137, "TaskTimeout")


def test_a_failed_pre_start_hook_is_the_reason_and_its_code_the_exit_code() -> None:
    lifecycle = LifecycleRecord(
        pre_start=step(4, "PreStartHookFailed", "preStart hook exited with code 4")
    )
    status = inspect(record(), observed(exit="4", lifecycle=lifecycle), at(5))
    assert status.state is State.FAILED
    assert (status.exit_code, status.reason) == (4, "PreStartHookFailed")
    assert status.message == "preStart hook exited with code 4"
    assert status.lifecycle == lifecycle


def test_a_timed_out_pre_start_hook_is_the_reason() -> None:
    lifecycle = LifecycleRecord(
        pre_start=step(137, "PreStartHookTimeout", "preStart hook timed out after 2s")
    )
    status = inspect(record(), observed(exit="137", lifecycle=lifecycle), at(5))
    assert (status.exit_code, status.reason) == (137, "PreStartHookTimeout")


def test_a_failed_post_stop_hook_leaves_a_succeeded_task_succeeded() -> None:
    lifecycle = LifecycleRecord(
        process=step(0, "Succeeded"), post_stop=step(1, "PostStopHookFailed", "exited 1")
    )
    status = inspect(record(), observed(exit="0", lifecycle=lifecycle), at(5))
    assert status.state is State.SUCCEEDED
    assert status.lifecycle == lifecycle


def test_the_hooks_seen_so_far_come_with_a_running_task() -> None:
    lifecycle = LifecycleRecord(pre_start=step(0, "Succeeded"), process=step(None))
    assert inspect(record(), observed(lifecycle=lifecycle), at(5)).lifecycle == lifecycle


def test_an_exit_file_without_a_number_is_failed_not_succeeded() -> None:
    status = inspect(record(), observed(exit="garbage"), at(5))
    assert (status.state, status.exit_code) == (State.FAILED, 1)
    assert "garbage" in status.message


def test_a_directory_that_is_gone_is_not_found() -> None:
    status = inspect(record(), observed(present=False), at(5))
    assert (status.state, status.reason) == (State.NOT_FOUND, "NotFound")


def test_a_container_task_is_failed_from_the_start_with_a_clear_message() -> None:
    status = inspect(record(spec(container=True)), observed(pid=False), at(5))
    assert status.state is State.FAILED
    assert status.reason == "ContainerTaskNotSupported"
    assert status.message == CONTAINER_UNSUPPORTED_MESSAGE
    assert "not supported" in status.message


def test_terminal_states_are_upstreams() -> None:
    assert frozenset({State.SUCCEEDED, State.FAILED, State.NOT_FOUND}) == TERMINAL
