"""A CPU-time stack sampler that any Python process of a benchmark loads at start.

A benchmark puts this folder first on ``PYTHONPATH`` and sets ``SANDBUS_CPU_SAMPLES`` to a
directory; Python imports ``sitecustomize`` at start, so every process it starts samples itself
without a line of sandbus changing. (``bench/cpu_profile.py`` reads what they write.)

Why not py-spy or a wall-clock profiler: on this machine the two cores are saturated under
load, and a process that is runnable but waiting for a core is not spending CPU. ``ITIMER_PROF``
counts the process's own CPU time (user and system) and raises ``SIGPROF`` each
``SANDBUS_CPU_SAMPLE_US`` microseconds of it (default 1,000; the kernel checks CPU timers at its
clock tick, so on a 250 Hz kernel a sample comes every 4 ms at best), so each sample stands for
the same CPU time wherever it lands; the reader scales the samples to the CPU time measured.
The handler records the main thread's Python stack; time spent in C (msgspec, ssl, the
collector) lands on the Python frame that called it. The cyclic collector's own CPU time is
measured beside, through ``gc.callbacks``.

Signals: ``SIGUSR1`` forgets what was sampled (the start of a measured stretch), ``SIGUSR2``
writes ``<SANDBUS_CPU_SAMPLES>/<pid>.folded``: one line per distinct stack, frames outermost
first, ``file:function`` separated by ``;``, then the count (the format flame-graph tools
read), and a first line ``# samples_us=<interval> cpu_s=<CPU since the reset> gc_s=<collector
CPU since the reset> argv=<command line>``.
"""

from __future__ import annotations

import atexit
import collections
import gc
import os
import signal
import sys
import time
from types import FrameType


def _frame_name(frame: FrameType, roots: tuple[str, ...]) -> str:
    """``module/path.py:function``, the path relative to the import root it came from (the
    standard library, site-packages, the checkout)."""
    code = frame.f_code
    filename = code.co_filename
    for root in roots:
        if filename.startswith(root):
            filename = filename[len(root) :]
            break
    return f"{filename}:{code.co_name}"


class _Sampler:
    def __init__(self, directory: str, interval_us: int) -> None:
        self.directory = directory
        self.interval_us = interval_us
        self.stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
        self.names: dict[object, str] = {}
        # The longest first, so that site-packages wins over the standard library around it.
        roots = {os.path.join(path, "") for path in sys.path if path} | {os.getcwd() + "/"}
        self.roots = tuple(sorted(roots, key=len, reverse=True))
        self.gc_seconds = 0.0
        self._gc_started = 0.0
        self._cpu_at_reset = time.process_time()

    def sample(self, _signum: int, frame: FrameType | None) -> None:
        stack = []
        while frame is not None:
            code = frame.f_code
            name = self.names.get(code)
            if name is None:
                name = self.names[code] = _frame_name(frame, self.roots)
            stack.append(name)
            frame = frame.f_back
        stack.reverse()
        self.stacks[tuple(stack)] += 1

    def on_gc(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.thread_time()
        else:
            self.gc_seconds += time.thread_time() - self._gc_started

    def reset(self, _signum: int, _frame: FrameType | None) -> None:
        self.stacks.clear()
        self.gc_seconds = 0.0
        self._cpu_at_reset = time.process_time()

    def write(self, _signum: int, _frame: FrameType | None) -> None:
        path = os.path.join(self.directory, f"{os.getpid()}.folded")
        cpu = time.process_time() - self._cpu_at_reset
        argv = " ".join(sys.argv).replace("\n", " ")
        lines = [
            f"# samples_us={self.interval_us} cpu_s={cpu:.6f} gc_s={self.gc_seconds:.6f} "
            f"argv={argv}"
        ]
        # A copy in one C call: a sample may land (and add a stack) while the lines are built.
        stacks = dict(self.stacks)
        lines.extend(f"{';'.join(stack)} {count}" for stack, count in stacks.items())
        with open(path + ".tmp", "w") as out:
            out.write("\n".join(lines) + "\n")
        os.replace(path + ".tmp", path)


def _install() -> None:
    directory = os.environ.get("SANDBUS_CPU_SAMPLES")
    if not directory:
        return
    interval_us = int(os.environ.get("SANDBUS_CPU_SAMPLE_US", "1000"))
    sampler = _Sampler(directory, interval_us)
    signal.signal(signal.SIGPROF, sampler.sample)
    signal.signal(signal.SIGUSR1, sampler.reset)
    signal.signal(signal.SIGUSR2, sampler.write)
    gc.callbacks.append(sampler.on_gc)
    signal.setitimer(signal.ITIMER_PROF, interval_us / 1e6, interval_us / 1e6)
    # Stopped before the interpreter puts SIGPROF's default action (terminate) back.
    atexit.register(signal.setitimer, signal.ITIMER_PROF, 0)


_install()
