"""Where each process's CPU goes, from the samples of ``bench/cpu_sampler``: per process, by
the package that was running, and sandbus's own functions by the CPU spent inside them.

A benchmark that profiles (``bench/claim_cost.py --profile``) starts its processes with
:func:`sampling_environment`, calls :func:`reset` where the measured stretch starts and
:func:`collect` where it ends. The samples stay in the directory as ``<pid>.folded`` (the
format flame-graph tools read), and the tables can be printed again from them::

    .venv/bin/python bench/cpu_profile.py DIRECTORY [--per 200] [--top 12]

Each process's samples are scaled to the CPU time it spent over the stretch (its
``process_time``), so a column adds up to the process's CPU; ``--per`` divides by the number of
claims (or whatever the benchmark counted) to give milliseconds per claim.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import signal
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

SAMPLER = Path(__file__).resolve().parent / "cpu_sampler"

PACKAGES = (
    # (what the innermost frame's path starts with, the name in the table), first match wins
    ("services/runtime/", "runtime"),
    ("services/domain/", "domain"),
    ("services/cli/", "cli"),
    ("services/", "worker"),
    ("api/", "api, events"),
    ("events/", "api, events"),
    ("devtools/", "devtools"),
    ("nats/", "nats-py"),
    ("kubernetes_asyncio/", "kubernetes_asyncio"),
    ("aiohttp/", "aiohttp"),
    ("yarl/", "aiohttp"),
    ("multidict/", "aiohttp"),
    ("asyncio/", "asyncio"),
    ("selectors.py", "asyncio"),
    ("opentelemetry/", "opentelemetry"),
)
_LOOP = "asyncio/runners.py:run"
OWN = ("services/", "api/", "events/", "devtools/")
"""sandbus's own code, whose functions the second table lists."""


def sampling_environment(directory: Path) -> dict[str, str]:
    """The environment that makes a Python process started with it sample itself into
    ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = os.environ.get("PYTHONPATH", "")
    return {
        "PYTHONPATH": f"{SAMPLER}{os.pathsep}{path}" if path else str(SAMPLER),
        "SANDBUS_CPU_SAMPLES": str(directory),
    }


def reset(pids: Iterable[int]) -> None:
    """Forget what these processes sampled so far: the measured stretch starts now."""
    for pid in pids:
        os.kill(pid, signal.SIGUSR1)


@dataclasses.dataclass
class Profile:
    cpu_seconds: float
    gc_seconds: float
    command: str
    stacks: collections.Counter[tuple[str, ...]]

    @classmethod
    def read(cls, path: Path) -> Profile:
        header, *lines = path.read_text().splitlines()
        fields = dict(item.split("=", 1) for item in header[2:].split(" argv=")[0].split())
        stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
        for line in lines:
            stack, _, count = line.rpartition(" ")
            stacks[tuple(stack.split(";"))] += int(count)
        return cls(
            float(fields["cpu_s"]), float(fields["gc_s"]), header.split(" argv=", 1)[1], stacks
        )

    @property
    def name(self) -> str:
        """``devcluster``, ``watcher``... from the command line."""
        words = self.command.split()
        if "run" in words[:-1]:
            return words[words.index("run") + 1]
        return next((w for w in words if not w.startswith("-") and "/" not in w), self.command)

    def seconds_per_sample(self) -> float:
        return self.cpu_seconds / max(1, sum(self.stacks.values()))

    def by_package(self) -> dict[str, float]:
        """CPU seconds by the package of the innermost frame."""
        spent: collections.Counter[str] = collections.Counter()
        for stack, count in self.stacks.items():
            spent[package_of(stack[-1])] += count
        scale = self.seconds_per_sample()
        return {name: count * scale for name, count in spent.items()}

    def by_task(self) -> list[tuple[str, float]]:
        """CPU seconds by the task's coroutine and what it was in, largest first: the frames
        below ``asyncio.run`` (a task's step starts from C, so its outermost Python frame is the
        coroutine); ``(event loop)`` is the loop's own scheduling and polling."""
        spent: collections.Counter[str] = collections.Counter()
        for stack, count in self.stacks.items():
            start = stack.index(_LOOP) + 1 if _LOOP in stack else 0
            spent[" > ".join(stack[start : start + 2]) or "(event loop)"] += count
        scale = self.seconds_per_sample()
        return [(task, count * scale) for task, count in spent.most_common()]

    def own_functions(self) -> list[tuple[str, float, float]]:
        """sandbus's functions by CPU seconds spent inside them (and in what they called),
        largest first: ``(function, inclusive, self)``."""
        inclusive: collections.Counter[str] = collections.Counter()
        own: collections.Counter[str] = collections.Counter()
        for stack, count in self.stacks.items():
            for frame in set(stack):
                if frame.startswith(OWN):
                    inclusive[frame] += count
            if stack[-1].startswith(OWN):
                own[stack[-1]] += count
        scale = self.seconds_per_sample()
        return [
            (frame, count * scale, own[frame] * scale) for frame, count in inclusive.most_common()
        ]


