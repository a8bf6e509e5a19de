"""Pool auto-assign: the Pool a BatchSandbox with ``spec.poolRef: "*"`` gets its pods from
(docs/opensandbox.md §2.12; upstream Go package ``assign`` in
kubernetes/internal/controller/poolassign/).

A :class:`Profile` names predicates and weighted scorers. Every candidate Pool goes through the
predicates in the profile's order and is rejected by the first one that does not hold; the
Pools left are scored by the weighted sum of the scorers. The highest score wins and, among
equal scores, the lexicographically smallest name, so the answer does not depend on the order
in which the Pools were listed. :data:`DEFAULT_PROFILE` is the one upstream always runs:
image, resource and nodeselector, scored by resbalance with weight 100 and ``LeastAllocated``,
which sends a sandbox to the least used Pool that fits it.

The predicates compare specs, never live pods: the BatchSandbox's own ``spec.template`` (the
PodTemplateSpec that ``poolRef`` is documented to exclude, yet may be there) against the
Pool's ``spec.template``. Without a sandbox template every template predicate holds.

- image: some Pool container runs one of the images the sandbox's containers name;
- resource: for every resource the sandbox's containers request, the Pool's containers
  request at least as much, both sides summed over their containers (init containers are not
  counted, as upstream does not count them);
- nodeselector: the sandbox's ``nodeSelector`` and its required node-affinity terms hold for
  the Pool's labels merged with the Pool template's ``nodeSelector`` (the template wins on a
  shared key). Terms are OR'd, a term's expressions AND'd; ``matchFields`` is not looked at,
  so a term with fields only matches every Pool, as upstream's does;
- labelselector (not in the default profile): each key of its ``keys`` argument is a label of
  both the BatchSandbox and the Pool, with the same value.

Where this differs from upstream, on purpose:

- A predicate returns *why* a Pool does not fit (``None`` when it fits), and
  :func:`choose_pool` answers :class:`PoolAssignFailed` with a message naming every Pool and
  its reason. The shell writes it as the ``PoolAssignFailed`` condition that the proposal
  describes; upstream only returns an error, retried with backoff, and writes no status.
- A Pool being deleted is no candidate (see :func:`choose_pool`).
- A request that is not a Kubernetes quantity makes the resource predicate fail with that
  reason instead of failing the whole pass; Go could not even decode such an object.

Unknown plugin names are skipped, as upstream's factory skips them. A resbalance scorer with an
unknown strategy is refused when its :class:`ScorerSpec` is built (:class:`InvalidProfileError`),
so a profile that exists always runs, and a loader of configured profiles can fall back to the
default at load time.

:func:`is_pooled` holds for ``"*"`` too, with or without a template. Upstream's Pool then skips a
sandbox that has a template, so ``"*"`` with a template hangs at zero pods (docs/opensandbox.md
§2.12, last paragraph); sandbus's Pool serves it, because its ``poolRef`` says it is pooled.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Literal, TypeAlias

from api.objects import labels_of, metadata_of
from api.quantity import QUANTITY_ARITHMETIC, QuantityError, parse_quantity

__all__ = [
    "AUTO_ASSIGN",
    "DEFAULT_PROFILE",
    "LEAST_ALLOCATED",
    "MOST_ALLOCATED",
    "AssignResult",
    "InvalidProfileError",
    "PoolAssignFailed",
    "PoolAssigned",
    "PredicateSpec",
    "Profile",
    "ScorerSpec",
    "choose_pool",
    "image_misfit",
    "is_pooled",
    "labelselector_misfit",
    "nodeselector_misfit",
    "resbalance_score",
    "resource_misfit",
    "wants_auto_assign",
]

AUTO_ASSIGN: Final = "*"
"""The ``spec.poolRef`` that asks the controller to choose the Pool."""

MOST_ALLOCATED: Final = "MostAllocated"
LEAST_ALLOCATED: Final = "LeastAllocated"

_LISTED: Final = 20
"""How many rejected Pools a failure message names; the rest are counted. A condition message
stays readable (and far below the API's 32 KiB) in a namespace with hundreds of Pools."""


class InvalidProfileError(ValueError):
    """A profile that cannot run: a resbalance scorer with an unknown strategy."""


# --- profiles ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PredicateSpec:
    """A predicate of a profile, by its plugin name, with the arguments it takes (only
    labelselector takes one: ``{"keys": [...]}``)."""

    name: str
    args: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ScorerSpec:
    """A scorer of a profile, by its plugin name, with its weight in the sum. ``strategy`` is
    resbalance's: an empty one means ``LeastAllocated``, as upstream defaults it; any other
    value than the two strategies is refused here."""

    name: str
    weight: int
    strategy: str = LEAST_ALLOCATED

    def __post_init__(self) -> None:
        if self.name != "resbalance":
            return
        if self.strategy == "":
            object.__setattr__(self, "strategy", LEAST_ALLOCATED)
        elif self.strategy not in (MOST_ALLOCATED, LEAST_ALLOCATED):
            raise InvalidProfileError(
                f'scorer "resbalance": unknown strategy {self.strategy!r}, '
                f"must be {MOST_ALLOCATED!r} or {LEAST_ALLOCATED!r}"
            )


@dataclass(frozen=True, slots=True)
class Profile:
    """Which predicates filter the Pools, in order, and which scorers rank the rest."""

    name: str
    predicates: tuple[PredicateSpec, ...] = ()
    scorers: tuple[ScorerSpec, ...] = ()


DEFAULT_PROFILE: Final = Profile(
    name="default",
    predicates=(PredicateSpec("image"), PredicateSpec("resource"), PredicateSpec("nodeselector")),
    scorers=(ScorerSpec("resbalance", weight=100, strategy=LEAST_ALLOCATED),),
)


# --- results -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolAssigned:
    """The Pool to write into ``spec.poolRef``, and the score it won with."""

    pool: str
    score: float


@dataclass(frozen=True, slots=True)
class PoolAssignFailed:
    """No Pool to assign: ``reason`` and ``message`` are the condition's; ``rejected`` lists
    every Pool considered, by name, with why it does not fit."""

    reason: Literal["NoPool", "NoPoolFits"]
    message: str
    rejected: tuple[tuple[str, str], ...] = ()


AssignResult: TypeAlias = PoolAssigned | PoolAssignFailed


# --- the BatchSandbox's poolRef ------------------------------------------------------------------


def _pool_ref(batch_sandbox: Mapping[str, Any]) -> str:
    ref = _mapping(batch_sandbox.get("spec")).get("poolRef")
    return ref if isinstance(ref, str) else ""


def is_pooled(batch_sandbox: Mapping[str, Any]) -> bool:
    """Whether the sandbox's pods come from a Pool: ``poolRef`` is set, ``"*"`` included. A
    template does not change the answer (upstream's ``IsPooledMode``)."""
    return _pool_ref(batch_sandbox) != ""


def wants_auto_assign(batch_sandbox: Mapping[str, Any]) -> bool:
    """Whether the controller must choose the sandbox's Pool first (upstream's
    ``AssignProfile`` is ``"default"`` exactly then, and empty otherwise)."""
    return _pool_ref(batch_sandbox) == AUTO_ASSIGN


# --- predicates ----------------------------------------------------------------------------------


def image_misfit(template: Mapping[str, Any] | None, pool: Mapping[str, Any]) -> str | None:
    """Why ``pool`` cannot run the images of the sandbox ``template``, or ``None`` when one of
    its containers runs one of them (or the sandbox names no image)."""
    wanted = _images(template) if template is not None else set()
    if not wanted:
        return None
    pool_template = _template_of(pool)
    if pool_template is None:
        return "the Pool has no template"
    if wanted & _images(pool_template):
        return None
    return f"no container of the Pool runs {', '.join(sorted(wanted))}"


def resource_misfit(template: Mapping[str, Any] | None, pool: Mapping[str, Any]) -> str | None:
    """Why ``pool``'s containers request less than the sandbox ``template``'s, or ``None``.
    The comparison is per resource name, over sums across containers; a resource the Pool does
    not request at all is too little. A value that is not a quantity rejects the Pool."""
    if template is None:
        return None
    try:
        needed = _requests(template, "the BatchSandbox's")
    except QuantityError as error:
        return str(error)
    if not needed:
        return None
    pool_template = _template_of(pool)
    if pool_template is None:
        return "the Pool has no template"
    try:
        offered = _requests(pool_template, "the Pool's")
    except QuantityError as error:
        return str(error)
    short = [
        f"{name} {_show(amount)} (Pool: {_show(offered[name]) if name in offered else 'none'})"
        for name, amount in sorted(needed.items())
        if name not in offered or offered[name] < amount
    ]
    return f"needs {', '.join(short)}" if short else None


def nodeselector_misfit(template: Mapping[str, Any] | None, pool: Mapping[str, Any]) -> str | None:
    """Why the sandbox ``template``'s node constraints exclude ``pool``, or ``None``: they are
    evaluated against the Pool's labels merged with its template's ``nodeSelector``, which stand
    for the nodes the Pool's pods run on."""
    if template is None:
        return None
    spec = _pod_spec(template)
    labels = _node_labels(pool)
    for key, value in _mapping(spec.get("nodeSelector")).items():
        if key not in labels or labels[key] != value:
            return f"nodeSelector {key}={value} is not among the Pool's labels and nodeSelector"
    terms = _required_terms(spec)
    if terms and not any(_term_holds(term, labels) for term in terms):
        return "no required nodeAffinity term matches the Pool's labels and nodeSelector"
    return None


def labelselector_misfit(
    labels: Mapping[str, Any], pool: Mapping[str, Any], keys: Sequence[str]
) -> str | None:
    """Why the BatchSandbox's ``labels`` and ``pool``'s disagree on one of ``keys``, or
    ``None`` when each key is a label of both with one value (no keys: always ``None``)."""
    pool_labels = labels_of(pool)
    for key in keys:
        if key not in labels:
            return f"label {key} is missing on the BatchSandbox"
        if key not in pool_labels:
            return f"label {key} is missing on the Pool"
        if pool_labels[key] != labels[key]:
            return (
                f"label {key} is {labels[key]} on the BatchSandbox, {pool_labels[key]} on the Pool"
            )
    return None


# --- scorers -------------------------------------------------------------------------------------


def resbalance_score(pool: Mapping[str, Any], strategy: str = LEAST_ALLOCATED) -> float:
    """The share of ``pool``'s pods allocated (``MostAllocated``) or not (``LeastAllocated``),
    from its status; 0 for a Pool with no pods, under either strategy."""
    status = _mapping(pool.get("status"))
    total, allocated = _count(status.get("total")), _count(status.get("allocated"))
    if total == 0:
        return 0.0
    ratio = allocated / total
    return ratio if strategy == MOST_ALLOCATED else 1 - ratio


# --- choosing ------------------------------------------------------------------------------------

_Check = Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]], str | None]
"""A predicate as a profile runs it: (BatchSandbox, Pool, its args) → why not, or None."""

