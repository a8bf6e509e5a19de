"""Pool auto-assign (services/claim/core/batch/assign.py): one test per upstream test of
kubernetes/internal/controller/poolassign/ and of strategy/pool_strategy_test.go
(docs/opensandbox.md §7.1), each naming the one it mirrors, then what upstream leaves out: the
failure's reason, Pools being deleted, and quantities written every way, malformed ones too."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import pytest

from api.objects import Json
from api.quantity import QuantityError, parse_quantity
from services.claim.core.batch.assign import (
    DEFAULT_PROFILE,
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    InvalidProfileError,
    PoolAssigned,
    PoolAssignFailed,
    PredicateSpec,
    Profile,
    ScorerSpec,
    choose_pool,
    image_misfit,
    is_pooled,
    labelselector_misfit,
    nodeselector_misfit,
    resbalance_score,
    resource_misfit,
    wants_auto_assign,
)

NS = "team-a"


# --- builders ------------------------------------------------------------------------------------


def container(image: str = "", requests: Mapping[str, Any] | None = None) -> Json:
    body: Json = {"name": "main"}
    if image:
        body["image"] = image
    if requests is not None:
        body["resources"] = {"requests": dict(requests)}
    return body


def expr(key: str, operator: str, *values: str) -> Json:
    body: Json = {"key": key, "operator": operator}
    if values:
        body["values"] = list(values)
    return body


def template(
    *containers: Json,
    node_selector: Mapping[str, str] | None = None,
    terms: Sequence[Sequence[Json]] | None = None,
) -> Json:
    """A PodTemplateSpec; ``terms`` are required node-affinity terms, each a list of
    expressions."""
    spec: Json = {"containers": list(containers)}
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    if terms is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": list(term)} for term in terms]
                }
            }
        }
    return {"metadata": {}, "spec": spec}


def affinity(*expressions: Json, node_selector: Mapping[str, str] | None = None) -> Json:
    """A sandbox template with one required node-affinity term of ``expressions``."""
    return template(node_selector=node_selector, terms=[expressions])


def pool(
    name: str = "pool-1",
    pod_template: Json | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    total: int = 0,
    allocated: int = 0,
    deleting: bool = False,
) -> Json:
    metadata: Json = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
    if labels is not None:
        metadata["labels"] = dict(labels)
    if deleting:
        metadata["deletionTimestamp"] = "2026-06-01T10:00:00Z"
    spec: Json = {"capacitySpec": {"poolMin": 0, "poolMax": 10, "bufferMin": 0, "bufferMax": 1}}
    if pod_template is not None:
        spec["template"] = pod_template
    return {
        "apiVersion": "sandbox.opensandbox.io/v1alpha1",
        "kind": "Pool",
        "metadata": metadata,
        "spec": spec,
        "status": {"revision": "0", "total": total, "allocated": allocated, "available": 0},
    }


def batch_sandbox(
    pod_template: Json | None = None,
    *,
    pool_ref: str | None = "*",
    labels: Mapping[str, str] | None = None,
) -> Json:
    metadata: Json = {"name": "bs-1", "namespace": NS}
    if labels is not None:
        metadata["labels"] = dict(labels)
    spec: Json = {"replicas": 1}
    if pool_ref is not None:
        spec["poolRef"] = pool_ref
    if pod_template is not None:
        spec["template"] = pod_template
    return {
        "apiVersion": "sandbox.opensandbox.io/v1alpha1",
        "kind": "BatchSandbox",
        "metadata": metadata,
        "spec": spec,
    }


def image_pool(name: str, image: str, total: int, allocated: int) -> Json:
    """Upstream default_test.go's ``makePool``."""
    return pool(name, template(container(image)), total=total, allocated=allocated)


def image_sandbox(image: str) -> Json:
    """Upstream default_test.go's ``makeSBX``."""
    return batch_sandbox(template(container(image)))


def profile(
    *predicates: str, scorers: Sequence[ScorerSpec] = (), args: Mapping[str, Any] | None = None
) -> Profile:
    """A profile of ``predicates``; ``args`` go to the predicate of the same name."""
    given = args or {}
    return Profile(
        name="custom",
        predicates=tuple(PredicateSpec(name, given.get(name)) for name in predicates),
        scorers=tuple(scorers),
    )


MOST = ScorerSpec("resbalance", weight=100, strategy=MOST_ALLOCATED)


