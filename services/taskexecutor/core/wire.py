"""The task executor's HTTP wire (docs/opensandbox.md §5, upstream's ``tec/types.go``).

A task comes in as a :class:`TaskSpec` and goes out as a :class:`TaskReport`, both camelCase
JSON. Two types rather than one, because the two directions differ on purpose:

- In, only what the executor acts on is declared: ``name``, ``process`` and
  ``podTemplateSpec``. Everything else is ignored, as Go's decoder ignores unknown fields: the
  controller sends back whatever it last read (``processStatus``, ``podStatus``), upstream's
  client sends ``deletionTimestamp`` (which upstream's handler drops too), and a newer
  controller may send fields this executor does not know (``execMode``, ``env[].valueFrom``).
- Out, ``deletionTimestamp`` is never sent (upstream never sends it either, so a controller
  cannot tell a task being deleted from one that is not, docs/opensandbox.md §5 "API rendering"),
  and the report carries ``lifecycleStatus``: the preStart and postStop hooks' outcomes, which
  upstream's Go types do not have and so ignore.

The process fields are upstream's ``ProcessTask`` (command, args, env, workingDir,
timeoutSeconds) plus ``lifecycle`` with ``preStart`` and ``postStop`` exec hooks, shaped as the
CRD types of :mod:`api.opensandbox` spell them (``api/`` is not imported: it would bring the
whole API package into every sandbox's executor).

Decoding is strict about types (``"timeoutSeconds": "10"`` is refused, with the JSON path in
the message) and about what cannot run: a name that is no safe directory name
(:mod:`.names`), a process with nothing to run, a hook without a command, a hook of a kind
other than ``exec``, and the same name twice in one ``setTasks``. A refused body changes
nothing: :class:`WireError` is raised before any task is looked at.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from services.taskexecutor.core.names import name_problem

__all__ = [
    "EnvVar",
    "ExecAction",
    "HookStatus",
    "Lifecycle",
    "LifecycleHandler",
    "LifecycleStatus",
    "PodCondition",
    "PodStatus",
    "Process",
    "ProcessStatus",
    "Running",
    "TaskReport",
    "TaskSpec",
    "Terminated",
    "Waiting",
    "WireError",
    "decode_task",
    "decode_tasks",
    "encode",
]


class _Wire(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """camelCase on the wire; a field at its default is left out, as Go's ``omitempty``.
    Not frozen: nothing changes a decoded task, and its lists would stay mutable anyway."""


# --- In: what a task asks for --------------------------------------------------------------------


class EnvVar(_Wire):
    """One ``corev1.EnvVar``; only ``value`` is used (``valueFrom`` needs an API server)."""

    name: str
    value: str = ""


class ExecAction(_Wire):
    command: list[str] = msgspec.field(default_factory=list)


class LifecycleHandler(_Wire):
    """One hook: a command run beside the process, with its own time limit."""

    exec: ExecAction | None = None
    timeout_seconds: int = 0
    """The hook is killed after this long; 0 or less: no limit of its own."""


class Lifecycle(_Wire):
    pre_start: LifecycleHandler | None = None
    """Runs before the process; if it fails or times out, the process never starts."""
    post_stop: LifecycleHandler | None = None
    """Runs after every terminal outcome, the stop a deletion or a timeout causes included."""


class Process(_Wire):
    command: list[str] = msgspec.field(default_factory=list)
    args: list[str] = msgspec.field(default_factory=list)
    env: list[EnvVar] = msgspec.field(default_factory=list)
    working_dir: str = ""
    timeout_seconds: int = 0
    """The task is stopped once it has run this long; 0 or less: never."""
    lifecycle: Lifecycle | None = None

    @property
    def argv(self) -> list[str]:
        return [*self.command, *self.args]


class TaskSpec(_Wire):
    """A task as ``POST /tasks`` and ``POST /setTasks`` take it."""

    name: str
    process: Process | None = None
    """None: a container task, which this executor does not run (see :mod:`.state`)."""
    pod_template_spec: dict[str, Any] | None = None
    """Kept and sent back as given; it only makes the report carry a ``podStatus``."""


# --- Out: what a task reports --------------------------------------------------------------------


class Waiting(_Wire):
    reason: str = ""
    message: str = ""


class Running(_Wire):
    started_at: str | None = None


class Terminated(_Wire):
    exit_code: int
    """No default, so it is always sent: a controller reads a missing code as 0, success."""
    signal: int = 0
    reason: str = ""
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None


class ProcessStatus(_Wire):
    """Exactly one of the three, as a container's state."""

    waiting: Waiting | None = None
    running: Running | None = None
    terminated: Terminated | None = None