_PREDICATES: Final[Mapping[str, _Check]] = {
    "image": lambda sandbox, pool, _: image_misfit(_template_of(sandbox), pool),
    "resource": lambda sandbox, pool, _: resource_misfit(_template_of(sandbox), pool),
    "nodeselector": lambda sandbox, pool, _: nodeselector_misfit(_template_of(sandbox), pool),
    "labelselector": lambda sandbox, pool, args: labelselector_misfit(
        labels_of(sandbox), pool, _strings(args.get("keys"))
    ),
}

_Score = Callable[[Mapping[str, Any], ScorerSpec], float]
"""A scorer as a profile runs it: (Pool, its spec) → an unweighted score."""

_SCORERS: Final[Mapping[str, _Score]] = {
    "resbalance": lambda pool, spec: resbalance_score(pool, spec.strategy),
}


def choose_pool(
    batch_sandbox: Mapping[str, Any],
    pools: Sequence[Mapping[str, Any]],
    profile: Profile = DEFAULT_PROFILE,
) -> AssignResult:
    """The Pool of ``pools`` (the Pools of the sandbox's namespace, as listed) that
    ``batch_sandbox`` is assigned to under ``profile``, or why there is none."""
    checks = [
        (spec.name, _PREDICATES[spec.name], spec.args or {})
        for spec in profile.predicates
        if spec.name in _PREDICATES
    ]
    scorers = [(spec, _SCORERS[spec.name]) for spec in profile.scorers if spec.name in _SCORERS]
    rejected: list[tuple[str, str]] = []
    best: PoolAssigned | None = None
    for pool in pools:
        metadata = metadata_of(pool)
        name = str(metadata.get("name") or "")
        # Our choice: upstream lists a Pool being deleted as a candidate and may assign a new
        # sandbox to it, which then waits on a Pool that is going away.
        if metadata.get("deletionTimestamp"):
            rejected.append((name, "being deleted"))
            continue
        why = _rejection(batch_sandbox, pool, checks)
        if why is not None:
            rejected.append((name, why))
            continue
        score = 0.0
        for spec, scorer in scorers:
            score += scorer(pool, spec) * spec.weight
        if best is None or score > best.score or (score == best.score and name < best.pool):
            best = PoolAssigned(pool=name, score=score)
    if best is not None:
        return best
    return _failure(str(metadata_of(batch_sandbox).get("namespace") or ""), sorted(rejected))


