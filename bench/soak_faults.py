"""The soak's faults: a random schedule drawn from the seed, each fault injected for a while and
then healed, several at once when the draw says so.

- ``kill``: SIGKILL of one service replica; its supervisor starts it again (a crash, the OOM
  killer, a lost node).
- ``pause``: SIGSTOP of one replica for longer than a lease, then SIGCONT (a stalled process
  whose Lease goes stale while it still holds its sockets).
- ``nats-node``: SIGKILL of one nats-server, started again with its store a few seconds later.
- ``nats-down``: every nats-server killed, then started again (the whole bus down for longer
  than a reconnect).
- ``api-errors``: the services' writes answered 500, 503 or 409 at random (an API server in
  trouble, a racing writer).
- ``api-drops``: the services' writes committed and the connection dropped, or answered 504
  ("it worked but the client saw an error", timeouts).
- ``slow-writes``: every write takes 100 to 400 ms (a slow etcd).
- ``api-pause``: 503 to every request (an API server restarting).
- ``watch-drop``: every watch broken mid-stream (a proxy cutting connections).
- ``watch-expire``: the history compacted and every watch ended with 410 (a watcher that
  resumes too late must relist).

The API faults spare the load's own requests (``LOAD_AGENT``) and the development cluster's
kubelet and garbage collector: they are aimed at what sandbus sends. The NATS faults exclude
each other (two nodes of three down is the whole bus down, which ``nats-down`` is).
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from soak_world import LOAD_AGENT, World

from devtools.cluster import FaultRule

__all__ = ["FAULT_WEIGHTS", "Fault", "Faults"]

FAULT_WEIGHTS = {
    "kill": 6,
    "pause": 2,
    "nats-node": 2,
    "nats-down": 1,
    "api-errors": 2,
    "api-drops": 2,
    "slow-writes": 1,
    "api-pause": 1,
    "watch-drop": 2,
    "watch-expire": 1,
}
_SERVICES_ONLY = rf"^(?!{LOAD_AGENT}|devcluster-)"
"""A User-Agent pattern that matches every request but the load's and the simulated nodes'."""


@dataclass(frozen=True)
class Fault:
    """One fault as it was injected: seconds since the soak began, its kind, its target, and
    for how long it lasted (0 for one that is over at once)."""

    at: float
    kind: str
    target: str
    seconds: float

    def __str__(self) -> str:
        lasting = f" for {self.seconds:.1f} s" if self.seconds else ""
        return f"t={self.at:7.1f} s  {self.kind:<12} {self.target}{lasting}"


@dataclass
class Faults:
    world: World
    rng: random.Random
    began: float = field(default_factory=time.monotonic)
    schedule: list[Fault] = field(default_factory=list)
    injected: collections.Counter[str] = field(default_factory=collections.Counter)
    last_healed: float = 0.0
    """When the last fault was over (monotonic), for the time to converge after it."""
    nats_down_until: float = 0.0
    """Until when (monotonic) the bus is, or was, down in part or whole: replicas may be
    unready then."""
    _healing: set[asyncio.Task[None]] = field(default_factory=set)
    _nats_busy: bool = False

    def _record(self, kind: str, target: str, seconds: float) -> None:
        fault = Fault(round(time.monotonic() - self.began, 1), kind, target, seconds)
        self.schedule.append(fault)
        self.injected[kind] += 1
        print(f"soak: fault {fault}", flush=True)

    def _later(self, seconds: float, heal: Callable[[], Awaitable[None]]) -> None:
        async def healing() -> None:
            try:
                await asyncio.sleep(seconds)
            finally:
                await heal()
                self.last_healed = time.monotonic()

        task = asyncio.create_task(healing())
        self._healing.add(task)
        task.add_done_callback(self._healing.discard)

    # -- each kind ----------------------------------------------------------------------------

    async def kill(self) -> None:
        replica = self.rng.choice([r for r in self.world.services.replicas if r.running])
        self.world.services.kill(replica)
        self._record("kill", replica.name, 0)
        self.last_healed = time.monotonic()

    async def pause(self) -> None:
        candidates = [r for r in self.world.services.replicas if r.running and not r.paused]
        replica = self.rng.choice(candidates)
        seconds = self.rng.uniform(3, 6)
        if not self.world.services.pause(replica):
            return
        self._record("pause", replica.name, seconds)

        async def heal() -> None:
            self.world.services.resume(replica)

        self._later(seconds, heal)

    def _nats_fault(self, kind: str, nodes: list[int], seconds: float) -> None:
        if self._nats_busy:
            return
        self._nats_busy = True
        bus = self.world.bus
        for index in nodes:
            bus.nodes[index].kill()
        self.nats_down_until = time.monotonic() + seconds + 30
        self._record(kind, ",".join(str(bus.nodes[i].server_name) for i in nodes), seconds)

        async def heal() -> None:
            try:
                for index in nodes:
                    await asyncio.to_thread(bus.nodes[index].start)
            finally:
                self._nats_busy = False
                self.nats_down_until = time.monotonic() + 30

        self._later(seconds, heal)

    async def nats_node(self) -> None:
        self._nats_fault("nats-node", [self.rng.randrange(3)], self.rng.uniform(2, 6))

    async def nats_down(self) -> None:
        self._nats_fault("nats-down", [0, 1, 2], self.rng.uniform(5, 10))

    def _rules(self, kind: str, target: str, rules: list[FaultRule], seconds: float) -> None:
        faults = self.world.cluster.faults
        added = [faults.add(rule) for rule in rules]
        self._record(kind, target, seconds)

        async def heal() -> None:
            for rule in added:
                faults.remove(rule.id)

        self._later(seconds, heal)

    async def api_errors(self) -> None:
        probability = self.rng.uniform(0.1, 0.4)
        rules = [
            FaultRule(
                "error",
                verb="write",
                code=code,
                probability=probability / 3,
                user_agent=_SERVICES_ONLY,
            )
            for code in (500, 503, 409)
        ]
        self._rules("api-errors", f"p={probability:.2f}", rules, self.rng.uniform(2, 5))

    async def api_drops(self) -> None:
        probability = self.rng.uniform(0.1, 0.3)
        rules = [
            FaultRule(
                "drop_after_commit",
                verb="write",
                probability=probability / 2,
                user_agent=_SERVICES_ONLY,
            ),
            FaultRule(
                "error",
                verb="write",
                code=504,
                probability=probability / 2,
                user_agent=_SERVICES_ONLY,
            ),
        ]
        self._rules("api-drops", f"p={probability:.2f}", rules, self.rng.uniform(2, 5))

    async def slow_writes(self) -> None:
        latency = self.world.cluster.latency
        before = latency.write
        latency.write = (0.1, 0.4)
        seconds = self.rng.uniform(3, 6)
        self._record("slow-writes", "100-400 ms", seconds)

        async def heal() -> None:
            latency.write = before

        self._later(seconds, heal)

    async def api_pause(self) -> None:
        faults = self.world.cluster.faults
        faults.pause()
        seconds = self.rng.uniform(1, 3)
        self._record("api-pause", "every request: 503", seconds)

        async def heal() -> None:
            faults.resume()

        self._later(seconds, heal)

    async def watch_drop(self) -> None:
        broken = self.world.cluster.faults.break_watches("abort")
        self._record("watch-drop", f"{broken} watches", 0)
        self.last_healed = time.monotonic()

    async def watch_expire(self) -> None:
        faults = self.world.cluster.faults
        faults.compact()
        broken = faults.break_watches("expire")
        self._record("watch-expire", f"{broken} watches, history compacted", 0)
        self.last_healed = time.monotonic()

    # -- the schedule -------------------------------------------------------------------------

    async def run(self, mean_interval: float, stop: asyncio.Event) -> None:
        """Faults until ``stop`` is set, at random moments ``mean_interval`` seconds apart on
        average, each of a kind drawn by ``FAULT_WEIGHTS``."""
        actions = {
            "kill": self.kill,
            "pause": self.pause,
            "nats-node": self.nats_node,
            "nats-down": self.nats_down,
            "api-errors": self.api_errors,
            "api-drops": self.api_drops,
            "slow-writes": self.slow_writes,
            "api-pause": self.api_pause,
            "watch-drop": self.watch_drop,
            "watch-expire": self.watch_expire,
        }
        kinds = list(FAULT_WEIGHTS)
        weights = [FAULT_WEIGHTS[k] for k in kinds]
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.rng.expovariate(1 / mean_interval))
                return
            except TimeoutError:
                pass
            await actions[self.rng.choices(kinds, weights)[0]]()

    async def heal_all(self) -> None:
        """Wait for every fault under way to be healed."""
        while self._healing:
            await asyncio.gather(*list(self._healing), return_exceptions=True)
