"""A real task executor driven over HTTP (docs/opensandbox.md §5; the cases of upstream's
K/test/e2e_task, §7.4: a short task succeeds, env is inherited, a timeout ends as 137 or 143
with reason TaskTimeout, a task is deletable), plus what sandbus adds: the preStart and
postStop hooks, a restart that finds its task still running, and the refusals (one active task,
bad input) that leave the existing task alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.component.taskexecutor.executor import (
    EXECUTOR_MARK,
    Client,
    Executor,
    file_text,
    terminated_of,
)
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(60)


def process_task(name: str, *command: str, **fields: object) -> dict[str, object]:
    return {"name": name, "process": {"command": list(command), **fields}}


def pid_of(executor: Executor, name: str) -> int:
    return int((executor.task_dir(name) / "pid").read_text())


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs: a process killed and not yet reaped by its parent (a zombie,
    state ``Z``) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def test_health(client: Client) -> None:
    assert await client.call("GET", "/health") == (200, {"status": "healthy"})


async def test_a_short_task_succeeds_and_its_output_is_logged(
    client: Client, executor: Executor
) -> None:
    status, body = await client.set_tasks(
        [process_task("short", "sh", "-c", "echo hello; echo oops >&2")]
    )
    assert status == 200
    assert [t["name"] for t in body] == ["short"]
    ended = await client.terminated("short")
    assert (ended["exitCode"], ended["reason"]) == (0, "Succeeded")
    assert ended["startedAt"] and ended["finishedAt"]
    task_dir = executor.task_dir("short")
    assert (task_dir / "stdout.log").read_text() == "hello\n"
    assert (task_dir / "stderr.log").read_text() == "oops\n"
    assert (task_dir / "exit").read_text() == "0"
    assert (task_dir / "task.json").exists()


async def test_env_and_working_dir_reach_the_process(
    client: Client, executor: Executor, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = f'printf "%s %s %s" "$GREETING" "${EXECUTOR_MARK}" "$(pwd)" > seen.txt'
    task = process_task(
        "env", "sh", "-c", script, env=[{"name": "GREETING", "value": "hi"}], workingDir=str(work)
    )
    assert (await client.set_tasks([task]))[0] == 200
    assert (await client.terminated("env"))["exitCode"] == 0
    assert (work / "seen.txt").read_text() == f"hi inherited {work}"


async def test_a_failing_command_is_failed_with_its_exit_code(client: Client) -> None:
    assert (await client.set_tasks([process_task("fails", "sh", "-c", "exit 3")]))[0] == 200
    ended = await client.terminated("fails")
    assert (ended["exitCode"], ended["reason"]) == (3, "Failed")
    assert ended["message"] == "the process exited with code 3"
    # The first ended, so a second may start: a command that does not exist.
    status, _ = await client.call("POST", "/tasks", json=process_task("missing", "/no/such/cmd"))
    assert status == 201
    ended = await client.terminated("missing")
    assert (ended["exitCode"], ended["reason"]) == (127, "Failed")
    assert "could not be started" in ended["message"]


async def test_a_task_past_its_timeout_ends_as_task_timeout(client: Client) -> None:
    task = process_task("slow", "sleep", "30", timeoutSeconds=1)
    assert (await client.set_tasks([task]))[0] == 200
    ended = await client.terminated("slow")
    assert ended["reason"] == "TaskTimeout"
    assert ended["exitCode"] in (137, 143)
    # Once stopped (SIGTERM: 143), it keeps saying why.
    final = await client.until("slow", lambda t: (terminated_of(t) or {}).get("exitCode") == 143)
    stopped = terminated_of(final)
    assert stopped is not None
    assert (stopped["exitCode"], stopped["reason"]) == (143, "TaskTimeout")


async def test_a_failing_pre_start_keeps_the_process_from_starting(
    client: Client, tmp_path: Path
) -> None:
    marker, cleaned = tmp_path / "process-ran", tmp_path / "post-stop-ran"
    task = process_task(
        "prep",
        "touch",
        str(marker),
        lifecycle={
            "preStart": {"exec": {"command": ["sh", "-c", "echo staging; exit 4"]}},
            "postStop": {"exec": {"command": ["touch", str(cleaned)]}},
        },
    )
    assert (await client.set_tasks([task]))[0] == 200
    ended = await client.terminated("prep")
    assert (ended["exitCode"], ended["reason"]) == (4, "PreStartHookFailed")
    assert ended["message"] == "preStart hook exited with code 4"
    report = await client.until(
        "prep", lambda t: t is not None and "postStop" in t.get("lifecycleStatus", {})
    )
    assert report is not None
    assert report["lifecycleStatus"]["preStart"]["exitCode"] == 4
    assert report["lifecycleStatus"]["postStop"]["exitCode"] == 0
    assert not marker.exists()
    assert cleaned.exists()  # postStop runs after a failed preStart too


async def test_a_pre_start_past_its_timeout_keeps_the_process_from_starting(
    client: Client, tmp_path: Path
) -> None:
    marker = tmp_path / "process-ran"
    task = process_task(
        "prep",
        "touch",
        str(marker),
        lifecycle={"preStart": {"exec": {"command": ["sleep", "30"]}, "timeoutSeconds": 1}},
    )
    assert (await client.set_tasks([task]))[0] == 200
    ended = await client.terminated("prep")
    assert (ended["exitCode"], ended["reason"]) == (137, "PreStartHookTimeout")
    assert ended["message"] == "preStart hook timed out after 1s"
    assert not marker.exists()


async def test_post_stop_runs_after_success(client: Client, tmp_path: Path) -> None:
    written = tmp_path / "post.txt"
    task = process_task(
        "ok",
        "true",
        env=[{"name": "OUTPUT", "value": "saved"}],
        lifecycle={"postStop": {"exec": {"command": ["sh", "-c", f'echo "$OUTPUT" > {written}']}}},
    )
    assert (await client.set_tasks([task]))[0] == 200
    assert (await client.terminated("ok"))["exitCode"] == 0
    assert await file_text(written) == "saved\n"
    report = await client.task("ok")
    assert report is not None
    assert report["lifecycleStatus"]["postStop"]["reason"] == "Succeeded"


async def test_post_stop_runs_when_a_running_task_is_deleted(
    client: Client, executor: Executor, tmp_path: Path
) -> None:
    written = tmp_path / "post.txt"
    task = process_task(
        "long",
        "sleep",
        "30",
        lifecycle={"postStop": {"exec": {"command": ["sh", "-c", f"echo bye > {written}"]}}},
    )
    assert (await client.set_tasks([task]))[0] == 200
    await client.running("long")
    pid = pid_of(executor, "long")
    assert (await client.set_tasks([]))[0] == 200
    await client.until("long", lambda t: t is None)
    assert written.read_text() == "bye\n"
    assert not executor.task_dir("long").exists()
    await until(lambda: not alive(pid), within=5, what=f"process {pid} stopped")
    assert await client.get_tasks() == []


async def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_then_post_stop_runs(
    client: Client, executor: Executor, tmp_path: Path
) -> None:
    written = tmp_path / "post.txt"
    task = process_task(
        "stubborn",
        "sh",
        "-c",
        'trap "" TERM; exec sleep 30',  # sleep inherits the ignored SIGTERM
        lifecycle={"postStop": {"exec": {"command": ["touch", str(written)]}}},
    )
    assert (await client.set_tasks([task]))[0] == 200
    await client.running("stubborn")
    pid = pid_of(executor, "stubborn")
    assert (await client.set_tasks([]))[0] == 200
    await client.until("stubborn", lambda t: t is None)  # 1 s of grace, then SIGKILL
    assert written.exists()
    await until(lambda: not alive(pid), within=5, what=f"process {pid} killed")


async def test_a_task_deleted_during_its_pre_start_never_starts_its_process(
    client: Client, tmp_path: Path
) -> None:
    marker, cleaned = tmp_path / "process-ran", tmp_path / "post-stop-ran"
    task = process_task(
        "early",
        "touch",
        str(marker),
        lifecycle={
            "preStart": {"exec": {"command": ["sleep", "30"]}},
            "postStop": {"exec": {"command": ["touch", str(cleaned)]}},
        },
    )
    assert (await client.set_tasks([task]))[0] == 200
    await client.until(
        "early", lambda t: t is not None and "preStart" in t.get("lifecycleStatus", {})
    )
    assert (await client.set_tasks([]))[0] == 200
    await client.until("early", lambda t: t is None)
    assert cleaned.exists()
    assert not marker.exists()


async def test_delete_by_name_stops_and_removes_the_task(client: Client) -> None:
    assert (await client.set_tasks([process_task("gone", "sleep", "30")]))[0] == 200
    await client.running("gone")
    assert await client.call("DELETE", "/tasks/gone") == (204, None)
    await client.until("gone", lambda t: t is None)
    assert (await client.call("DELETE", "/tasks/gone"))[0] == 404


async def test_a_killed_executor_restarted_reports_the_task_running_then_its_end(
    client: Client, executor: Executor
) -> None:
    task = process_task("survivor", "sh", "-c", "sleep 2; echo done")
    assert (await client.set_tasks([task]))[0] == 200
    await client.running("survivor")
    pid = pid_of(executor, "survivor")
    executor.kill()
    assert alive(pid)  # the supervisor outlives its executor
    executor.start()
    report = await client.task("survivor")
    assert report is not None and "running" in report["processStatus"]
    ended = await client.terminated("survivor")
    assert (ended["exitCode"], ended["reason"]) == (0, "Succeeded")
    assert (executor.task_dir("survivor") / "stdout.log").read_text() == "done\n"


async def test_sigterm_stops_the_executor_with_exit_0_and_leaves_the_task_running(
    client: Client, executor: Executor
) -> None:
    assert (await client.set_tasks([process_task("work", "sleep", "30")]))[0] == 200
    await client.running("work")
    pid = pid_of(executor, "work")
    assert executor.terminate() == 0
    assert alive(pid)
    executor.start()
    await client.running("work")
    assert pid_of(executor, "work") == pid


async def test_at_most_one_active_task(client: Client) -> None:
    assert (await client.set_tasks([process_task("a", "sleep", "30")]))[0] == 200
    status, body = await client.call("POST", "/tasks", json=process_task("b", "true"))
    assert status == 409
    assert body["code"] == "Conflict"
    assert "maximum concurrent tasks (1) reached" in body["message"]
    status, body = await client.set_tasks(
        [process_task("a", "sleep", "30"), process_task("b", "true")]
    )
    assert status == 409
    assert "task b" in body["message"]
    status, body = await client.call("POST", "/tasks", json=process_task("a", "true"))
    assert (status, body["message"]) == (409, "task a already exists")
    assert [t["name"] for t in await client.get_tasks()] == ["a"]


@pytest.mark.parametrize(
    ("path", "payload", "expected"),
    [
        ("/setTasks", b"{not json", "expected a JSON array"),
        ("/setTasks", b"[nope]", "not JSON"),
        ("/setTasks", b'{"name": "x"}', "expected a JSON array"),
        ("/setTasks", b'[{"name": "../x"}]', "path separator"),
        ("/setTasks", b'[{"name": "x", "process": {"timeoutSeconds": "1"}}]', "timeoutSeconds"),
        ("/setTasks", b"", "no body"),
        ("/tasks", b"[]", "expected a JSON object"),
    ],
)
async def test_bad_input_is_400_and_the_existing_task_is_kept(
    client: Client, path: str, payload: bytes, expected: str
) -> None:
    assert (await client.set_tasks([process_task("kept", "sleep", "30")]))[0] == 200
    await client.running("kept")
    headers = {"Content-Type": "application/json"}
    status, body = await client.call("POST", path, data=payload, headers=headers)
    assert status == 400
    assert body["code"] == "Bad Request"
    assert expected in body["message"]
    assert [t["name"] for t in await client.get_tasks()] == ["kept"]
    assert "running" in (await client.running("kept"))["processStatus"]


async def test_unknown_tasks_and_routes(client: Client) -> None:
    status, body = await client.call("GET", "/tasks/nope")
    assert (status, body["message"]) == (404, "task nope not found")
    assert (await client.call("GET", "/nowhere"))[0] == 404
    assert (await client.call("GET", "/setTasks"))[0] == 405
    assert (await client.call("GET", "/tasks/..%2Fetc"))[0] == 400


async def test_a_container_task_fails_with_a_clear_message(client: Client) -> None:
    status, body = await client.set_tasks([{"name": "c", "podTemplateSpec": {"spec": {}}}])
    assert status == 200
    (task,) = body
    assert "processStatus" not in task
    assert task["podStatus"]["phase"] == "Failed"
    assert task["podStatus"]["reason"] == "ContainerTaskNotSupported"
    assert "container tasks are not supported" in task["podStatus"]["message"]