def _rejection(
    batch_sandbox: Mapping[str, Any],
    pool: Mapping[str, Any],
    checks: Sequence[tuple[str, _Check, Mapping[str, Any]]],
) -> str | None:
    """The first predicate that rejects ``pool``, with its reason, or ``None``."""
    for plugin, check, args in checks:
        misfit = check(batch_sandbox, pool, args)
        if misfit is not None:
            return f"{plugin}: {misfit}"
    return None


def _failure(namespace: str, rejected: list[tuple[str, str]]) -> PoolAssignFailed:
    if not rejected:
        return PoolAssignFailed(
            reason="NoPool", message=f"no Pool in namespace {namespace} to choose from"
        )
    listed = "; ".join(f"{name} ({why})" for name, why in rejected[:_LISTED])
    more = len(rejected) - _LISTED
    if more > 0:
        listed += f"; and {more} more"
    return PoolAssignFailed(
        reason="NoPoolFits",
        message=f"no Pool in namespace {namespace} fits ({len(rejected)} considered): {listed}",
        rejected=tuple(rejected),
    )


# --- quantities ----------------------------------------------------------------------------------


def _requests(template: Mapping[str, Any], whose: str) -> dict[str, Decimal]:
    """The requests of ``template``'s containers, summed per resource name."""
    sums: dict[str, Decimal] = {}
    for index, container in enumerate(_containers(template)):
        requests = _mapping(_mapping(container.get("resources")).get("requests"))
        for resource, raw in requests.items():
            try:
                amount = parse_quantity(raw)
            except QuantityError:
                name = container.get("name") or f"#{index}"
                raise QuantityError(
                    f"{whose} container {name} requests {resource} {raw!r}, which is not a quantity"
                ) from None
            sums[resource] = QUANTITY_ARITHMETIC.add(sums.get(resource, Decimal(0)), amount)
    return sums