# --- predicate_image_test.go ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sandbox_template", "pool_template", "fits"),
    [
        pytest.param(
            template(container("nginx:1.25")), template(container("nginx:1.25")), True, id="match"
        ),
        pytest.param(
            template(container("nginx:1.25")), template(container("redis:7")), False, id="none"
        ),
        pytest.param(None, template(container("nginx:1.25")), True, id="nil-sandbox-template"),
        pytest.param(template(container("nginx:1.25")), None, False, id="nil-pool-template"),
        pytest.param(template(), template(container("nginx:1.25")), True, id="empty-sandbox"),
        pytest.param(template(container("nginx:1.25")), template(), False, id="empty-pool"),
        pytest.param(
            template(container("sidecar:latest"), container("nginx:1.25")),
            template(container("nginx:1.25"), container("helper:latest")),
            True,
            id="partial-match-across-containers",
        ),
    ],
)
def test_image_predicate(
    sandbox_template: Json | None, pool_template: Json | None, fits: bool
) -> None:
    """Mirrors predicate_image_test.go TestImagePredicate: one image in common suffices; no
    sandbox template, or a template that names no image, constrains nothing; a Pool without a
    template or without containers runs no image."""
    misfit = image_misfit(sandbox_template, pool("p", pool_template))
    assert (misfit is None) is fits


def test_image_misfit_names_the_images_it_looked_for() -> None:
    misfit = image_misfit(
        template(container("b:1"), container("a:1")), pool("p", template(container("c:1")))
    )
    assert misfit == "no container of the Pool runs a:1, b:1"
    assert image_misfit(template(container("a:1")), pool("p")) == "the Pool has no template"


# --- predicate_labelselector_test.go -------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "sandbox_labels", "pool_labels", "fits"),
    [
        pytest.param(
            ["env", "tier"],
            {"env": "prod", "tier": "frontend", "extra": "val"},
            {"env": "prod", "tier": "frontend"},
            True,
            id="all-keys-equal",
        ),
        pytest.param(["env"], {"env": "prod"}, {"env": "staging"}, False, id="value-differs"),
        pytest.param(
            ["env", "tier"],
            {"env": "prod"},
            {"env": "prod", "tier": "frontend"},
            False,
            id="sandbox-lacks-key",
        ),
        pytest.param(["env"], {"env": "prod"}, {}, False, id="pool-lacks-key"),
        pytest.param([], None, None, True, id="empty-keys"),
        pytest.param(None, None, None, True, id="nil-keys"),
        pytest.param(["env"], None, {"env": "prod"}, False, id="sandbox-nil-labels"),
        pytest.param(["env"], {"env": "prod"}, None, False, id="pool-nil-labels"),
    ],
)
def test_labelselector_predicate(
    keys: list[str] | None,
    sandbox_labels: dict[str, str] | None,
    pool_labels: dict[str, str] | None,
    fits: bool,
) -> None:
    """Mirrors predicate_labelselector_test.go TestLabelSelectorPredicate: every configured
    key is a label of both objects with one value; extra labels do not matter; no keys, no
    constraint. Run through a profile, so the ``keys`` argument is read as upstream reads it."""
    sandbox = batch_sandbox(labels=sandbox_labels)
    candidate = pool("p", labels=pool_labels)
    args = {"labelselector": {"keys": keys}}
    result = choose_pool(sandbox, [candidate], profile("labelselector", args=args))
    assert isinstance(result, PoolAssigned) is fits
    assert (
        labelselector_misfit(sandbox["metadata"].get("labels", {}), candidate, keys or []) is None
    ) is fits


def test_labelselector_misfit_says_which_side_lacks_the_key() -> None:
    candidate = pool("p", labels={"env": "staging"})
    assert (
        labelselector_misfit({}, candidate, ["env"]) == "label env is missing on the BatchSandbox"
    )
    assert labelselector_misfit({"tier": "x"}, pool("p"), ["tier"]) == (
        "label tier is missing on the Pool"
    )
    assert labelselector_misfit({"env": "prod"}, candidate, ["env"]) == (
        "label env is prod on the BatchSandbox, staging on the Pool"
    )


# --- predicate_nodeselector_test.go --------------------------------------------------------------

WEST = {"zone": "us-west-1"}
IN_WEST = expr("zone", "In", "us-west-1")
SSD = {"disk": "ssd"}


