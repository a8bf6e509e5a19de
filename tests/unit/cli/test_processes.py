"""The supervisor of ``sandbus up``'s children (services/cli/processes.py), with small Python
children in place of sandbus's: a child that exits is reported and started again, one that
runs out of restarts (or is not restarted) sets ``failed``, and a stop ends every child."""

from __future__ import annotations

import asyncio
import sys

from services.cli.processes import RestartPolicy, Supervisor

QUICK = RestartPolicy(max_restarts=2, backoff=0.01, max_backoff=0.02)
EXITS = [sys.executable, "-c", "print('hello'); raise SystemExit(3)"]
RUNS = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]


def _recorder() -> tuple[list[tuple[str, str]], Supervisor]:
    said: list[tuple[str, str]] = []
    return said, Supervisor(lambda part, detail: said.append((part, detail)), QUICK)


async def test_a_child_that_exits_is_restarted_until_its_restarts_run_out() -> None:
    said, supervisor = _recorder()
    await supervisor.start("flaky", EXITS)
    async with asyncio.timeout(20):
        what = await supervisor.failed
    assert what.startswith("flaky exited with code 3 (pid ") and "after 2 restarts" in what
    details = [detail for part, detail in said if part == "flaky"]
    assert [d.split(";")[1].strip() for d in details] == [
        "restarting in 0.01 s (restart 1 of 2)",
        "restarting in 0.02 s (restart 2 of 2)",
        "stopping",
    ], details


async def test_a_child_not_to_restart_fails_at_its_first_exit() -> None:
    said, supervisor = _recorder()
    await supervisor.start("cluster", EXITS, restart=False)
    async with asyncio.timeout(20):
        what = await supervisor.failed
    assert what.startswith("cluster exited with code 3") and "restarts" not in what
    assert len(said) == 1


async def test_stop_ends_every_child_and_says_so() -> None:
    said, supervisor = _recorder()
    children = [await supervisor.start(name, RUNS) for name in ("a", "b")]
    async with asyncio.timeout(20):
        await supervisor.stop(["a", "b"])
    assert all(c.process is not None and c.process.returncode is not None for c in children)
    assert not supervisor.failed.done()
    # A child that does not handle SIGTERM dies of it: said, as not a clean stop.
    assert sorted(said) == [(name, "stopped: killed by SIGTERM") for name in ("a", "b")]


async def test_a_stop_during_the_backoff_starts_nothing_again() -> None:
    reported = asyncio.Event()
    supervisor = Supervisor(lambda part, detail: reported.set(), RestartPolicy(backoff=30))
    child = await supervisor.start("flaky", EXITS)
    async with asyncio.timeout(20):
        await reported.wait()  # exited, and waiting 30 s to start again
        first = child.pid
        await supervisor.stop(["flaky"])
    assert child.pid == first and not supervisor.failed.done()
