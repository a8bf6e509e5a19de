"""``--kill-tasks`` (services/taskexecutor/cli.py): SIGKILL the process group of every task of
the data dir, print the group ids and exit 0. It is the process boundary through which the
development cluster's kubelet stops the tasks of a Pod that goes (their supervisors outlive the
executor by design)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.taskexecutor.cli import main
from services.taskexecutor.core.plan import new_record
from services.taskexecutor.store import DataDir
from tests.unit.taskexecutor.world import T0, spec

KILL_TASKS = (sys.executable, "-m", "services.taskexecutor", "--kill-tasks")


def _gone(pid: int) -> bool:
    """No such process any more, or only its zombie (its parent has not reaped it yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.02)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_tasks_kills_each_tasks_process_group_and_exits_zero(tmp_path: Path) -> None:
    data = DataDir(tmp_path / "data")
    task = data.create(new_record(spec("bs-0"), T0))
    # The task's supervisor, as kill_supervisors recognises one: the leader of a process group
    # of its own whose command line names the task's directory; and a real `sleep` it started,
    # in its group, as the task's process.
    with subprocess.Popen(
        ["sh", "-c", 'sleep 60 & echo "$!"; wait', "supervisor", str(task.path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
    ) as supervisor:
        try:
            assert supervisor.stdout is not None
            sleep_pid = int(supervisor.stdout.readline())
            task.write_pid(supervisor.pid)

            done = subprocess.run(
                [*KILL_TASKS, "--data-dir", str(data.root)],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
            )

            assert done.returncode == 0, done.stderr.decode(errors="replace")
            assert done.stdout.split() == [str(supervisor.pid).encode()]
            assert supervisor.wait(timeout=10) == -signal.SIGKILL
            assert _wait_gone(sleep_pid), "the task's process went with its supervisor's group"
        finally:
            if supervisor.poll() is None:
                os.killpg(supervisor.pid, signal.SIGKILL)


def test_kill_tasks_of_a_data_dir_without_tasks_signals_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--data-dir", str(tmp_path / "never-made"), "--kill-tasks"]) == 0
    assert capsys.readouterr().out == ""
