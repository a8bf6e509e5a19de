"""The chaos soak's invariant checker (bench/soak_check.py): a healthy snapshot passes every
check, and each check catches the violation it is for (a checker that cannot fail proves
nothing); the event log's rules allow what a relist does and nothing more."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Sequence
from typing import Any

from api.keys import LABEL_SANDBOX_NAME_HASH, LABEL_SANDBOX_TEMPLATE_REF_HASH, name_hash
from api.keys import LABEL_WARM_POOL_SANDBOX as POOL_LABEL
from api.objects import Json
from api.opensandbox import ANNOTATION_ALLOC_RELEASE, ANNOTATION_ALLOC_STATUS, LABEL_POOL_REVISION
from devtools.cluster.storage.store import Store
from services.cli.bench import bench_dir

sys.path.insert(0, str(bench_dir()))
try:
    import soak_check as check
finally:
    sys.path.remove(str(bench_dir()))

NS = "default"
CLAIMS = "extensions.agents.x-k8s.io/v1beta1"
OPEN = "sandbox.opensandbox.io/v1alpha1"


# --- small builders --------------------------------------------------------------------------


def obj(kind: str, name: str, uid: str = "", **metadata: Any) -> Json:
    return {"kind": kind, "metadata": {"name": name, "namespace": NS, "uid": uid, **metadata}}


def controller(api_version: str, kind: str, name: str, uid: str) -> list[Json]:
    reference = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}
    return [{**reference, "controller": True}]


def ready(status: str = "True", reason: str = "DependenciesReady", message: str = "") -> Json:
    return {
        "conditions": [{"type": "Ready", "status": status, "reason": reason, "message": message}]
    }


def claim(name: str, sandbox: str | None) -> Json:
    body = obj("SandboxClaim", name, f"{name}-uid")
    body["status"] = {**ready(), **({"sandbox": {"name": sandbox}} if sandbox else {})}
    return body


def claims_sandbox(name: str, owner: str) -> Json:
    refs = controller(CLAIMS, "SandboxClaim", owner, f"{owner}-uid")
    return {**obj("Sandbox", name, f"{name}-uid", ownerReferences=refs), "status": ready()}


def member(name: str, pool: str = "wp") -> Json:
    labels = {POOL_LABEL: name_hash(pool), LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tpl")}
    refs = controller(CLAIMS, "SandboxWarmPool", pool, f"{pool}-uid")
    body = obj("Sandbox", name, f"{name}-uid", labels=labels, ownerReferences=refs)
    return {**body, "status": ready()}


def pool_pod(name: str) -> Json:
    labels = {LABEL_POOL_REVISION: "r1"}
    refs = controller(OPEN, "Pool", "open", "open-uid")
    body = obj("Pod", name, f"{name}-uid", labels=labels, ownerReferences=refs)
    status = {"phase": "Running", "podIP": "10.0.0.1", **ready()}
    return {**body, "spec": {"nodeName": "node-1"}, "status": status}


def batch(name: str, pods: Sequence[str], *, release: Sequence[str] = ()) -> Json:
    annotations = {ANNOTATION_ALLOC_STATUS: json.dumps({"pods": list(pods)})}
    if release:
        annotations[ANNOTATION_ALLOC_RELEASE] = json.dumps({"pods": list(release)})
    body = obj("BatchSandbox", name, f"{name}-uid", annotations=annotations, generation=1)
    body["spec"] = {"replicas": len(pods), "poolRef": "open"}
    body["status"] = {"replicas": len(pods), "allocated": len(pods), "ready": len(pods)}
    body["status"]["phase"] = "Succeed" if pods else "Pending"
    return body


def healthy() -> Any:
    """One of everything, converged: a claim bound to its Sandbox, a full warm pool and its
    queue, a Pool of three Pods of which one is a BatchSandbox's."""
    pool = obj("SandboxWarmPool", "wp", "wp-uid")
    pool["spec"] = {"replicas": 2, "sandboxTemplateRef": {"name": "tpl"}}
    pool["status"] = {"replicas": 2, "readyReplicas": 2}
    open_pool = obj("Pool", "open", "open-uid")
    open_pool["spec"] = {"capacitySpec": {"poolMax": 3}}
    open_pool["status"] = {"revision": "r1", "total": 3, "allocated": 1, "available": 2}
    open_pool["status"]["updated"] = 3
    ledger = {"pods": {"open-1": {"sandbox": "b1", "uid": "b1-uid"}}, "nextPod": 3}
    return check.Snapshot(
        claims=[claim("c1", "s1")],
        sandboxes=[claims_sandbox("s1", "c1"), member("wp-1"), member("wp-2")],
        warm_pools=[pool],
        templates=[obj("SandboxTemplate", "tpl")],
        pods=[pool_pod("open-1"), pool_pod("open-2"), pool_pod("open-3")],
        pools=[open_pool],
        batch_sandboxes=[batch("b1", ["open-1"])],
        warm_entries={(NS, "wp"): {"wp-1", "wp-2"}},
        pool_ledgers={(NS, "open"): ledger},
    )