@pytest.mark.parametrize(
    ("sandbox_template", "candidate", "fits"),
    [
        pytest.param(
            template(node_selector=WEST),
            pool(pod_template=template(node_selector={**WEST, "rack": "r1"})),
            True,
            id="nodeSelector-matches",
        ),
        pytest.param(
            template(node_selector=WEST),
            pool(pod_template=template(node_selector={"zone": "us-east-1"})),
            False,
            id="nodeSelector-differs",
        ),
        pytest.param(
            template(), pool(pod_template=template(node_selector=WEST)), True, id="no-nodeSelector"
        ),
        pytest.param(
            None, pool(pod_template=template(node_selector=WEST)), True, id="nil-sandbox-template"
        ),
        pytest.param(template(node_selector=WEST), pool(), False, id="nil-pool-template"),
        pytest.param(affinity(IN_WEST), pool(pod_template={}, labels=WEST), True, id="In"),
        pytest.param(
            affinity(IN_WEST),
            pool(pod_template={}, labels={"zone": "us-east-1"}),
            False,
            id="In-differs",
        ),
        pytest.param(
            affinity(IN_WEST),
            pool(pod_template={}, labels={"rack": "r1"}),
            False,
            id="In-label-missing",
        ),
        pytest.param(
            affinity(IN_WEST, node_selector=SSD),
            pool(pod_template=template(node_selector=SSD), labels=WEST),
            True,
            id="nodeSelector-and-affinity-match",
        ),
        pytest.param(
            affinity(IN_WEST, node_selector=SSD),
            pool(pod_template=template(node_selector=SSD), labels={"zone": "us-east-1"}),
            False,
            id="nodeSelector-matches-affinity-does-not",
        ),
        pytest.param(
            template(node_selector={"accelerator": "gpu"}),
            pool(pod_template=template(), labels={"accelerator": "gpu"}),
            True,
            id="nodeSelector-matches-pool-labels",
        ),
        pytest.param(
            template(node_selector={"accelerator": "gpu"}),
            pool(pod_template=template(), labels={"accelerator": "cpu"}),
            False,
            id="nodeSelector-differs-from-pool-labels",
        ),
        pytest.param(
            affinity(expr("disk", "In", "ssd")),
            pool(pod_template=template(node_selector=SSD)),
            True,
            id="affinity-matches-pool-nodeSelector",
        ),
        pytest.param(
            template(node_selector={"accelerator": "gpu", **SSD}),
            pool(pod_template=template(node_selector=SSD), labels={"accelerator": "gpu"}),
            True,
            id="nodeSelector-matches-merged",
        ),
        pytest.param(
            template(node_selector=WEST),
            pool(labels=WEST),
            True,
            id="nil-pool-template-labels-match",
        ),
        pytest.param(
            affinity(expr("zone", "NotIn", "us-east-1", "us-east-2")),
            pool(pod_template={}, labels=WEST),
            True,
            id="NotIn-absent-from-list",
        ),
        pytest.param(
            affinity(expr("zone", "NotIn", "us-east-1", "us-west-1")),
            pool(pod_template={}, labels=WEST),
            False,
            id="NotIn-in-list",
        ),
        pytest.param(
            affinity(expr("zone", "Exists")),
            pool(pod_template={}, labels=WEST),
            True,
            id="Exists-present",
        ),
        pytest.param(
            affinity(expr("zone", "Exists")),
            pool(pod_template={}, labels={"rack": "r1"}),
            False,
            id="Exists-absent",
        ),
        pytest.param(
            affinity(expr("zone", "DoesNotExist")),
            pool(pod_template={}, labels={"rack": "r1"}),
            True,
            id="DoesNotExist-absent",
        ),
        pytest.param(
            affinity(expr("zone", "DoesNotExist")),
            pool(pod_template={}, labels=WEST),
            False,
            id="DoesNotExist-present",
        ),
        pytest.param(
            affinity(expr("priority", "Gt", "5")),
            pool(pod_template={}, labels={"priority": "10"}),
            True,
            id="Gt-greater",
        ),
        pytest.param(
            affinity(expr("priority", "Gt", "5")),
            pool(pod_template={}, labels={"priority": "3"}),
            False,
            id="Gt-not-greater",
        ),
        pytest.param(
            affinity(expr("priority", "Lt", "5")),
            pool(pod_template={}, labels={"priority": "3"}),
            True,
            id="Lt-less",
        ),
        pytest.param(
            affinity(expr("priority", "Lt", "5")),
            pool(pod_template={}, labels={"priority": "10"}),
            False,
            id="Lt-not-less",
        ),
    ],
)
def test_nodeselector_predicate(sandbox_template: Json | None, candidate: Json, fits: bool) -> None:
    """Mirrors predicate_nodeselector_test.go TestNodeSelectorPredicate: the sandbox's
    nodeSelector and required nodeAffinity (In, NotIn, Exists, DoesNotExist, Gt, Lt) hold
    against the Pool's labels merged with the Pool template's nodeSelector."""
    assert (nodeselector_misfit(sandbox_template, candidate) is None) is fits


