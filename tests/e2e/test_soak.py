"""The chaos soak's short form (bench/soak.py): a minute of mixed load and random faults on a
three-node NATS cluster with two replicas of every service, then every invariant checked.

Each run draws a new seed and prints it; ``SANDBUS_SOAK_SEED=N`` replays one. A failure shows
the seed, the fault schedule, the violations and the offending objects' timelines.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.cli.bench import bench_dir

pytestmark = pytest.mark.slow

DURATION = 60.0


@pytest.fixture
def soak_modules() -> Iterator[None]:
    sys.path.insert(0, str(bench_dir()))
    try:
        yield
    finally:
        sys.path.remove(str(bench_dir()))


@pytest.mark.timeout(420)
async def test_a_minute_of_load_and_faults_breaks_no_invariant(
    tmp_path: Path, soak_modules: None, record_property: Callable[[str, object], None]
) -> None:
    import soak

    seed = int(os.environ.get("SANDBUS_SOAK_SEED") or random.SystemRandom().randrange(2**31))
    settings = soak.Settings(
        duration=DURATION,
        seed=seed,
        rate=4.0,
        fault_every=5.0,
        converge_within=120.0,
        directory=tmp_path,
    )
    report = await soak.soak(settings)
    record_property("summary", report.text())
    assert not report.violations, report.text()
    assert report.converged_after is not None, report.text()
    # The soak did what it is for: load of every kind, and faults of many kinds.
    assert sum(report.operations.values()) >= 0.5 * DURATION * settings.rate, report.text()
    assert {"claim", "release", "sandbox", "batch"} <= set(report.operations), report.text()
    assert sum(report.faults.values()) >= 5, report.text()
    assert report.checks["always"] >= 10, report.text()