def found(violations: Sequence[Any]) -> set[str]:
    return {v.invariant for v in violations}


def named(snapshot: Any, kind: str, name: str) -> Json:
    field = {
        "SandboxClaim": snapshot.claims,
        "Sandbox": snapshot.sandboxes,
        "SandboxWarmPool": snapshot.warm_pools,
        "Pool": snapshot.pools,
        "BatchSandbox": snapshot.batch_sandboxes,
        "Pod": snapshot.pods,
    }[kind]
    return next(o for o in field if o["metadata"]["name"] == name)


# --- what holds at every moment --------------------------------------------------------------


def test_a_healthy_snapshot_passes_every_check() -> None:
    snapshot = healthy()
    assert check.always(snapshot) == []
    assert check.when_quiet(snapshot) == []


def test_two_claims_naming_one_sandbox() -> None:
    snapshot = healthy()
    snapshot.claims.append(claim("c2", "s1"))
    [violation] = [v for v in check.always(snapshot) if v.invariant == "sandbox-bound-twice"]
    assert violation.objects == (
        "Sandbox/default/s1",
        *(f"SandboxClaim/default/c{i}" for i in (1, 2)),
    )


def test_a_claim_controlling_two_sandboxes_unless_one_is_going() -> None:
    snapshot = healthy()
    snapshot.sandboxes.append(claims_sandbox("s2", "c1"))
    assert "claim-controls-two" in found(check.always(snapshot))
    named(snapshot, "Sandbox", "s2")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert check.always(snapshot) == []


def test_a_claim_naming_a_sandbox_it_does_not_control() -> None:
    snapshot = healthy()
    snapshot.claims.append(claim("c2", "wp-1"))
    assert found(check.always(snapshot)) == {"claim-binding-not-controlled"}


def test_a_claim_naming_a_sandbox_gone_is_transient_but_not_quiet() -> None:
    snapshot = healthy()
    snapshot.sandboxes.remove(named(snapshot, "Sandbox", "s1"))
    assert check.always(snapshot) == []
    assert "claim-bound-to-missing-sandbox" in found(check.when_quiet(snapshot))


def test_a_pod_in_use_by_two_batch_sandboxes() -> None:
    snapshot = healthy()
    snapshot.batch_sandboxes.append(batch("b2", ["open-1"]))
    [violation] = check.always(snapshot)
    assert violation.invariant == "pod-allocated-twice"
    assert violation.objects[0] == "Pod/default/open-1"


def test_a_pod_asked_back_may_be_listed_by_its_next_holder() -> None:
    """The Pool writes the new holder's alloc-status and the old one's alloc-released in two
    patches; the old one asked for the release first (alloc-release)."""
    snapshot = healthy()
    snapshot.batch_sandboxes[0] = batch("b1", ["open-1"], release=["open-1"])
    snapshot.batch_sandboxes.append(batch("b2", ["open-1"]))
    assert check.always(snapshot) == []


def test_a_malformed_allocation_annotation() -> None:
    snapshot = healthy()
    named(snapshot, "BatchSandbox", "b1")["metadata"]["annotations"][ANNOTATION_ALLOC_STATUS] = "["
    assert "allocation-annotation-malformed" in found(check.always(snapshot))


# --- what holds once quiet -------------------------------------------------------------------


def test_a_claim_not_ready_must_say_why() -> None:
    snapshot = healthy()
    snapshot.claims.append(obj("SandboxClaim", "c2", "c2-uid"))
    snapshot.claims[-1]["status"] = ready("False", reason="", message="")
    assert found(check.when_quiet(snapshot)) == {"claim-not-ready"}
    snapshot.claims[-1]["status"] = ready("False", "WarmPoolNotFound", "no pool named x")
    assert check.when_quiet(snapshot) == []


