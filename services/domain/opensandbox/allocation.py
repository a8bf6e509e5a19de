"""OpenSandbox's allocation annotations on a BatchSandbox: the codec the Pool and the
BatchSandbox controllers, and the snapshot worker, read and write them with.

Each of ``alloc-status`` (every Pod ever given to the sandbox), ``alloc-released`` (those whose
release finished) and ``alloc-release`` (those the sandbox asks to give back) holds
``{"pods": [names...]}`` as upstream writes it. An annotation that does not parse is
:class:`MalformedAnnotation`, which each reader handles in its own way, never by stopping.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["MalformedAnnotation", "appended", "parse_pod_list", "pod_list_annotation"]


class MalformedAnnotation(ValueError):
    """An allocation annotation that is not ``{"pods": [names...]}``."""


def parse_pod_list(annotations: Mapping[str, Any], key: str) -> list[str]:
    """The Pod names of one of the allocation annotations (absent: none)."""
    text = annotations.get(key)
    if text is None or text == "":
        return []
    try:
        data = json.loads(str(text))
    except json.JSONDecodeError as error:
        raise MalformedAnnotation(f"annotation {key} is not JSON: {error}") from error
    pods = data.get("pods") if isinstance(data, dict) else None
    if pods is None and isinstance(data, dict):
        return []
    if not isinstance(pods, list) or not all(isinstance(p, str) and p for p in pods):
        raise MalformedAnnotation(f'annotation {key} is not {{"pods": [names...]}}: {text}')
    return list(pods)


def pod_list_annotation(pods: Sequence[str]) -> str:
    """The annotation text upstream writes: ``{"pods":[...]}``, compact."""
    return json.dumps({"pods": list(pods)}, separators=(",", ":"))


def appended(current: Sequence[str], more: Iterable[str]) -> list[str]:
    """``current`` with the names of ``more`` it lacks appended, in order (the annotation lists
    only grow, and keep the index order a sandbox's Pods were given in)."""
    out = list(current)
    seen = set(out)
    for name in more:
        if name not in seen:
            out.append(name)
            seen.add(name)
    return out
