"""A chaos soak: mixed load, random faults, and one invariant checker, for as long as you like.

Run on purpose (the test suite runs a short form, tests/e2e/test_soak.py)::

    .venv/bin/python bench/soak.py [--duration 1800] [--seed N] [--rate 4] [--fault-every 6]

What runs (bench/soak_world.py): a three-node NATS cluster with every stream on three replicas,
the development cluster in this process, and the watcher, sandbox, pool, claim and snapshot services
as processes of their own, two replicas of each, started again whenever they exit. The load
(bench/soak_load.py) does what users do, ``--rate`` operations a second; the faults
(bench/soak_faults.py) come about every ``--fault-every`` seconds, drawn from the seed, which
is printed first so that a failing run can be replayed with ``--seed``.

The checker (bench/soak_check.py) runs all along and at the end:

- *all along*, every few seconds: what holds at every moment (no Sandbox bound to two claims,
  no claim holding two, no Pod allocated to two BatchSandboxes), and that every replica that is
  not paused, starting or cut off from the bus answers ``/readyz``;
- *at the end*, once the faults are healed and the load has stopped: the system converges
  within ``--converge-within`` seconds to a state where every claim is Ready (or says why not),
  every warm queue holds exactly its pool's adoptable members, every OpenSandbox Pool's status
  matches its ledger and its Pods, every object the load kept is there and every one it deleted
  is gone, and the event log holds every committed change once, in commit order per object.

A violation prints the seed, the fault schedule so far and the offending objects' ``sandbus
explain`` timelines; the exit status is 1. The last lines are the report: operations by kind,
faults by kind, the checks made, the violations, and the seconds from the last fault to
convergence.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import nats
import nats.errors
import soak_check
from nats.js import JetStreamContext
from soak_check import Violation
from soak_faults import Fault, Faults
from soak_load import NS, Load
from soak_world import World, world

from events.envelope import ObjectKey
from services.runtime.kube import KubeError

__all__ = ["Report", "Settings", "main", "soak"]

CHECK_EVERY = 3.0
"""Seconds between two checks of what must hold at every moment."""
READY_GRACE = 30.0
"""Seconds a replica may be unready after it started, or after the bus was down."""
KINDS = ("SandboxClaim", "Sandbox", "BatchSandbox")
"""The kinds the load makes, whose objects it expects kept or gone."""
READ_ERRORS = (nats.errors.Error, KubeError, TimeoutError)
"""What a check's reads may meet while faults are under way: it reads again later."""
LOGGED_KINDS = ("SandboxClaim", "Sandbox", "SandboxWarmPool", "Pool", "BatchSandbox")
"""The kinds whose every committed change the event log must hold (a Pod's changes are too many
to hold a run's worth of in memory in a long soak, and the other kinds are their owners')."""


@dataclass(frozen=True)
class Settings:
    duration: float = 1800.0
    seed: int = 0
    rate: float = 4.0
    fault_every: float = 6.0
    converge_within: float = 120.0
    directory: Path | None = None


@dataclass
class Report:
    seed: int
    operations: collections.Counter[str] = field(default_factory=collections.Counter)
    refused: collections.Counter[str] = field(default_factory=collections.Counter)
    faults: collections.Counter[str] = field(default_factory=collections.Counter)
    schedule: list[Fault] = field(default_factory=list)
    checks: collections.Counter[str] = field(default_factory=collections.Counter)
    violations: list[Violation] = field(default_factory=list)
    converged_after: float | None = None
    collapsed: int = 0
    restarts: dict[str, int] = field(default_factory=dict)

    def text(self) -> str:
        lines = [f"soak seed {self.seed}"]
        lines.append("operations: " + _counts(self.operations))
        if self.refused:
            lines.append("refused by the API: " + _counts(self.refused))
        lines.append("faults: " + _counts(self.faults))
        lines.append(
            "replica starts after the first: " + _counts(collections.Counter(self.restarts))
        )
        lines.append("checks: " + _counts(self.checks))
        converged = f"{self.converged_after:.1f} s" if self.converged_after is not None else "never"
        lines.append(f"converged after the last fault: {converged}")
        lines.append(f"commits a relist collapsed (allowed): {self.collapsed}")
        lines.append(f"violations: {len(self.violations)}")
        lines += [f"  {v.invariant}: {v.detail} ({', '.join(v.objects)})" for v in self.violations]
        return "\n".join(lines)


