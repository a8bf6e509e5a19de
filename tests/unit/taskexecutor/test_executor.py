"""The executor's shell over a real data dir with make-believe supervisors
(services/taskexecutor/executor.py): upstream's task_manager_test.go cases that go through the
manager itself (create, get, list, delete, sync, async stop, timeout handling, recovery from
the store), here with the files really written and read back, and no process started."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from services.taskexecutor.core.plan import new_record
from services.taskexecutor.core.records import State
from services.taskexecutor.executor import Refused, TaskExecutor
from services.taskexecutor.processes import Supervisors
from services.taskexecutor.store import DataDir, TaskDir
from tests.unit.taskexecutor.world import T0, spec


class FakeSupervisors(Supervisors):
    """Supervisors that are only pids: ``running`` says which are alive; a stop ends one with
    ``stop_code`` in its exit file, as a supervisor does on SIGTERM."""

    def __init__(self) -> None:
        super().__init__(stop_grace=1.0)
        self.next_pid = 1000
        self.running: dict[int, Path] = {}
        self.stops: list[tuple[int, float]] = []
        self.stopped = threading.Event()
        self.stop_code = 143
        self.fail_launch = False
        self.before_stop: Callable[[Path], None] | None = None

    def launch(self, task: TaskDir) -> int:
        if self.fail_launch:
            raise OSError("cannot fork")
        self.next_pid += 1
        self.running[self.next_pid] = task.path
        return self.next_pid

    def reap(self) -> None:
        pass

    def alive(self, pid: int, task_dir: Path) -> bool:
        return self.running.get(pid) == task_dir

    def stop(self, pid: int, task_dir: Path, deadline: float, cancelled: threading.Event) -> None:
        self.stops.append((pid, deadline))
        if self.before_stop is not None:
            self.before_stop(task_dir)
        self.finish(pid, self.stop_code)
        self.stopped.set()

    def finish(self, pid: int, code: int) -> None:
        path = self.running.pop(pid)
        TaskDir(path).write_exit(code)


class Clock:
    """Real time until a test moves it on: start times are the pid files' real mtimes."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fakes() -> FakeSupervisors:
    return FakeSupervisors()


@pytest.fixture
def executor(tmp_path: Path, clock: Clock, fakes: FakeSupervisors) -> TaskExecutor:
    made = TaskExecutor(tmp_path / "data", stop_grace=1.0, clock=clock, supervisors=fakes)
    made.recover()
    return made


def restarted(old: TaskExecutor, clock: Clock, fakes: FakeSupervisors) -> TaskExecutor:
    made = TaskExecutor(old.data.root, stop_grace=1.0, clock=clock, supervisors=fakes)
    made.recover()
    return made


def state_of(executor: TaskExecutor, name: str) -> str:
    report = executor.get(name)
    assert report is not None and report.process_status is not None
    status = report.process_status
    if status.running is not None:
        return "running"
    if status.terminated is not None:
        return f"terminated {status.terminated.exit_code} {status.terminated.reason}"
    assert status.waiting is not None
    return f"waiting {status.waiting.reason}"


def pid_of(executor: TaskExecutor, name: str) -> int:
    pid, _ = executor.data.task(name).read_pid()
    assert pid is not None
    return pid


def test_create_writes_the_task_launches_its_supervisor_and_answers_running(
    executor: TaskExecutor,
) -> None:
    report = executor.create(spec("a"))
    assert report.process_status is not None and report.process_status.running is not None
    task = executor.data.task("a")
    assert task.read_record().spec == spec("a")
    assert task.read_record().status is not None
    assert pid_of(executor, "a") == 1001


def test_create_a_duplicate_and_a_second_active_task_is_refused(executor: TaskExecutor) -> None:
    executor.create(spec("a"))
    with pytest.raises(Refused, match="task a already exists"):
        executor.create(spec("a"))
    with pytest.raises(Refused, match=r"maximum concurrent tasks \(1\)"):
        executor.create(spec("b"))
    assert [t.name for t in executor.list()] == ["a"]


def test_a_launch_that_fails_leaves_nothing(executor: TaskExecutor, fakes: FakeSupervisors) -> None:
    fakes.fail_launch = True
    with pytest.raises(OSError, match="cannot fork"):
        executor.create(spec("a"))
    assert executor.list() == []
    assert not executor.data.task("a").path.exists()


def test_get_and_list(executor: TaskExecutor, clock: Clock) -> None:
    assert executor.get("a") is None
    assert executor.list() == []
    executor.create(spec("b", container=True))
    clock.now += 1
    executor.create(spec("a"))
    assert [t.name for t in executor.list()] == ["b", "a"]  # oldest first
    report = executor.get("b")
    assert report is not None and report.pod_status is not None
    assert report.pod_status.phase == "Failed"


