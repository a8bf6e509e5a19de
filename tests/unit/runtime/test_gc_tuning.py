"""Every long-running process sets up the garbage collector for serving
(services/runtime/gc_tuning.py)."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from services.runtime import runner
from services.runtime.gc_tuning import YOUNG_THRESHOLD
from services.runtime.settings import Settings

TUNED = textwrap.dedent(
    """
    import gc, weakref
    from services.runtime.gc_tuning import tune_for_serving

    _, older, oldest = gc.get_threshold()
    tune_for_serving()
    assert gc.get_freeze_count() > 0, "what the imports made is frozen"
    assert gc.get_threshold() == (YOUNG, older, oldest), gc.get_threshold()

    class Node:
        pass

    # A cycle no reference count frees: the collector still finds it, after YOUNG allocations.
    first, second = Node(), Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    del first, second
    kept = [[] for _ in range(YOUNG // 2)]
    assert gone() is not None, "collected long before the threshold"
    kept += [[] for _ in range(YOUNG)]
    assert gone() is None, "a cycle outlived the young generation's threshold"
    print("ok")
    """
).replace("YOUNG", str(YOUNG_THRESHOLD))


def test_a_tuned_process_freezes_its_imports_and_collects_cycles_less_often() -> None:
    done = subprocess.run(
        [sys.executable, "-c", TUNED], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.fixture
def restored_collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_sandbus_run_tunes_the_collector_before_it_serves(
    monkeypatch: pytest.MonkeyPatch, restored_collector: None
) -> None:
    seen: list[tuple[int, int]] = []

    async def serve(settings: Settings) -> None:
        seen.append((gc.get_threshold()[0], gc.get_freeze_count()))

    monkeypatch.setenv(runner.EVENT_LOOP_ENV, "asyncio")
    assert runner.run_service(serve, Settings()) == 1  # it returned without being asked to
    assert seen and seen[0][0] == YOUNG_THRESHOLD and seen[0][1] > 0
