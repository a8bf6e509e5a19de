"""The claim worker's side of the task executors: the executor of :class:`SyncTasks`, and the
reports it keeps for the BatchSandbox planner (services/claim/core/batch/tasks.py).

A :class:`TaskReports` is shared by the worker's BatchSandbox reconciler, which reads the
latest report of each Pod of a sandbox, and by the executor of ``SyncTasks``, which talks to
one Pod's executor (``POST /setTasks`` with the desired tasks, or ``GET /getTasks``; a session
per call, so nothing is left open when the worker stops) within ``timeout`` and keeps the
answer, a refusal or the silence as that Pod's report. An answer that
differs from the last one ends the plan as stale, so the sandbox is planned again at once on
what it learned; the same answer does not, and the planner looks again after its interval.

The reports live in memory: they are what the executors say now, and a restarted worker asks
again. What must survive a restart (which Pod runs which task, the results) is the sandbox's
memo, on the bus.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import aiohttp

from api.objects import Json
from events.envelope import ObjectKey
from services.claim.core.batch.tasks import EXECUTOR_PORT, SyncTasks, TaskReport
from services.runtime.worker_api import Executed, ExecutionContext

__all__ = ["TaskReports"]


class TaskReports:
    """What each Pod's task executor answered last, by BatchSandbox and Pod."""

    def __init__(self, *, port: int = EXECUTOR_PORT, timeout: float = 3.0) -> None:
        self.port = port
        self.timeout = timeout
        self._reports: dict[ObjectKey, dict[str, TaskReport]] = {}

    def of(self, key: ObjectKey) -> dict[str, TaskReport]:
        return dict(self._reports.get(key, {}))

    def forget(self, key: ObjectKey) -> None:
        self._reports.pop(key, None)

    async def _call(self, action: SyncTasks) -> TaskReport:
        url = f"http://{action.ip}:{self.port}"
        now = datetime.now(UTC)
        try:
            async with asyncio.timeout(self.timeout), aiohttp.ClientSession() as session:
                if action.desired is None:
                    request = session.get(f"{url}/getTasks")
                else:
                    request = session.post(f"{url}/setTasks", json=list(action.desired))
                async with request as response:
                    text = await response.text()
                    if response.status >= 300:
                        return TaskReport(
                            pod=action.pod,
                            ip=action.ip,
                            at=now,
                            reachable=False,
                            error=f"the task executor answered {response.status}: {text[:200]}",
                        )
                    body: Any = json.loads(text) if text.strip() else []
        except (aiohttp.ClientError, OSError, TimeoutError, json.JSONDecodeError) as error:
            return TaskReport(
                pod=action.pod,
                ip=action.ip,
                at=now,
                reachable=False,
                error=f"the task executor at {action.ip}:{self.port} did not answer: {error!r}",
            )
        listed = body if isinstance(body, list) else []
        tasks: tuple[Json, ...] = tuple(t for t in listed if isinstance(t, dict))
        return TaskReport(pod=action.pod, ip=action.ip, at=now, reachable=True, tasks=tasks)

    async def execute(self, action: SyncTasks, context: ExecutionContext) -> Executed:
        report = await self._call(action)
        reports = self._reports.setdefault(action.target, {})
        previous = reports.get(action.pod)
        reports[action.pod] = report
        changed = (
            previous is None
            or previous.reachable != report.reachable
            or _states(previous) != _states(report)
        )
        said = "no answer" if not report.reachable else f"{len(report.tasks)} task(s)"
        return Executed(note=f"{action.pod}: {said}", stale=changed)


def _states(report: TaskReport) -> list[tuple[Any, Any]]:
    """What a report says that the planner reads: each task's name and status."""
    return [(t.get("name"), t.get("processStatus")) for t in report.tasks]