def test_a_sandbox_not_ready_unless_suspended() -> None:
    snapshot = healthy()
    sandbox = named(snapshot, "Sandbox", "s1")
    sandbox["status"] = ready("False", "DependenciesNotReady", "Pod is Pending")
    assert found(check.when_quiet(snapshot)) == {"sandbox-not-ready"}
    sandbox["spec"] = {"operatingMode": "Suspended"}
    assert found(check.when_quiet(snapshot)) == {"sandbox-not-suspended"}
    sandbox["status"]["conditions"].append({"type": "Suspended", "status": "True"})
    assert check.when_quiet(snapshot) == []


def test_a_warm_queue_missing_an_adoptable_member() -> None:
    snapshot = healthy()
    snapshot.warm_entries[(NS, "wp")] = {"wp-1"}
    [violation] = check.when_quiet(snapshot)
    assert violation.invariant == "warm-entry-missing"
    assert "Sandbox/default/wp-2" in violation.objects


def test_a_warm_queue_holding_a_claimed_sandbox() -> None:
    snapshot = healthy()
    adopted = named(snapshot, "Sandbox", "wp-2")
    del adopted["metadata"]["labels"][POOL_LABEL]
    adopted["metadata"]["ownerReferences"] = controller(CLAIMS, "SandboxClaim", "c2", "c2-uid")
    snapshot.claims.append(claim("c2", "wp-2"))
    stale = [v for v in check.when_quiet(snapshot) if v.invariant == "warm-entry-stale"]
    assert [v.detail for v in stale] == [
        "pool wp's warm queue holds Sandbox wp-2, which is a claim's"
    ]
    # And the pool, one member short, has not refilled.
    assert "warm-pool-members" in found(check.when_quiet(snapshot))


def test_a_warm_queue_of_a_pool_gone_is_empty() -> None:
    snapshot = healthy()
    snapshot.warm_entries[(NS, "gone")] = {"wp-1"}
    assert found(check.when_quiet(snapshot)) == {"warm-entry-stale"}


def test_a_warm_pool_whose_status_is_off() -> None:
    snapshot = healthy()
    named(snapshot, "SandboxWarmPool", "wp")["status"]["readyReplicas"] = 1
    assert found(check.when_quiet(snapshot)) == {"warm-pool-status"}


def test_a_pool_status_off_by_one() -> None:
    snapshot = healthy()
    named(snapshot, "Pool", "open")["status"]["available"] = 3
    [violation] = check.when_quiet(snapshot)
    assert violation.invariant == "open-pool-status"
    assert "available 3 (expected 2)" in violation.detail


def test_a_pool_counts_only_its_live_pods() -> None:
    snapshot = healthy()
    named(snapshot, "Pod", "open-3")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert found(check.when_quiet(snapshot)) == {"open-pool-status", "stuck-deleting"}


def test_a_ledger_that_disagrees_with_the_annotations() -> None:
    snapshot = healthy()
    snapshot.pool_ledgers[(NS, "open")] = {"pods": {"open-2": {"sandbox": "b1", "uid": "b1-uid"}}}
    problems = [
        v for v in check.when_quiet(snapshot) if v.invariant == "open-pool-ledger-disagrees"
    ]
    assert {v.objects[1] for v in problems} == {"Pod/default/open-1", "Pod/default/open-2"}


def test_a_pool_with_pods_and_no_ledger() -> None:
    snapshot = healthy()
    snapshot.pool_ledgers[(NS, "open")] = None
    assert found(check.when_quiet(snapshot)) == {"open-pool-ledger-missing"}


def test_a_batch_sandbox_short_of_pods_unless_its_pool_is_full() -> None:
    snapshot = healthy()
    short = named(snapshot, "BatchSandbox", "b1")
    short["spec"]["replicas"] = 2
    assert found(check.when_quiet(snapshot)) == {"batch-sandbox-short"}
    # At poolMax with no free Pod: it waits, and says so.
    snapshot.batch_sandboxes.append(batch("b2", ["open-2", "open-3"]))
    snapshot.pool_ledgers[(NS, "open")]["pods"].update(
        {pod: {"sandbox": "b2", "uid": "b2-uid"} for pod in ("open-2", "open-3")}
    )
    named(snapshot, "Pool", "open")["status"].update(allocated=3, available=0)
    assert found(check.when_quiet(snapshot)) == {"batch-sandbox-short"}
    condition = {"type": "PoolAllocationPending", "status": "True", "reason": "x", "message": "y"}
    short["status"]["conditions"] = [condition]
    assert check.when_quiet(snapshot) == []


def test_a_batch_sandbox_whose_status_is_off_or_whose_pod_is_not_ready() -> None:
    snapshot = healthy()
    named(snapshot, "BatchSandbox", "b1")["status"]["ready"] = 0
    assert found(check.when_quiet(snapshot)) == {"batch-sandbox-status"}
    named(snapshot, "Pod", "open-1")["status"]["phase"] = "Pending"
    assert found(check.when_quiet(snapshot)) == {"batch-sandbox-not-ready"}


