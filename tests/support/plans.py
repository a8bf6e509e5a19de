"""Reading a planner's :class:`~services.runtime.reconcile.actions.Plan` in tests.

A plan's ``actions`` may hold :class:`~services.runtime.reconcile.actions.Together` groups
(actions carried out at the same time), so a test that looks for a Create or a Delete must look
inside them too: :func:`actions_of` does. A test that checks the grouping itself reads
``plan.actions`` directly.

Written out here rather than taken from the code under test, so that a flaw in the runtime's
own flattening cannot hide an action from the tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar, overload

from services.runtime.reconcile.actions import Together

__all__ = ["actions_of"]

A = TypeVar("A")


@overload
def actions_of(plan: Any, kind: None = None) -> list[Any]: ...


@overload
def actions_of(plan: Any, kind: type[A]) -> list[A]: ...


@overload
def actions_of(plan: Any, kind: tuple[type, ...]) -> list[Any]: ...


def actions_of(plan: Any, kind: type | tuple[type, ...] | None = None) -> list[Any]:
    """Every action of ``plan`` (a Plan, or anything else with ``actions``: a part of a plan
    such as a Pod's or a Service's; or a sequence of actions) in order, the members of each
    :class:`Together` group in its place (the group itself left out); with ``kind`` only the
    actions of that type (or types)."""
    found: list[Any] = []
    actions: Iterable[Any] = getattr(plan, "actions", plan)
    for action in actions:
        if isinstance(action, Together):
            found.extend(actions_of(action.actions, kind))
        elif kind is None or isinstance(action, kind):
            found.append(action)
    return found