def package_of(frame: str) -> str:
    for prefix, name in PACKAGES:
        if frame.startswith(prefix):
            return name
    return "other"


def collect(pids: Mapping[str, int], directory: Path, limit: float = 10.0) -> dict[str, Profile]:
    """Ask each process for its samples since :func:`reset` and read them, by name."""
    asked = time.time()
    for pid in pids.values():
        os.kill(pid, signal.SIGUSR2)
    profiles = {}
    for name, pid in pids.items():
        path = directory / f"{pid}.folded"
        while not (path.exists() and path.stat().st_mtime >= asked - 1):
            if time.time() - asked > limit:
                raise TimeoutError(f"{name} (pid {pid}) wrote no samples to {path}")
            time.sleep(0.05)
        profiles[name] = Profile.read(path)
    return profiles


def report(profiles: Mapping[str, Profile], per: int, top: int = 12) -> str:
    """Markdown tables of milliseconds per ``per``: by package, then per process by task and
    sandbus's own functions."""
    unit = 1000.0 / per
    packages = sorted(
        {name for p in profiles.values() for name in p.by_package()},
        key=lambda name: -sum(p.by_package().get(name, 0.0) for p in profiles.values()),
    )
    lines = [
        "CPU ms by the package running (the innermost frame; C code counts as its caller), and of "
        "it the cyclic collector's",
        "",
        f"| process | total | {' | '.join(packages)} | of it: collector |",
        f"|---|---:|{'---:|' * len(packages)}---:|",
    ]
    for name, profile in profiles.items():
        spent = profile.by_package()
        cells = " | ".join(f"{spent.get(package, 0.0) * unit:.2f}" for package in packages)
        lines.append(
            f"| {name} | {profile.cpu_seconds * unit:.2f} | {cells} "
            f"| {profile.gc_seconds * unit:.2f} |"
        )
    for name, profile in profiles.items():
        lines += ["", f"{name}: CPU ms by task (its coroutine, and what it was in)", ""]
        lines += ["| task | ms |", "|---|---:|"]
        for task, seconds in profile.by_task()[:top]:
            lines.append(f"| `{task}` | {seconds * unit:.2f} |")
        lines += [
            "",
            f"{name}: sandbus's functions by CPU ms inside them (inclusive) and in their own code",
            "",
            "| function | inclusive | own |",
            "|---|---:|---:|",
        ]
        for frame, inclusive, own in profile.own_functions()[:top]:
            lines.append(f"| `{frame}` | {inclusive * unit:.2f} | {own * unit:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="where the processes wrote <pid>.folded")
    parser.add_argument("--per", type=int, default=1, help="divide by this count (claims)")
    parser.add_argument("--top", type=int, default=12, help="functions per process")
    args = parser.parse_args()
    profiles = {}
    for path in sorted(args.directory.glob("*.folded")):
        profile = Profile.read(path)
        profiles[profile.name] = profile
    print(report(profiles, args.per, args.top))


if __name__ == "__main__":
    main()