def test_a_batch_sandbox_from_a_template_counts_the_pods_it_controls() -> None:
    snapshot = healthy()
    own = obj("BatchSandbox", "t1", "t1-uid")
    own["spec"] = {"replicas": 1, "template": {"spec": {}}}
    own["status"] = {"replicas": 1, "allocated": 1, "ready": 1, "phase": "Succeed"}
    snapshot.batch_sandboxes.append(own)
    assert found(check.when_quiet(snapshot)) == {"batch-sandbox-short", "batch-sandbox-status"}
    pod = pool_pod("t1-0")
    pod["metadata"]["ownerReferences"] = controller(OPEN, "BatchSandbox", "t1", "t1-uid")
    snapshot.pods.append(pod)
    assert check.when_quiet(snapshot) == []


def test_a_ready_claim_that_names_no_sandbox_and_a_member_its_pool_does_not_own() -> None:
    snapshot = healthy()
    del snapshot.claims[0]["status"]["sandbox"]
    orphan = named(snapshot, "Sandbox", "wp-2")
    orphan["metadata"]["ownerReferences"] = []
    snapshot.warm_entries[(NS, "wp")] = {"wp-1"}  # an orphan is not adoptable
    assert found(check.when_quiet(snapshot)) == {"claim-ready-unbound", "warm-member-not-owned"}


# --- the event log against the commits -------------------------------------------------------


def commit(rv: int, type: str = "MODIFIED", *, uid: str = "u1", selected: bool = True) -> Any:
    return check.Commit("Pod", NS, "p", uid, str(rv), type, selected, float(rv))


def event(seq: int, rv: int, change: str, *, uid: str = "u1", synthetic: bool = False) -> Any:
    ident = f"{uid}:{rv}:{change}"
    return check.LoggedChange(seq, ident, "Pod", NS, "p", uid, str(rv), change, synthetic)


LIFE = [commit(1, "ADDED"), commit(2), commit(3, "DELETED")]


def test_a_log_of_every_commit_in_order() -> None:
    logged = [event(1, 1, "added"), event(2, 2, "modified"), event(3, 3, "deleted")]
    assert check.log_violations(LIFE, logged) == ([], 0)


def test_a_duplicate_event() -> None:
    logged = [event(1, 1, "added"), event(2, 2, "modified"), event(3, 2, "modified")]
    violations, _ = check.log_violations(LIFE[:2], logged)
    assert found(violations) == {"log-event-twice"}


def test_events_out_of_order() -> None:
    commits = [commit(1, "ADDED"), commit(2), commit(3)]
    logged = [event(1, 1, "added"), event(2, 3, "modified"), event(3, 2, "modified")]
    violations, _ = check.log_violations(commits, logged)
    assert "log-event-out-of-order" in found(violations)


def test_a_missing_final_state() -> None:
    violations, _ = check.log_violations(LIFE[:2], [event(1, 1, "added")])
    assert found(violations) == {"log-missing-final-state"}
    violations, _ = check.log_violations(LIFE, [event(1, 1, "added")])
    assert found(violations) == {"log-missing-final-state"}


def test_a_relist_collapses_commits_and_is_counted() -> None:
    commits = [commit(1, "ADDED"), commit(2), commit(3)]
    assert check.log_violations(commits, [event(1, 1, "added"), event(2, 3, "modified")]) == ([], 1)
    # A relist reports an object it never saw as added, in whatever state it is.
    assert check.log_violations(commits, [event(1, 3, "added")]) == ([], 2)
    # A deletion missed comes as a synthetic deletion of the state last published.
    logged = [event(1, 1, "added"), event(2, 1, "deleted", synthetic=True)]
    assert check.log_violations(LIFE, logged) == ([], 2)


def test_a_synthetic_event_that_is_no_deletion() -> None:
    logged = [event(1, 1, "added"), event(2, 2, "modified", synthetic=True)]
    violations, _ = check.log_violations(LIFE[:2], logged)
    assert "log-synthetic-not-deletion" in found(violations)


def test_a_synthetic_deletion_of_a_state_never_published() -> None:
    logged = [event(1, 1, "added"), event(2, 2, "deleted", synthetic=True)]
    violations, _ = check.log_violations(LIFE, logged)
    assert found(violations) == {"log-synthetic-deletion-not-of-last-state"}