def _show(amount: Decimal) -> str:
    return format(amount.normalize(QUANTITY_ARITHMETIC), "f")


# --- reading the objects -------------------------------------------------------------------------


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: object) -> list[Mapping[str, Any]]:
    """The objects of a JSON list; anything else in it is skipped."""
    if not isinstance(value, list | tuple):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def _strings(value: object) -> tuple[str, ...]:
    """The strings of a JSON list (upstream's ``extractStringSlice``)."""
    if not isinstance(value, list | tuple):
        return ()
    return tuple(item for item in value if isinstance(item, str))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _template_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``spec.template`` of a BatchSandbox or a Pool; ``None`` when there is none."""
    template = _mapping(obj.get("spec")).get("template")
    return template if isinstance(template, Mapping) else None


def _pod_spec(template: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(template.get("spec"))


def _containers(template: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return _items(_pod_spec(template).get("containers"))


def _images(template: Mapping[str, Any]) -> set[str]:
    return {
        image
        for container in _containers(template)
        if isinstance(image := container.get("image"), str) and image
    }


def _node_labels(pool: Mapping[str, Any]) -> dict[str, Any]:
    """The Pool's labels, overlaid with its template's nodeSelector."""
    pool_template = _template_of(pool)
    selector = _pod_spec(pool_template).get("nodeSelector") if pool_template else None
    return {**labels_of(pool), **_mapping(selector)}


def _required_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    node_affinity = _mapping(_mapping(spec.get("affinity")).get("nodeAffinity"))
    required = _mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    return _items(required.get("nodeSelectorTerms"))


def _term_holds(term: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    expressions = term.get("matchExpressions")
    if not isinstance(expressions, list | tuple):
        return True
    return all(
        isinstance(expression, Mapping) and _expression_holds(expression, labels)
        for expression in expressions
    )


def _expression_holds(expression: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    key = expression.get("key")
    present = isinstance(key, str) and key in labels
    value = labels.get(key) if isinstance(key, str) else None
    values = _strings(expression.get("values"))
    match expression.get("operator"):
        case "In":
            return present and value in values
        case "NotIn":
            return not (present and value in values)
        case "Exists":
            return present
        case "DoesNotExist":
            return not present
        case "Gt":
            return present and _compare(value, values, greater=True)
        case "Lt":
            return present and _compare(value, values, greater=False)
        case _:
            return False


_INT64: Final = range(-(1 << 63), 1 << 63)


def _go_int(text: object) -> int | None:
    """``text`` as Go's ``strconv.Atoi`` reads it on a 64-bit machine, or ``None``."""
    if not isinstance(text, str) or re.fullmatch(r"[+-]?[0-9]+", text) is None:
        return None
    number = int(text)
    return number if number in _INT64 else None


def _compare(value: object, values: Sequence[str], *, greater: bool) -> bool:
    """Whether the label ``value`` is greater (or less) than the first of ``values``, both as
    integers; false when either is not one."""
    label = _go_int(value)
    bound = _go_int(values[0]) if values else None
    if label is None or bound is None:
        return False
    return label > bound if greater else label < bound
