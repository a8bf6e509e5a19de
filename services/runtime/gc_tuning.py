"""How a long-running sandbus process sets up Python's cyclic garbage collector.

A service is a loop of small, short-lived JSON trees (an event decoded, a pass's inputs, a
request and its answer). Under CPython's default young-generation threshold of 700 allocations
a collection runs in the middle of most of them, and what it finds alive moves to an older
generation that is scanned again later: measured in the claim benchmark, 6-8 % of every
service's CPU and of the development cluster's went to the collector. So, once a process has
imported what it serves with:

- what the imports made (modules, classes, functions: tens of thousands of objects that live
  as long as the process) is frozen out of the collector's generations, so no collection walks
  it again;
- the young generation holds ``YOUNG_THRESHOLD`` allocations, so most trees are freed by their
  reference counts before a collection sees them. The cost is memory: at most that many
  objects of cyclic garbage (a few MiB) wait for the next collection; the memory benchmark
  showed no change in any service's resident size.

The older generations keep CPython's thresholds.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["tune_for_serving"]

YOUNG_THRESHOLD: Final = 20_000


def tune_for_serving() -> None:
    """Freeze what exists now and raise the young generation's threshold (see the module doc).
    Call it once the process has imported what it serves, before it serves."""
    # No collection first: it would cost a start tens of milliseconds to free the little
    # garbage the imports left, which frozen stays allocated and harmless.
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
