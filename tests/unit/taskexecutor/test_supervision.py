"""The supervisor's decisions (services/taskexecutor/core/supervision.py): exit codes as a
shell reports them, each hook's outcome (succeeded, failed, timed out, not startable, cut
short by a stop), the process's, whether the process starts after the preStart hook, the
task's exit code, and the environment (upstream's process_test.go "env inheritance")."""

from __future__ import annotations

import errno

import pytest

from services.taskexecutor.core.records import LifecycleRecord
from services.taskexecutor.core.supervision import (
    Ended,
    exit_status,
    hook_step,
    merged_env,
    process_step,
    should_start_process,
    task_exit_code,
)
from services.taskexecutor.core.wire import EnvVar
from tests.unit.taskexecutor.world import T0, at, step

END = at(2)


@pytest.mark.parametrize(
    ("ended", "expected"),
    [
        (Ended(END, returncode=0), (0, 0)),
        (Ended(END, returncode=3), (3, 0)),
        (Ended(END, returncode=-15), (143, 15)),
        (Ended(END, returncode=-9), (137, 9)),
        (Ended(END, spawn_error="no such file", spawn_errno=errno.ENOENT), (127, 0)),
        (Ended(END, spawn_error="permission denied", spawn_errno=errno.EACCES), (126, 0)),
    ],
)
def test_exit_codes_are_told_as_a_shell_tells_them(ended: Ended, expected: tuple[int, int]) -> None:
    assert exit_status(ended) == expected


def test_a_hook_that_exits_zero_succeeded() -> None:
    record = hook_step("preStart", T0, Ended(END, returncode=0), 0)
    assert (record.exit_code, record.reason, record.message) == (0, "Succeeded", "")
    assert (record.started_at, record.finished_at) == (T0, END)


def test_a_hook_that_exits_non_zero_failed() -> None:
    record = hook_step("preStart", T0, Ended(END, returncode=4), 0)
    assert (record.exit_code, record.reason) == (4, "PreStartHookFailed")
    assert record.message == "preStart hook exited with code 4"


def test_a_hook_killed_by_a_signal_says_so() -> None:
    record = hook_step("postStop", T0, Ended(END, returncode=-11), 0)
    assert (record.exit_code, record.signal, record.reason) == (139, 11, "PostStopHookFailed")
    assert record.message == "postStop hook was killed by SIGSEGV"


def test_a_hook_past_its_timeout_timed_out() -> None:
    record = hook_step("preStart", T0, Ended(END, returncode=-9, timed_out=True), 3)
    assert (record.exit_code, record.reason) == (137, "PreStartHookTimeout")
    assert record.message == "preStart hook timed out after 3s"
    post = hook_step("postStop", T0, Ended(END, returncode=-9, timed_out=True), 3)
    assert post.reason == "PostStopHookTimeout"


def test_a_hook_that_cannot_be_started_failed() -> None:
    ended = Ended(END, spawn_error="[Errno 2] No such file", spawn_errno=errno.ENOENT)
    record = hook_step("preStart", T0, ended, 0)
    assert (record.exit_code, record.reason) == (127, "PreStartHookFailed")
    assert "could not be started: [Errno 2] No such file" in record.message


def test_a_pre_start_hook_cut_short_by_a_stop_is_stopped_not_failed() -> None:
    record = hook_step("preStart", T0, Ended(END, returncode=-15, stopped=True), 0)
    assert (record.exit_code, record.reason) == (143, "Stopped")


def test_the_process_record() -> None:
    assert process_step(T0, Ended(END, returncode=0)).reason == "Succeeded"
    failed = process_step(T0, Ended(END, returncode=2))
    assert (failed.exit_code, failed.reason, failed.message) == (
        2,
        "Failed",
        "the process exited with code 2",
    )
    stopped = process_step(T0, Ended(END, returncode=-15, stopped=True))
    assert stopped.message == "the process was killed by SIGTERM after the task was stopped"
    missing = process_step(T0, Ended(END, spawn_error="nope", spawn_errno=errno.ENOENT))
    assert (missing.exit_code, missing.message) == (127, "the process could not be started: nope")


def test_the_process_starts_only_after_a_pre_start_that_exited_zero_and_without_a_stop() -> None:
    assert should_start_process(None, stop_requested=False)
    assert should_start_process(step(0, "Succeeded"), stop_requested=False)
    assert not should_start_process(step(4, "PreStartHookFailed"), stop_requested=False)
    assert not should_start_process(step(137, "PreStartHookTimeout"), stop_requested=False)
    assert not should_start_process(None, stop_requested=True)
    assert not should_start_process(step(0, "Succeeded"), stop_requested=True)


def test_the_task_exit_code() -> None:
    assert task_exit_code(LifecycleRecord(process=step(0))) == 0
    assert task_exit_code(LifecycleRecord(process=step(3), post_stop=step(9))) == 3
    # No process: the failed preStart hook's code, or a stop's.
    assert task_exit_code(LifecycleRecord(pre_start=step(4), post_stop=step(0))) == 4
    assert task_exit_code(LifecycleRecord(pre_start=step(0))) == 143
    assert task_exit_code(LifecycleRecord()) == 143


def test_the_environment_is_the_executors_with_the_tasks_on_top() -> None:
    base = {"PATH": "/bin", "HOME": "/root", "A": "executor"}
    env = [EnvVar(name="A", value="task"), EnvVar(name="B"), EnvVar(name="", value="skipped")]
    assert merged_env(base, env) == {"PATH": "/bin", "HOME": "/root", "A": "task", "B": ""}
    assert base["A"] == "executor"
