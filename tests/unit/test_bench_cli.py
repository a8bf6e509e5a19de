"""``sandbus bench``: forwards to ``python -m bench`` (bench/ at the repository root), whose help
lists every scenario and which says clearly when a scenario does not exist. No benchmark runs
here: only the help, the errors and the report of no results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from services.cli.bench import bench_dir

SCENARIOS = ("delivery", "batch", "sustained", "burst", "fill", "watcher", "recovery", "memory")


def sandbus(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_bench_is_found_beside_the_services_package() -> None:
    assert (bench_dir() / "__main__.py").is_file()


def test_help_lists_every_scenario() -> None:
    done = sandbus("bench", "--help")
    assert done.returncode == 0, done.stderr
    assert "usage: sandbus bench" in done.stdout
    for name in (*SCENARIOS, "all", "report"):
        assert f"    {name}" in done.stdout, name


def test_a_scenario_has_its_own_help() -> None:
    done = sandbus("bench", "delivery", "--help")
    assert done.returncode == 0, done.stderr
    assert "--write-latency-ms" in done.stdout
    assert "--concurrency" in done.stdout


def test_an_unknown_scenario_is_a_clear_error() -> None:
    done = sandbus("bench", "no-such-scenario")
    assert done.returncode == 2
    assert "invalid choice: 'no-such-scenario'" in done.stderr
    assert "delivery" in done.stderr


def test_no_scenario_says_which_there_are() -> None:
    done = sandbus("bench")
    assert done.returncode == 2
    assert "choose a scenario" in done.stderr
    for name in SCENARIOS:
        assert name in done.stderr


def test_report_without_results_says_not_yet_measured(tmp_path: Path) -> None:
    output = tmp_path / "BENCHMARKS.md"
    done = sandbus("bench", "report", "--results", str(tmp_path), "--output", str(output))
    assert done.returncode == 0, done.stderr
    text = output.read_text()
    for name in SCENARIOS:
        assert f"### {name}:" in text
    assert text.count("not yet measured") >= len(SCENARIOS)
    assert "## Where the time goes" in text, "bench/analysis.md, after the results"


def test_a_sustained_run_with_a_further_rate_is_still_full_size() -> None:
    """A run of every full-size rate plus one this machine sustains is reported as the
    scenario's figures; one that leaves a full-size rate out is a smoke run."""
    sys.path.insert(0, str(bench_dir()))
    try:
        import suite
    finally:
        sys.path.remove(str(bench_dir()))
    full = suite.full_size("sustained")
    assert (
        suite.reduced("sustained", {"parameters": {**full, "rates": [20.0, *full["rates"]]}}) == []
    )
    assert suite.reduced("sustained", {"parameters": {**full, "rates": [20.0]}}) != []