@pytest.mark.parametrize(
    ("sandbox_template", "candidate", "fits"),
    [
        pytest.param(
            template(terms=[[expr("zone", "In", "eu")], [IN_WEST]]),
            pool(labels=WEST),
            True,
            id="terms-are-ORed",
        ),
        pytest.param(
            affinity(IN_WEST, expr("rack", "Exists")),
            pool(labels=WEST),
            False,
            id="expressions-are-ANDed",
        ),
        pytest.param(template(terms=[]), pool(labels=WEST), True, id="no-terms-constrain-nothing"),
        pytest.param(
            template(node_selector=WEST),
            pool(pod_template=template(node_selector={"zone": "eu"}), labels=WEST),
            False,
            id="pool-nodeSelector-overrides-label",
        ),
        pytest.param(
            affinity(expr("zone", "Near", "us-west-1")),
            pool(labels=WEST),
            False,
            id="unknown-operator",
        ),
        pytest.param(
            affinity(expr("priority", "Gt", "5")),
            pool(labels={"priority": "high"}),
            False,
            id="Gt-label-not-integer",
        ),
        pytest.param(
            affinity(expr("priority", "Gt", " 5")),
            pool(labels={"priority": "10"}),
            False,
            id="Gt-value-not-Atoi",
        ),
        pytest.param(
            affinity(expr("priority", "Lt")),
            pool(labels={"priority": "1"}),
            False,
            id="Lt-without-values",
        ),
        pytest.param(
            affinity(expr("priority", "Gt", "-3")),
            pool(labels={"priority": "+2"}),
            True,
            id="Gt-signed-integers",
        ),
    ],
)
def test_nodeselector_terms_operators_and_merging(
    sandbox_template: Json, candidate: Json, fits: bool
) -> None:
    """Beyond upstream's cases, the rules its code applies: terms OR'd, expressions AND'd, the
    Pool's nodeSelector wins over its label of the same key, an unknown operator never holds,
    and Gt/Lt compare integers as Go's strconv.Atoi reads them."""
    assert (nodeselector_misfit(sandbox_template, candidate) is None) is fits


def test_match_fields_are_ignored() -> None:
    """A term with only matchFields has no expressions to fail, so it matches any Pool, as
    upstream's does (the scheduler would look at the node's fields instead)."""
    sandbox_template = template()
    sandbox_template["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["x"]}]}
                ]
            }
        }
    }
    assert nodeselector_misfit(sandbox_template, pool()) is None


def test_nodeselector_misfit_names_the_selector() -> None:
    assert nodeselector_misfit(template(node_selector=WEST), pool()) == (
        "nodeSelector zone=us-west-1 is not among the Pool's labels and nodeSelector"
    )
    assert nodeselector_misfit(affinity(IN_WEST), pool()) == (
        "no required nodeAffinity term matches the Pool's labels and nodeSelector"
    )


# --- predicate_resource_test.go ------------------------------------------------------------------


def needs(*requests: Mapping[str, Any]) -> Json:
    return template(*(container("nginx", r) for r in requests))


ONE_CPU_1GI = {"cpu": "1", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("sandbox_template", "pool_template", "fits"),
    [
        pytest.param(needs(ONE_CPU_1GI), needs(ONE_CPU_1GI), True, id="equal"),
        pytest.param(needs(ONE_CPU_1GI), needs({"cpu": "2", "memory": "4Gi"}), True, id="greater"),
        pytest.param(needs({"cpu": "2"}), needs({"cpu": "1"}), False, id="less-cpu"),
        pytest.param(needs({"memory": "4Gi"}), needs({"memory": "2Gi"}), False, id="less-memory"),
        pytest.param(
            template(container("nginx")), template(container("nginx")), True, id="no-requests"
        ),
        pytest.param(needs({"cpu": "1"}), template(container("nginx")), False, id="pool-none"),
        pytest.param(None, template(container("nginx")), True, id="nil-sandbox-template"),
        pytest.param(template(container("nginx")), None, True, id="nil-pool-no-requests"),
        pytest.param(needs({"cpu": "1"}), None, False, id="nil-pool-with-requests"),
        pytest.param(
            needs({"cpu": "500m"}, {"memory": "512Mi"}),
            needs(ONE_CPU_1GI, {"memory": "2Gi"}),
            True,
            id="multi-container",
        ),
    ],
)
def test_resource_predicate(
    sandbox_template: Json | None, pool_template: Json | None, fits: bool
) -> None:
    """Mirrors predicate_resource_test.go TestResourcePredicate: per resource name, what the
    sandbox's containers request in sum is at most what the Pool's request in sum; no requests,
    no constraint; a resource the Pool does not request, or a Pool without a template, fails."""
    assert (resource_misfit(sandbox_template, pool("p", pool_template)) is None) is fits