class HookStatus(_Wire):
    exit_code: int | None = None
    """None while the hook runs."""
    reason: str = ""
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None


class LifecycleStatus(_Wire):
    pre_start: HookStatus | None = None
    post_stop: HookStatus | None = None


class PodCondition(_Wire):
    type: str
    status: str
    last_transition_time: str | None = None


class PodStatus(_Wire):
    """The part of a ``corev1.PodStatus`` a controller reads for a task with a Pod template."""

    phase: str
    reason: str = ""
    message: str = ""
    conditions: list[PodCondition] = msgspec.field(default_factory=list)


class TaskReport(_Wire):
    """A task as every route answers it."""

    name: str
    process: Process | None = None
    pod_template_spec: dict[str, Any] | None = None
    process_status: ProcessStatus | None = None
    pod_status: PodStatus | None = None
    lifecycle_status: LifecycleStatus | None = None


# --- Decoding ------------------------------------------------------------------------------------


class WireError(ValueError):
    """A request body a route does not take; the text says why, for the 400 answer."""


_ONE = msgspec.json.Decoder(TaskSpec)
# ``null`` is Go's encoding of a nil slice: upstream's controller may send it for "no tasks".
_MANY = msgspec.json.Decoder(list[TaskSpec] | None)


def _decoded(decoder: msgspec.json.Decoder[Any], body: bytes, wanted: str) -> Any:
    if not body.strip():
        raise WireError(f"the request has no body; expected {wanted}")
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as error:
        raise WireError(f"expected {wanted}: {error}") from None
    except msgspec.DecodeError as error:
        raise WireError(f"the body is not JSON: {error}") from None


def _hook_problems(handler: LifecycleHandler | None, where: str) -> Iterable[str]:
    if handler is None:
        return
    if handler.exec is None:
        yield f"{where}: has no exec action (the only kind of hook this executor runs)"
    elif not handler.exec.command:
        yield f"{where}.exec.command: must not be empty"


def _problems(task: TaskSpec, where: str) -> Iterable[str]:
    problem = name_problem(task.name)
    if problem is not None:
        yield f"{where}name {task.name!r}: {problem}"
    process = task.process
    if process is None:
        return
    if not process.argv:
        yield f"{where}process.command: nothing to run (command and args are both empty)"
    if process.lifecycle is not None:
        lifecycle = process.lifecycle
        yield from _hook_problems(lifecycle.pre_start, f"{where}process.lifecycle.preStart")
        yield from _hook_problems(lifecycle.post_stop, f"{where}process.lifecycle.postStop")


def _refuse(problems: list[str]) -> None:
    if problems:
        raise WireError("; ".join(problems))


def decode_task(body: bytes) -> TaskSpec:
    """The task of ``POST /tasks``. Raises :class:`WireError`."""
    task: TaskSpec = _decoded(_ONE, body, "a JSON object (a task)")
    _refuse(list(_problems(task, "")))
    return task


def decode_tasks(body: bytes) -> list[TaskSpec]:
    """The desired tasks of ``POST /setTasks``. Raises :class:`WireError`."""
    tasks: list[TaskSpec] | None = _decoded(_MANY, body, "a JSON array of tasks")
    tasks = tasks or []
    problems: list[str] = []
    seen: set[str] = set()
    for index, task in enumerate(tasks):
        problems.extend(_problems(task, f"tasks[{index}]."))
        if task.name in seen:
            problems.append(f"tasks[{index}].name {task.name!r}: given twice")
        seen.add(task.name)
    _refuse(problems)
    return tasks


def encode(value: Any) -> bytes:
    return msgspec.json.encode(value)