def test_a_task_that_ends_is_reported_after_the_next_pass(
    executor: TaskExecutor, fakes: FakeSupervisors
) -> None:
    executor.create(spec("a"))
    fakes.finish(pid_of(executor, "a"), 0)
    assert state_of(executor, "a") == "running"  # the last inspection, until the next pass
    executor.reconcile()
    assert state_of(executor, "a") == "terminated 0 Succeeded"
    stored = executor.data.task("a").read_record().status
    assert stored is not None and stored.state is State.SUCCEEDED


def test_delete_stops_the_task_in_the_background_then_removes_it(
    executor: TaskExecutor, fakes: FakeSupervisors
) -> None:
    executor.create(spec("a"))
    assert executor.delete("a")
    assert not executor.delete("nope")
    executor.reconcile()
    assert fakes.stopped.wait(5)
    assert [pid for pid, _ in fakes.stops] == [1001]
    executor.reconcile()  # the stop's thread may still be letting go of "stopping"
    executor.reconcile()
    assert executor.get("a") is None
    assert not executor.data.task("a").path.exists()


def test_sync_replaces_a_task_with_another_in_one_call(executor: TaskExecutor) -> None:
    executor.sync([spec("a")])
    result = executor.sync([spec("b")])
    assert result.refused == ()
    assert [t.name for t in result.tasks] == ["a", "b"]  # "a" is being deleted
    assert executor.data.task("a").read_record().deleting


def test_sync_refuses_a_second_active_task_but_does_the_rest(executor: TaskExecutor) -> None:
    result = executor.sync([spec("a"), spec("b")])
    assert [t.name for t in result.tasks] == ["a"]
    assert len(result.refused) == 1


def test_sync_never_updates_an_existing_task(executor: TaskExecutor) -> None:
    executor.sync([spec("a", "sleep", "30")])
    executor.sync([spec("a", "echo", "other")])
    report = executor.get("a")
    assert report is not None and report.process is not None
    assert report.process.command == ["sleep", "30"]


def test_a_task_past_its_timeout_is_persisted_as_such_before_it_is_stopped(
    executor: TaskExecutor, fakes: FakeSupervisors, clock: Clock
) -> None:
    executor.create(spec("a", timeout=5))
    clock.now += 6
    seen_on_disk: list[bool] = []
    fakes.before_stop = lambda path: seen_on_disk.append(
        TaskDir(path).read_record().stopped_for_timeout
    )
    executor.reconcile()
    assert state_of(executor, "a") == "terminated 137 TaskTimeout"
    assert fakes.stopped.wait(5)
    assert seen_on_disk == [True]
    executor.reconcile()
    assert state_of(executor, "a") == "terminated 143 TaskTimeout"


def test_recovery_keeps_a_running_task_whose_supervisor_survived(
    executor: TaskExecutor, fakes: FakeSupervisors, clock: Clock
) -> None:
    executor.create(spec("a"))
    again = restarted(executor, clock, fakes)
    assert state_of(again, "a") == "running"


def test_recovery_drops_a_running_task_whose_supervisor_is_gone(
    executor: TaskExecutor, fakes: FakeSupervisors, clock: Clock
) -> None:
    executor.create(spec("a"))
    fakes.running.clear()  # the machine restarted: no supervisor, no exit file
    again = restarted(executor, clock, fakes)
    assert again.get("a") is None
    assert not again.data.task("a").path.exists()
    # So the controller, which sends the task again, starts it again.
    assert again.create(spec("a")).process_status is not None


def test_recovery_keeps_a_task_that_succeeded_while_the_executor_was_away(
    executor: TaskExecutor, fakes: FakeSupervisors, clock: Clock
) -> None:
    executor.create(spec("a"))
    fakes.finish(pid_of(executor, "a"), 0)
    again = restarted(executor, clock, fakes)
    assert state_of(again, "a") == "terminated 0 Succeeded"


def test_recovery_drops_a_task_never_started(
    executor: TaskExecutor, fakes: FakeSupervisors, clock: Clock
) -> None:
    # The executor died after writing task.json and before launching the supervisor.
    DataDir(executor.data.root).create(new_record(spec("a"), T0))
    again = restarted(executor, clock, fakes)
    assert again.get("a") is None


def test_recovery_leaves_a_corrupt_task_alone(
    executor: TaskExecutor, fakes: FakeSupervisors, clock: Clock
) -> None:
    executor.create(spec("a"))
    executor.data.task("a").file("task.json").write_text("{")
    again = restarted(executor, clock, fakes)
    assert again.list() == []
    assert executor.data.task("a").path.exists()