@pytest.mark.parametrize(
    ("sandbox_template", "pool_template", "fits"),
    [
        pytest.param(
            needs({"cpu": "600m"}, {"cpu": "600m"}), needs({"cpu": "1"}), False, id="sandbox-sum"
        ),
        pytest.param(
            needs({"cpu": "1200m"}), needs({"cpu": "600m"}, {"cpu": "0.6"}), True, id="pool-sum"
        ),
        pytest.param(
            needs({"memory": "1Gi"}), needs({"memory": "1073741824"}), True, id="Gi=bytes"
        ),
        pytest.param(
            needs({"memory": "129e6"}), needs({"memory": "123Mi"}), False, id="129e6>123Mi"
        ),
        pytest.param(needs({"memory": "123Mi"}), needs({"memory": "129M"}), True, id="123Mi<129M"),
        pytest.param(needs({"cpu": 2}), needs({"cpu": "2000m"}), True, id="json-number"),
        pytest.param(
            needs({"nvidia.com/gpu": "1"}), needs(ONE_CPU_1GI), False, id="extended-resource"
        ),
    ],
)
def test_resource_sums_and_notations(
    sandbox_template: Json, pool_template: Json, fits: bool
) -> None:
    """The sums are real sums (upstream's multi-container case holds even without summing), and
    one amount written in two notations compares equal."""
    assert (resource_misfit(sandbox_template, pool("p", pool_template)) is None) is fits


def test_resource_misfit_lists_every_short_resource() -> None:
    misfit = resource_misfit(
        needs({"memory": "4Gi", "cpu": "1500m", "ephemeral-storage": "1Gi"}),
        pool("p", needs({"cpu": "1", "memory": "8Gi"})),
    )
    assert misfit == "needs cpu 1.5 (Pool: 1), ephemeral-storage 1073741824 (Pool: none)"


# --- scorer_resbalance_test.go -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "total", "allocated", "score"),
    [
        pytest.param(MOST_ALLOCATED, 10, 5, 0.5, id="most-half"),
        pytest.param(MOST_ALLOCATED, 10, 10, 1.0, id="most-full"),
        pytest.param(MOST_ALLOCATED, 10, 0, 0.0, id="most-zero"),
        pytest.param(MOST_ALLOCATED, 0, 0, 0.0, id="most-zero-total"),
        pytest.param(LEAST_ALLOCATED, 10, 5, 0.5, id="least-half"),
        pytest.param(LEAST_ALLOCATED, 10, 10, 0.0, id="least-full"),
        pytest.param(LEAST_ALLOCATED, 10, 0, 1.0, id="least-zero"),
        pytest.param(LEAST_ALLOCATED, 0, 0, 0.0, id="least-zero-total"),
    ],
)
def test_resbalance_scorer(strategy: str, total: int, allocated: int, score: float) -> None:
    """Mirrors scorer_resbalance_test.go TestResBalanceScorer: MostAllocated is
    allocated/total, LeastAllocated 1 - allocated/total, both 0 for a Pool with no pods; read
    from the Pool's status."""
    assert resbalance_score(pool(total=total, allocated=allocated), strategy) == score


def test_resbalance_scorer_without_status_scores_zero() -> None:
    candidate = pool()
    del candidate["status"]
    assert resbalance_score(candidate, LEAST_ALLOCATED) == 0.0


def test_resbalance_scorer_invalid_strategy() -> None:
    """Mirrors scorer_resbalance_test.go TestResBalanceScorer_InvalidStrategy: an unknown
    strategy is an error, raised when the scorer is configured."""
    with pytest.raises(InvalidProfileError, match="InvalidStrategy"):
        ScorerSpec("resbalance", weight=100, strategy="InvalidStrategy")


def test_resbalance_empty_strategy_is_least_allocated() -> None:
    """Upstream's extractStrategy: a missing or empty strategy means LeastAllocated."""
    assert ScorerSpec("resbalance", weight=1, strategy="").strategy == LEAST_ALLOCATED
    assert ScorerSpec("resbalance", weight=1).strategy == LEAST_ALLOCATED


# --- default_test.go (TestDefaultAssigner_AssignPool) --------------------------------------------


def test_single_pool_passes_all_predicates() -> None:
    """Mirrors default_test.go TestDefaultAssigner_AssignPool ("single pool passes all
    predicates")."""
    result = choose_pool(image_sandbox("nginx"), [image_pool("pool-1", "nginx", 10, 5)])
    assert result == PoolAssigned(pool="pool-1", score=50.0)


def test_higher_score_wins() -> None:
    """Mirrors default_test.go TestDefaultAssigner_AssignPool ("multiple pools - higher score
    wins"), under MostAllocated; and the default LeastAllocated picks the other one."""
    pools = [image_pool("pool-a", "nginx", 10, 2), image_pool("pool-b", "nginx", 10, 8)]
    most = profile("image", scorers=[MOST])
    assert choose_pool(image_sandbox("nginx"), pools, most) == PoolAssigned("pool-b", 80.0)
    assert choose_pool(image_sandbox("nginx"), pools) == PoolAssigned("pool-a", 80.0)


def test_all_pools_filtered_out() -> None:
    """Mirrors default_test.go TestDefaultAssigner_AssignPool ("all pools filtered out -
    error"): here a failure with the reason."""
    result = choose_pool(image_sandbox("nginx"), [image_pool("pool-1", "redis", 10, 5)])
    assert result == PoolAssignFailed(
        reason="NoPoolFits",
        message=(
            f"no Pool in namespace {NS} fits (1 considered): "
            "pool-1 (image: no container of the Pool runs nginx)"
        ),
        rejected=(("pool-1", "image: no container of the Pool runs nginx"),),
    )


