"""Which route a request is for (upstream's ``te/server/router.go``), or why none is.

``POST /setTasks``, ``GET /getTasks``, ``POST /tasks``, ``GET /tasks/{name}``,
``DELETE /tasks/{name}`` and ``GET /health``; the query string is ignored. A known path with
another method is 405 with the methods it takes; an unknown path 404; a ``{name}`` that no task
could have (see :mod:`.names`) 400, since it is the caller's mistake rather than a task that is
gone.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote, urlsplit

from services.taskexecutor.core.names import name_problem

__all__ = ["Resolved", "Route", "resolve"]


class Route(enum.Enum):
    SET_TASKS = "setTasks"
    GET_TASKS = "getTasks"
    CREATE_TASK = "createTask"
    GET_TASK = "getTask"
    DELETE_TASK = "deleteTask"
    HEALTH = "health"


@dataclass(frozen=True)
class Resolved:
    route: Route | None
    name: str = ""
    """The task of ``/tasks/{name}``, decoded."""
    status: int = 200
    """For no route: the answer (400, 404 or 405)."""
    problem: str = ""
    allow: tuple[str, ...] = ()
    """For a 405: the methods the path takes."""


_FIXED: Final = {
    "/setTasks": {"POST": Route.SET_TASKS},
    "/getTasks": {"GET": Route.GET_TASKS},
    "/tasks": {"POST": Route.CREATE_TASK},
    "/health": {"GET": Route.HEALTH},
}
_BY_NAME: Final = {"GET": Route.GET_TASK, "DELETE": Route.DELETE_TASK}
_PREFIX: Final = "/tasks/"


def _by_method(methods: dict[str, Route], method: str, path: str, name: str = "") -> Resolved:
    route = methods.get(method)
    if route is None:
        allowed = tuple(sorted(methods))
        return Resolved(
            None, status=405, problem=f"{path} takes {', '.join(allowed)}", allow=allowed
        )
    return Resolved(route, name=name)


def resolve(method: str, target: str) -> Resolved:
    """The route of ``method`` on ``target`` (the request line's path and query)."""
    path = urlsplit(target).path
    fixed = _FIXED.get(path)
    if fixed is not None:
        return _by_method(fixed, method, path)
    if path.startswith(_PREFIX):
        raw = path[len(_PREFIX) :]
        if raw and "/" not in raw:
            name = unquote(raw)
            problem = name_problem(name)
            if problem is not None:
                return Resolved(None, status=400, problem=f"task name {name!r}: {problem}")
            return _by_method(_BY_NAME, method, path, name)
    return Resolved(None, status=404, problem=f"no route {method} {path}")
