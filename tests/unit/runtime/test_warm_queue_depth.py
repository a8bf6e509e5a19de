"""The warm-queue depth gauge's computation (services/pool/core/depths.py): the warm stream's
subject counts summed per queue, and every pool the pool worker knows reported, 0 if empty."""

from __future__ import annotations

from typing import Any

from api.keys import name_hash
from events.subjects import warm_subject
from services.pool.core.depths import warm_queue_depths
from services.pool.worker import WARM_QUEUE_DEPTH, pool_worker


def pool(name: str, template: str | None, namespace: str = "default") -> dict[str, Any]:
    spec = {"replicas": 2, **({"sandboxTemplateRef": {"name": template}} if template else {})}
    return {
        "kind": "SandboxWarmPool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def test_each_queue_s_depth_is_the_sum_over_its_nodes_and_sandboxes() -> None:
    python = name_hash("python")
    counts = {
        warm_subject("default", python, "p", "node-a", "p-1"): 1,
        warm_subject("default", python, "p", "node-b", "p-2"): 1,
        warm_subject("default", python, "p", "", "p-3"): 1,
        warm_subject("team", python, "p", "node-a", "p-9"): 1,
        warm_subject("default", python, "", "", "orphan"): 1,
    }
    assert warm_queue_depths(counts, []) == {
        ("default", python, "p"): 3,
        ("team", python, "p"): 1,
        ("default", python, ""): 1,
    }


def test_a_pool_with_an_empty_queue_reports_zero() -> None:
    depths = warm_queue_depths({}, [pool("p", "python"), pool("q", "go", namespace="team")])
    assert depths == {("default", name_hash("python"), "p"): 0, ("team", name_hash("go"), "q"): 0}


def test_a_pool_without_a_template_has_no_queue_and_strange_subjects_are_no_queue_s() -> None:
    counts = {"sandbus.warm.too.short": 4, warm_subject("default", "h", "p", "", "s"): 1}
    assert warm_queue_depths(counts, [pool("p", None), {"metadata": {}}]) == {
        ("default", "h", "p"): 1
    }


def test_the_pool_worker_declares_the_gauge_by_its_labels() -> None:
    (gauge,) = pool_worker().gauges
    assert (gauge.name, gauge.labels) == (WARM_QUEUE_DEPTH, ("namespace", "template_hash", "pool"))
