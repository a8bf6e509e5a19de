"""A failed action's line, written by the runtime and read back by planners
(services/runtime/reconcile/failures.py)."""

from __future__ import annotations

from events.envelope import ObjectKey
from services.runtime.kube import KubeError
from services.runtime.reconcile.failures import describe_failure, failed_write

POD = ObjectKey("Pod", "default", "p-7xk2f")


def test_a_refused_write_reads_back_with_the_server_s_reason_code_and_words() -> None:
    refusal = KubeError(
        422, "Invalid", 'Pod "p-7xk2f" is invalid: spec.containers[0].image: Required value'
    )
    failed = failed_write(describe_failure("create", POD, str(refusal)))
    assert failed is not None
    assert (failed.verb, failed.target, failed.reason, failed.code) == (
        "create",
        POD,
        "Invalid",
        422,
    )
    assert failed.refused
    assert failed.anonymous() == "Pod is invalid: spec.containers[0].image: Required value"


def test_a_failure_without_an_answer_is_not_a_refusal() -> None:
    timeout = KubeError(0, "Timeout", "no answer within 10s")
    failed = failed_write(describe_failure("patch", POD, str(timeout)))
    assert failed is not None and not failed.refused and failed.code is None
    busy = failed_write(describe_failure("patch", POD, str(KubeError(503, "ServiceUnavailable"))))
    assert busy is not None and busy.code == 503 and not busy.refused
    for passing in (408, 409, 429):
        again = failed_write(describe_failure("create", POD, str(KubeError(passing, "Again"))))
        assert again is not None and again.code == passing and not again.refused
    other = failed_write(describe_failure("take", POD, "queue q answered 409 Conflict"))
    assert other is not None and other.error == "queue q answered 409 Conflict"
    assert other.reason is None


def test_a_cluster_scoped_target_and_lines_that_are_not_a_failed_action() -> None:
    namespace = ObjectKey("Namespace", "", "team-a")
    failed = failed_write(describe_failure("delete", namespace, str(KubeError(403, "Forbidden"))))
    assert failed is not None and failed.target == namespace and failed.refused
    assert failed_write(None) is None
    assert failed_write("keeping the memo of Pod/default/p on the bus: TimeoutError()") is None
    assert failed_write("create nothing-here: oops") is None