def test_an_event_of_no_commit_or_of_the_wrong_change() -> None:
    violations, _ = check.log_violations(LIFE[:1], [event(1, 1, "added"), event(2, 7, "modified")])
    assert "log-event-not-a-commit" in found(violations)
    violations, _ = check.log_violations(LIFE[:2], [event(1, 1, "added"), event(2, 2, "added")])
    assert "log-change-mismatch" in found(violations)


def test_leaving_the_selection_is_a_deletion_and_never_selected_is_nothing() -> None:
    commits = [commit(1, "ADDED"), commit(2, selected=False)]
    assert check.log_violations(commits, [event(1, 1, "added"), event(2, 2, "deleted")]) == ([], 0)
    violations, _ = check.log_violations(commits, [event(1, 1, "added")])
    assert found(violations) == {"log-missing-final-state"}
    never = [commit(1, "ADDED", selected=False)]
    violations, _ = check.log_violations(never, [event(1, 1, "added")])
    assert found(violations) == {"log-event-of-unselected-object"}


def test_the_commit_log_records_the_watched_kinds_as_committed() -> None:
    store = Store()
    log = check.CommitLog()
    store.subscribe(None, log.sink)
    pod = obj("Pod", "p", "u1", labels={LABEL_SANDBOX_NAME_HASH: name_hash("s")})
    store.create("pods", copy.deepcopy(pod))
    del pod["metadata"]["labels"]  # no mark of ours left: the watcher lets go of it
    store.update("pods", copy.deepcopy(pod))
    store.delete("pods", NS, "p")
    store.create("leases.coordination.k8s.io", obj("Lease", "l", "u2"))  # not watched
    store.create("sandboxes.agents.x-k8s.io", obj("Sandbox", "s", "u3"))

    assert [(c.kind, c.rv, c.type, c.selected) for c in log.commits] == [
        ("Pod", "1", "ADDED", True),
        ("Pod", "2", "MODIFIED", False),
        ("Pod", "3", "DELETED", False),
        ("Sandbox", "5", "ADDED", True),
    ]
    logged = [event(1, 1, "added"), event(2, 2, "deleted")]
    sandbox_added = check.LoggedChange(
        3, "u3:5:added", "Sandbox", NS, "s", "u3", "5", "added", False
    )
    assert check.log_violations(log.commits, [*logged, sandbox_added]) == ([], 0)


def marked(kind: str, name: str, at: float, controller: str = "") -> Any:
    """A commit that marks ``kind/name`` for deletion at ``at``."""
    return check.Commit(
        kind,
        NS,
        name,
        f"uid-{name}",
        str(int(at)),
        "MODIFIED",
        True,
        at,
        controller=controller,
        deleting=True,
    )


def test_a_claimed_sandbox_deleted_before_its_claim_is_taken_from_its_user() -> None:
    taken = [marked("Sandbox", "s1", 1.0, "SandboxClaim/c1")]
    assert found(check.sandboxes_taken_from_claims(taken)) == {"claimed-sandbox-deleted"}
    after_its_claim = [
        marked("SandboxClaim", "c1", 1.0),
        marked("Sandbox", "s1", 2.0, "SandboxClaim/c1"),
    ]
    assert check.sandboxes_taken_from_claims(after_its_claim) == []
    assert check.sandboxes_taken_from_claims(taken, spared=[(NS, "c1")]) == [], "it expired"
    unclaimed = [marked("Sandbox", "s2", 1.0, "SandboxWarmPool/pool")]
    assert check.sandboxes_taken_from_claims(unclaimed) == []


def test_a_pause_ends_paused_and_a_ready_sandbox_succeeds() -> None:
    snapshot = healthy()
    (sandbox, *_) = snapshot.batch_sandboxes
    sandbox["spec"]["pause"] = True
    sandbox["status"]["phase"] = "Pausing"
    assert found(check.when_quiet(snapshot)) == {"batch-sandbox-phase"}, "stuck halfway"
    sandbox["status"]["phase"] = "Paused"
    assert check.when_quiet(snapshot) == []
    sandbox["status"]["phase"] = "Succeed"
    refused = {"type": "PauseFailed", "status": "True", "message": "replicas is not 1"}
    sandbox["status"]["conditions"] = [refused]
    assert check.when_quiet(snapshot) == [], "a pause refused, saying why"
    del sandbox["status"]["conditions"]
    sandbox["spec"]["pause"] = False
    sandbox["status"]["phase"] = "Resuming"
    assert found(check.when_quiet(snapshot)) == {"batch-sandbox-phase"}, "its Pod is Ready"