def test_tie_breaks_by_name() -> None:
    """Mirrors default_test.go TestDefaultAssigner_AssignPool ("tie-breaking by name"): equal
    scores go to the lexicographically first name, whatever the listing order."""
    pools = [
        image_pool("pool-b", "nginx", 10, 5),
        image_pool("pool-a", "nginx", 10, 5),
        image_pool("pool-c", "nginx", 10, 5),
    ]
    for order in itertools.permutations(pools):
        result = choose_pool(image_sandbox("nginx"), order, profile("image", scorers=[MOST]))
        assert result == PoolAssigned("pool-a", 50.0)


def test_no_scorers_picks_by_name() -> None:
    """Mirrors default_test.go TestDefaultAssigner_AssignPool ("no scorers - pick by name")."""
    pools = [image_pool("pool-b", "nginx", 10, 9), image_pool("pool-a", "nginx", 10, 5)]
    assert choose_pool(image_sandbox("nginx"), pools, profile("image")) == PoolAssigned(
        "pool-a", 0.0
    )


def test_empty_pool_list() -> None:
    """Mirrors default_test.go TestDefaultAssigner_AssignPool ("empty pool list - error"):
    here a failure that says the namespace has no Pool."""
    assert choose_pool(image_sandbox("nginx"), []) == PoolAssignFailed(
        reason="NoPool", message=f"no Pool in namespace {NS} to choose from"
    )


# --- factory_test.go -----------------------------------------------------------------------------


def test_default_profile_predicates_and_scorer() -> None:
    """Mirrors factory_test.go TestNewPredicates ("default profile creates image, resource,
    nodeselector predicates") and TestNewScorers ("default profile creates resbalance scorer
    with weight"): those three in that order, and resbalance at weight 100, LeastAllocated."""
    assert DEFAULT_PROFILE.name == "default"
    assert [spec.name for spec in DEFAULT_PROFILE.predicates] == [
        "image",
        "resource",
        "nodeselector",
    ]
    assert DEFAULT_PROFILE.scorers == (ScorerSpec("resbalance", 100, LEAST_ALLOCATED),)


def test_default_profile_runs_its_predicates_in_order_and_not_labelselector() -> None:
    """The same, seen from outside: each default predicate rejects, the first failing one is
    reported, and labels alone do not."""
    sandbox = batch_sandbox(
        template(container("nginx", {"cpu": "2"}), node_selector=WEST), labels={"env": "prod"}
    )
    pools = [
        pool("a-image", template(container("redis", {"cpu": "1"}))),
        pool("b-resource", template(container("nginx", {"cpu": "1"}), node_selector=WEST)),
        pool("c-nodes", template(container("nginx", {"cpu": "4"}))),
        pool(
            "d-fits",
            template(container("nginx", {"cpu": "2"}), node_selector=WEST),
            labels={"env": "dev"},
        ),
    ]
    result = choose_pool(sandbox, pools)
    assert result == PoolAssigned("d-fits", 0.0)
    failed = choose_pool(sandbox, pools[:3])
    assert isinstance(failed, PoolAssignFailed)
    assert [why.split(":")[0] for _, why in failed.rejected] == [
        "image",
        "resource",
        "nodeselector",
    ]


def test_labelselector_args_are_read() -> None:
    """Mirrors factory_test.go TestNewPredicates ("profile with labelselector predicate"):
    the ``keys`` argument, as a JSON list, configures labelselector."""
    custom = profile("image", "labelselector", args={"labelselector": {"keys": ["env", "tier"]}})
    sandbox = batch_sandbox(template(container("nginx")), labels={"env": "prod", "tier": "web"})
    pools = [
        pool("pool-a", template(container("nginx")), labels={"env": "prod", "tier": "db"}),
        pool("pool-b", template(container("nginx")), labels={"env": "prod", "tier": "web"}),
    ]
    assert choose_pool(sandbox, pools, custom) == PoolAssigned("pool-b", 0.0)


def test_empty_profile_has_no_predicates_and_no_scorers() -> None:
    """Mirrors factory_test.go TestNewPredicates ("empty profile creates no predicates") and
    TestNewScorers ("empty profile creates no scorers"): every Pool fits, all score 0."""
    pools = [image_pool("pool-b", "redis", 10, 0), image_pool("pool-a", "redis", 10, 9)]
    result = choose_pool(image_sandbox("nginx"), pools, Profile(name="empty"))
    assert result == PoolAssigned("pool-a", 0.0)


