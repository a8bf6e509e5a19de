"""Beyond upstream, opt-in: a claim's ``env`` delivered to a warm sandbox as a task.

agent-sandbox starts a claim with ``env`` cold (its Pod must be made with the variables), and
so does sandbus by default. A SandboxTemplate whose Pods run OpenSandbox's task executor may
instead name, in the annotation :data:`ANNOTATION_CLAIM_ENV_TASK`, the command its workload is
started with (a JSON array, e.g. ``["/bin/sh", "-c", "exec my-agent"]``). A claim of such a
template with ``env`` (and no ``volumeClaimTemplates``, which still need a new Pod) then adopts
a warm sandbox like any other, and the claim worker starts that command with the claim's
variables through the sandbox's executor, as the task ``<claim>-env``. The claim is Ready
once the executor lists the task; until then its Ready condition is False with the reason
``DeliveringEnv``. The template's ``envVarsInjectionPolicy`` still decides whether a claim may
set variables at all (``Disallowed`` keeps upstream's refusal); a claim that starts cold gets
the variables in its Pod as upstream does, and the task as well, since the workload is the
task's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from api.objects import Json, metadata_of
from services.claim.core.batch.tasks import TaskReport

__all__ = [
    "ANNOTATION_CLAIM_ENV_TASK",
    "env_task",
    "env_task_command",
    "lists_task",
    "sandbox_ip",
]

ANNOTATION_CLAIM_ENV_TASK: Final = "sandbus.io/claim-env-task"


def env_task_command(template: Mapping[str, Any] | None) -> list[str] | None:
    """The command the template starts its workload with through the task executor; None when
    it does not opt in, or its annotation is not a JSON array of strings, or the template does
    not allow claims to set variables."""
    if template is None:
        return None
    text = (metadata_of(template).get("annotations") or {}).get(ANNOTATION_CLAIM_ENV_TASK)
    if not text:
        return None
    policy = (template.get("spec") or {}).get("envVarsInjectionPolicy") or "Disallowed"
    if policy not in ("Allowed", "Overrides"):
        return None
    try:
        command = json.loads(str(text))
    except json.JSONDecodeError:
        return None
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        return None
    return command


def env_task(claim: Mapping[str, Any], command: list[str]) -> Json:
    """The task that starts ``command`` with the claim's variables (their ``containerName`` does
    not apply: the executor starts one process)."""
    env = [
        {"name": str(entry.get("name")), "value": str(entry.get("value") or "")}
        for entry in (claim.get("spec") or {}).get("env") or ()
        if isinstance(entry, Mapping) and entry.get("name")
    ]
    name = str(metadata_of(claim).get("name") or "")
    return {"name": f"{name}-env", "process": {"command": list(command), "env": env}}


def sandbox_ip(sandbox: Mapping[str, Any]) -> str:
    for entry in (sandbox.get("status") or {}).get("podIPs") or ():
        ip = entry.get("ip") if isinstance(entry, Mapping) else entry
        if ip:
            return str(ip)
    return ""


def lists_task(report: TaskReport | None, task: str) -> bool:
    """The executor answered and holds the task (in any state)."""
    return (
        report is not None and report.reachable and any(t.get("name") == task for t in report.tasks)
    )
