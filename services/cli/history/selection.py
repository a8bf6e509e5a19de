"""What part of the event log a history command reads: kinds, object references, subject filters.

Filtering happens on the server, by subject: the subject scheme of :mod:`events.subjects`
carries kind, namespace and name as tokens, so ``--kind Sandbox --namespace default`` becomes
the consumer filter ``sandbus.events.sandbox.default.*`` and JetStream never sends the rest.
That only works if the kind the user typed is spelled the way the watcher spells it, which is
why a kind is resolved here (``sandboxes``, ``swp`` and ``SANDBOX`` all mean ``Sandbox``) and an
unknown kind is an error naming the known ones rather than a filter that silently matches
nothing.

The known kinds are our seven (from :mod:`api.kinds`) plus the built-in kinds the watcher
also publishes because our workers create them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from api.kinds import ALL_KINDS
from events.envelope import ObjectRef
from events.subjects import decision_filter, event_filter

__all__ = [
    "DEFAULT_NAMESPACE",
    "KNOWN_KINDS",
    "Selection",
    "UnknownKind",
    "parse_object_ref",
    "resolve_kind",
]

DEFAULT_NAMESPACE: Final = "default"

# Built-in kinds our workers create and the watcher follows (by label): name, plural, short names.
_BUILTIN_KINDS: Final[tuple[tuple[str, str, tuple[str, ...]], ...]] = (
    ("Pod", "pods", ("po",)),
    ("Service", "services", ("svc",)),
    ("Job", "jobs", ()),
    ("PersistentVolumeClaim", "persistentvolumeclaims", ("pvc",)),
    ("NetworkPolicy", "networkpolicies", ("netpol",)),
)


def _aliases() -> dict[str, str]:
    aliases: dict[str, str] = {}
    for resource in ALL_KINDS:
        info = resource.KIND
        for alias in (info.kind, info.plural, info.singular, *info.short_names):
            aliases[alias.lower()] = info.kind
    for kind, plural, short_names in _BUILTIN_KINDS:
        for alias in (kind, plural, *short_names):
            aliases[alias.lower()] = kind
    return aliases


_ALIASES: Final[Mapping[str, str]] = _aliases()

KNOWN_KINDS: Final[tuple[str, ...]] = tuple(
    [resource.KIND.kind for resource in ALL_KINDS] + [kind for kind, _, _ in _BUILTIN_KINDS]
)


class UnknownKind(ValueError):
    """A kind that is none of the known ones; the message lists them."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(f"unknown kind {text!r}; known kinds: {', '.join(KNOWN_KINDS)}")


def resolve_kind(text: str) -> str:
    """The kind as the watcher spells it, from a kind, plural, singular or short name."""
    kind = _ALIASES.get(text.strip().lower())
    if kind is None:
        raise UnknownKind(text)
    return kind


def parse_object_ref(text: str) -> ObjectRef:
    """``KIND/NAMESPACE/NAME``, or ``KIND/NAME`` in the default namespace."""
    parts = text.split("/")
    if len(parts) == 2:
        kind_text, name = parts
        namespace = DEFAULT_NAMESPACE
    elif len(parts) == 3:
        kind_text, namespace, name = parts
    else:
        raise ValueError(f"{text!r} is not KIND/NAMESPACE/NAME or KIND/NAME")
    if not kind_text or not name or not namespace:
        raise ValueError(f"{text!r} has an empty part; expected KIND/NAMESPACE/NAME or KIND/NAME")
    return ObjectRef(kind=resolve_kind(kind_text), namespace=namespace, name=name)


@dataclass(frozen=True, kw_only=True)
class Selection:
    """Which objects' history to read; ``None`` matches any value of that part.

    ``decisions`` adds the decisions recorded *about* the selected objects (keyed by them);
    decisions that merely act on an object are found by :mod:`services.cli.history.core.timeline`.
    """

    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    decisions: bool = False

    def subjects(self) -> list[str]:
        """The consumer filter subjects, changes first."""
        filters = [event_filter(self.kind, self.namespace, self.name)]
        if self.decisions:
            filters.append(decision_filter(None, self.kind, self.namespace, self.name))
        return filters