def test_unknown_predicate_name_is_skipped() -> None:
    """Mirrors factory_test.go TestNewPredicates ("unknown predicate name is skipped"): the
    known one still runs, the unknown one rejects nothing."""
    custom = profile("image", "unknown-plugin")
    assert choose_pool(
        image_sandbox("nginx"), [image_pool("p", "nginx", 1, 0)], custom
    ) == PoolAssigned("p", 0.0)
    assert isinstance(
        choose_pool(image_sandbox("nginx"), [image_pool("p", "redis", 1, 0)], custom),
        PoolAssignFailed,
    )


def test_predicate_args_it_does_not_take_are_no_error() -> None:
    """Mirrors factory_test.go TestNewPredicates ("creator error propagates", which asserts
    that image given empty args is no error)."""
    custom = profile("image", args={"image": {}})
    assert choose_pool(
        image_sandbox("nginx"), [image_pool("p", "nginx", 1, 0)], custom
    ) == PoolAssigned("p", 0.0)


def test_scorer_weight_and_strategy_are_applied() -> None:
    """Mirrors factory_test.go TestNewScorers ("custom profile with MostAllocated strategy"):
    weight 50, MostAllocated, on a Pool 3/4 allocated."""
    custom = profile(scorers=[ScorerSpec("resbalance", 50, MOST_ALLOCATED)])
    assert choose_pool(
        image_sandbox("nginx"), [image_pool("p", "nginx", 4, 3)], custom
    ) == PoolAssigned("p", 37.5)


def test_unknown_scorer_name_is_skipped() -> None:
    """Mirrors factory_test.go TestNewScorers ("unknown scorer name is skipped"): only
    resbalance adds to the score."""
    custom = profile(
        scorers=[ScorerSpec("resbalance", 100), ScorerSpec("unknown-scorer", 50, "anything")]
    )
    assert choose_pool(
        image_sandbox("nginx"), [image_pool("p", "nginx", 4, 1)], custom
    ) == PoolAssigned("p", 75.0)


def test_invalid_scorer_args_are_an_error() -> None:
    """Mirrors factory_test.go TestNewScorers ("invalid scorer args returns error"): the
    error names the scorer."""
    with pytest.raises(InvalidProfileError, match='scorer "resbalance"'):
        profile(scorers=[ScorerSpec("resbalance", 100, "InvalidStrategy")])


def test_plugin_args_go_to_their_plugin() -> None:
    """Mirrors factory_test.go TestPluginArgs: a plugin gets the args given with it, and one
    given none gets none (labelselector without keys constrains nothing)."""
    sandbox = batch_sandbox(labels={"env": "prod"})
    candidate = pool("p", labels={"env": "dev"})
    with_keys = profile("labelselector", args={"labelselector": {"keys": ["env"]}})
    assert isinstance(choose_pool(sandbox, [candidate], with_keys), PoolAssignFailed)
    assert choose_pool(sandbox, [candidate], profile("labelselector")) == PoolAssigned("p", 0.0)
    not_a_list = profile("labelselector", args={"labelselector": {"keys": "env"}})
    assert choose_pool(sandbox, [candidate], not_a_list) == PoolAssigned("p", 0.0)


# --- strategy/pool_strategy_test.go --------------------------------------------------------------


@pytest.mark.parametrize(
    ("sandbox", "pooled"),
    [
        pytest.param(batch_sandbox(template(container("nginx")), pool_ref=None), False, id="tmpl"),
        pytest.param(batch_sandbox(pool_ref="test-pool"), True, id="pool-name"),
        pytest.param(batch_sandbox(pool_ref="*"), True, id="star"),
        pytest.param(batch_sandbox(template(container("nginx")), pool_ref="*"), True, id="star+t"),
        pytest.param(batch_sandbox(pool_ref=""), False, id="empty"),
    ],
)
def test_is_pooled(sandbox: Json, pooled: bool) -> None:
    """Mirrors pool_strategy_test.go TestDefaultPoolStrategy_IsPooledMode: pooled exactly when
    poolRef is set, "*" included; a template does not matter."""
    assert is_pooled(sandbox) is pooled


@pytest.mark.parametrize(
    ("pool_ref", "auto"),
    [
        pytest.param("*", True, id="star"),
        pytest.param("test-pool", False, id="pool-name"),
        pytest.param(None, False, id="empty"),
    ],
)
def test_wants_auto_assign(pool_ref: str | None, auto: bool) -> None:
    """Mirrors pool_strategy_test.go TestDefaultPoolStrategy_AssignProfile: only "*" asks for
    an assignment (upstream: the "default" profile, else none)."""
    assert wants_auto_assign(batch_sandbox(pool_ref=pool_ref)) is auto


# --- failures and deletion (ours) ----------------------------------------------------------------