def _counts(counter: collections.Counter[str]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(counter.items())) or "none"


class Checker:
    """The checks, and what they found (each violation once)."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self._seen: set[tuple[str, str, tuple[str, ...]]] = set()

    def found(self, violations: Sequence[Violation]) -> None:
        for violation in violations:
            mark = (violation.invariant, violation.detail, violation.objects)
            if mark not in self._seen:
                self._seen.add(mark)
                self.report.violations.append(violation)
                print(f"soak: VIOLATION {violation.invariant}: {violation.detail}", flush=True)


async def _readiness(
    world: World, faults: Faults, http: aiohttp.ClientSession, unready: dict[str, int]
) -> list[Violation]:
    """Every replica that is running, not paused, started more than ``READY_GRACE`` ago and not
    cut off from the bus lately answers ``/readyz``; three misses in a row are a violation."""
    now = time.monotonic()
    found = []
    for replica in world.services.replicas:
        excused = (
            not replica.running
            or replica.paused
            or now - replica.started_at < READY_GRACE
            or now < faults.nats_down_until
        )
        if excused or await world.services.ready(http, replica):
            unready.pop(replica.name, None)
            continue
        unready[replica.name] = unready.get(replica.name, 0) + 1
        if unready[replica.name] >= 3:
            found.append(
                Violation(
                    "replica-alive-but-unready",
                    (),
                    f"{replica.name} runs but has not answered /readyz 200 for "
                    f"{unready[replica.name]} checks in a row",
                )
            )
    return found


async def _watch(
    world: World, faults: Faults, js: JetStreamContext, checker: Checker, stop: asyncio.Event
) -> None:
    """What must hold at every moment, every ``CHECK_EVERY`` seconds until ``stop``."""
    unready: dict[str, int] = {}
    async with aiohttp.ClientSession() as http:
        while not stop.is_set():
            try:
                snapshot = await soak_check.take_snapshot(world.kube, js, [NS])
            except READ_ERRORS:
                # The bus is down, or its stream's leader moving: the next round reads again.
                checker.report.checks["always: unread, the bus did not answer"] += 1
            else:
                checker.found(soak_check.always(snapshot))
                checker.report.checks["always"] += 1
            checker.found(await _readiness(world, faults, http, unready))
            checker.report.checks["readyz"] += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CHECK_EVERY)


async def _quiet_violations(
    world: World, load: Load, js: JetStreamContext, commits: soak_check.CommitLog
) -> tuple[list[Violation], int]:
    """Everything the end must satisfy, as it stands now; and the commits a relist collapsed."""
    snapshot = await soak_check.take_snapshot(world.kube, js, [NS])
    found = soak_check.always(snapshot) + soak_check.when_quiet(snapshot)
    present = {
        ObjectKey(kind, NS, obj["metadata"]["name"])
        for kind, objects in (
            ("SandboxClaim", snapshot.claims),
            ("Sandbox", snapshot.sandboxes),
            ("BatchSandbox", snapshot.batch_sandboxes),
        )
        for obj in objects
    }
    found += [
        Violation("load-unkept", (f"{u.key.kind}/{u.key.namespace}/{u.key.name}",), u.detail)
        for u in load.unkept(present)
    ]
    found += soak_check.sandboxes_taken_from_claims(commits.commits, load.expiring)
    if found:
        return found, 0  # the log is read (all of it, decoded) once the rest holds
    logged = await soak_check.logged_changes(js)
    wanted = set(LOGGED_KINDS)
    log_found, collapsed = soak_check.log_violations(
        [c for c in commits.commits if c.kind in wanted],
        [e for e in logged if e.kind in wanted],
    )
    return log_found, collapsed


async def _converge(
    world: World, load: Load, js: JetStreamContext, commits: soak_check.CommitLog, within: float
) -> tuple[list[Violation], float | None, int]:
    """Check until nothing is found or ``within`` seconds passed: what was found last, the
    seconds it took (None: never), and the commits a relist collapsed."""
    started = time.monotonic()
    found: list[Violation] = []
    collapsed = 0
    while True:
        try:
            found, collapsed = await _quiet_violations(world, load, js, commits)
        except READ_ERRORS as error:
            found = [Violation("unread", (), f"the checks could not read the state: {error!r}")]
        waited = time.monotonic() - started
        if not found:
            return [], waited, collapsed
        if waited > within:
            return found, None, collapsed
        await asyncio.sleep(2.0)


def _explain(nats_url: str, objects: Sequence[str], limit: int = 5) -> str:
    """``sandbus explain`` of each object (the first ``limit``)."""
    out = []
    for name in list(dict.fromkeys(objects))[:limit]:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "services.cli", "explain", name, "--nats", nats_url],
                capture_output=True,
                text=True,
                timeout=60,
            )
            out.append(f"--- sandbus explain {name}\n{done.stdout}{done.stderr}")
        except subprocess.TimeoutExpired:
            out.append(f"--- sandbus explain {name}: no answer within 60 s")
    return "\n".join(out)


async def _quiet(error: Exception) -> None:
    pass


async def _wait_ready(world: World, within: float) -> None:
    async with aiohttp.ClientSession() as http:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            states = [await world.services.ready(http, r) for r in world.services.replicas]
            if all(states):
                return
            await asyncio.sleep(0.5)
    raise RuntimeError(f"the services were not all ready within {within} s (logs: {world.logs})")


async def soak(settings: Settings) -> Report:
    report = Report(settings.seed)
    print(f"soak: seed {settings.seed} (again: --seed {settings.seed})", flush=True)
    directory = settings.directory or Path(tempfile.mkdtemp(prefix="sandbus-soak-"))
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        # An earlier run's bus would meet a new, empty development cluster.
        raise SystemExit(f"soak: {directory} is not empty; give a new directory for each run")
    async with world(directory, seed=settings.seed) as w:
        commits = soak_check.CommitLog()
        w.cluster.store.subscribe(None, commits.sink)
        await w.services.start()
        await _wait_ready(w, 90)
        connection = await nats.connect(
            w.bus.url.split(","),
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            error_cb=_quiet,  # the faults take NATS away on purpose; the checks read again
        )
        js = connection.jetstream()
        try:
            load = Load(w.kube, random.Random(settings.seed))
            await load.setup()
            faults = Faults(w, random.Random(settings.seed + 1))
            checker = Checker(report)
            stop = asyncio.Event()
            tasks = [
                asyncio.create_task(load.run(settings.rate, stop)),
                asyncio.create_task(faults.run(settings.fault_every, stop)),
                asyncio.create_task(_watch(w, faults, js, checker, stop)),
            ]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), settings.duration)
            stop.set()
            await asyncio.gather(*tasks)
            await faults.heal_all()
            print("soak: load stopped, faults healed; waiting for convergence", flush=True)
            found, waited, report.collapsed = await _converge(
                w, load, js, commits, settings.converge_within
            )
            if waited is not None:
                healed_ago = time.monotonic() - (faults.last_healed or time.monotonic())
                report.converged_after = healed_ago
            checker.found(found)
            report.checks["at the end"] += 1
            report.operations, report.refused = load.done, load.refused
            report.faults, report.schedule = faults.injected, faults.schedule
            report.restarts = {r.name: r.starts - 1 for r in w.services.replicas}
            if report.violations:
                print("soak: the fault schedule so far:", flush=True)
                print("\n".join(f"  {fault}" for fault in report.schedule), flush=True)
                offending = [name for v in report.violations for name in v.objects]
                print(await asyncio.to_thread(_explain, w.bus.url, offending), flush=True)
                print(f"soak: logs in {w.logs}", flush=True)
        finally:
            await connection.close()
    return report


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1800.0, help="seconds (default 1800)")
    parser.add_argument("--seed", type=int, help="of the load and the faults (default: random)")
    parser.add_argument("--rate", type=float, default=4.0, help="operations a second (4)")
    parser.add_argument(
        "--fault-every", type=float, default=6.0, help="mean seconds between faults (6)"
    )
    parser.add_argument(
        "--converge-within", type=float, default=120.0, help="seconds after the faults (120)"
    )
    parser.add_argument(
        "--directory", type=Path, help="an empty one for the logs and stores (default: temp)"
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    return Settings(
        duration=args.duration,
        seed=seed,
        rate=args.rate,
        fault_every=args.fault_every,
        converge_within=args.converge_within,
        directory=args.directory,
    )


def main(argv: Sequence[str] | None = None) -> int:
    report = asyncio.run(soak(parse_args(argv)))
    print(report.text(), flush=True)
    return 1 if report.violations else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
