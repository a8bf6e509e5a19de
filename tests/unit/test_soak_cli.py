"""``bench/soak.py``'s command line: what it refuses before it starts anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from services.cli.bench import bench_dir


def test_a_directory_with_an_earlier_run_in_it_is_refused(tmp_path: Path) -> None:
    """An earlier run's bus would meet a new, empty development cluster: every check would
    judge objects that no longer exist."""
    (tmp_path / "nats").mkdir()
    done = subprocess.run(
        [sys.executable, str(bench_dir() / "soak.py"), "--directory", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "is not empty; give a new directory for each run" in done.stderr
    assert "soak: seed" in done.stdout, "the seed is printed first, whatever happens"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nats"], "nothing was started"