def test_failure_names_every_pool_by_name_with_its_reason() -> None:
    sandbox = batch_sandbox(template(container("nginx", {"cpu": "2"})))
    pools = [
        pool("pool-c", template(container("nginx", {"cpu": "1"}))),
        pool("pool-a", template(container("redis"))),
        pool("pool-b", template(container("nginx", {"cpu": "4"})), deleting=True),
    ]
    result = choose_pool(sandbox, pools)
    assert isinstance(result, PoolAssignFailed)
    assert result.reason == "NoPoolFits"
    assert result.message == (
        f"no Pool in namespace {NS} fits (3 considered): "
        "pool-a (image: no container of the Pool runs nginx); "
        "pool-b (being deleted); "
        "pool-c (resource: needs cpu 2 (Pool: 1))"
    )


def test_a_pool_being_deleted_is_no_candidate() -> None:
    """Our choice: the Pool that would win is being deleted, so the next one is taken."""
    pools = [
        image_pool("pool-a", "nginx", 10, 0),
        image_pool("pool-b", "nginx", 10, 5),
    ]
    pools[0]["metadata"]["deletionTimestamp"] = "2026-06-01T10:00:00Z"
    assert choose_pool(image_sandbox("nginx"), pools) == PoolAssigned("pool-b", 50.0)


def test_failure_message_stays_short_with_many_pools() -> None:
    pools = [image_pool(f"pool-{i:03}", "redis", 1, 0) for i in range(50)]
    result = choose_pool(image_sandbox("nginx"), pools)
    assert isinstance(result, PoolAssignFailed)
    assert len(result.rejected) == 50
    assert result.message.startswith(f"no Pool in namespace {NS} fits (50 considered): pool-000 ")
    assert result.message.endswith(
        "pool-019 (image: no container of the Pool runs nginx); and 30 more"
    )


def test_choose_pool_changes_nothing_it_is_given() -> None:
    sandbox = image_sandbox("nginx")
    pools = [image_pool("pool-a", "nginx", 10, 0)]
    before = repr((sandbox, pools))
    choose_pool(sandbox, pools)
    assert repr((sandbox, pools)) == before


# --- quantities (ours) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        ("500m", Decimal("0.5")),
        ("1", Decimal(1)),
        ("1Gi", Decimal(1 << 30)),
        ("1.5Gi", Decimal(3 << 29)),
        ("128974848", Decimal(128974848)),
        ("129e6", Decimal(129000000)),
        ("129E6", Decimal(129000000)),
        ("123Mi", Decimal(128974848)),
        ("129M", Decimal(129000000)),
        ("1k", Decimal(1000)),
        ("1Ki", Decimal(1024)),
        ("1E", Decimal(10**18)),
        ("1Ei", Decimal(1 << 60)),
        ("100n", Decimal("0.0000001")),
        ("5u", Decimal("0.000005")),
        ("1e-3", Decimal("0.001")),
        ("1e+3", Decimal(1000)),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("+2", Decimal(2)),
        ("-2", Decimal(-2)),
        ("0", Decimal(0)),
        (" 2Gi ", Decimal(2 << 30)),
        (3, Decimal(3)),
        (0.25, Decimal("0.25")),
    ],
)
def test_parse_quantity(text: object, amount: Decimal) -> None:
    assert parse_quantity(text) == amount


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "1x",
        "1 Gi",
        "Gi",
        "1e",
        "1.2.3",
        "1Ki5",
        "--1",
        "1e1.5",
        "1gi",
        "1K",
        "inf",
        "NaN",
        "1e" + "9" * 5000,
        "1e99999999999999999999",
        True,
        None,
        [],
        {"cpu": 1},
        float("inf"),
        float("nan"),
    ],
)
def test_parse_quantity_refuses_what_is_no_quantity(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_a_malformed_request_of_the_sandbox_fails_the_resource_predicate() -> None:
    """No crash: every Pool is rejected by resource, and the reason names the bad value."""
    sandbox = batch_sandbox(template(container("nginx", {"cpu": "lots"})))
    result = choose_pool(sandbox, [pool("pool-a", needs({"cpu": "4"}))])
    assert isinstance(result, PoolAssignFailed)
    assert result.rejected == (
        (
            "pool-a",
            "resource: the BatchSandbox's container main requests cpu 'lots', "
            "which is not a quantity",
        ),
    )


def test_a_malformed_request_of_a_pool_rejects_only_that_pool() -> None:
    sandbox = batch_sandbox(needs({"cpu": "1"}))
    pools = [pool("pool-a", needs({"cpu": "1 core"})), pool("pool-b", needs({"cpu": "1"}))]
    assert choose_pool(sandbox, pools) == PoolAssigned("pool-b", 0.0)
    misfit = resource_misfit(needs({"cpu": "1"}), pools[0])
    assert misfit == ("the Pool's container main requests cpu '1 core', which is not a quantity")
