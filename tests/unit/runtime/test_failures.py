"""A failed action's line, written by the runtime and read back by planners
(services/runtime/reconcile/failures.py), which of them a planner reports, and the runtime's
account of since when a key's passes have failed (services/runtime/reconcile/memory.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

from events.envelope import ObjectKey
from services.runtime.kube import KubeError
from services.runtime.reconcile.definition import WorkerDefinition
from services.runtime.reconcile.failures import describe_failure, failed_write, reportable
from services.runtime.reconcile.memory import KeyMemory, MemoStore
from services.runtime.reconcile.serving import WorkerService, _worker_settings

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


# --- which failures a planner reports ---------------------------------------------------------

REFUSED = describe_failure("create", POD, str(KubeError(422, "Invalid", "spec: Required value")))
BROKEN = describe_failure("create", POD, str(KubeError(500, "InternalError", "etcd is unhappy")))
SILENT = describe_failure("create", POD, str(KubeError(0, "Timeout", "no answer within 10s")))


def test_a_refusal_is_reportable_at_once_a_passing_failure_once_it_persists() -> None:
    refused = reportable(REFUSED, persists=False)
    assert refused is not None and refused.refused and refused.code == 422
    assert reportable(REFUSED, persists=True) == refused
    for passing in (BROKEN, SILENT):
        assert reportable(passing, persists=False) is None, passing
        failed = reportable(passing, persists=True)
        assert failed is not None and not failed.refused and failed == failed_write(passing)
    persisting = reportable(BROKEN, persists=True)
    assert persisting is not None and persisting.message == "etcd is unhappy"


def test_nothing_to_report_without_a_failed_action() -> None:
    for line in (None, "", "keeping the memo of Pod/default/p on the bus: TimeoutError()"):
        assert reportable(line, persists=True) is None
        assert reportable(line, persists=False) is None


# --- since when a key's passes have failed (services/runtime/reconcile/memory.py) ------------

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
MINUTE = timedelta(seconds=60)


def memory() -> KeyMemory:
    return KeyMemory(cast(MemoStore, None), ack_timeout=1.0)


def test_failures_persist_once_the_passes_have_failed_in_a_row_for_the_delay() -> None:
    remembered = memory()
    assert not remembered.failure_persists(POD, T0, MINUTE), "never failed"
    remembered.passed(POD, wrote=True, error=BROKEN, now=T0)
    assert remembered.last_error(POD) == BROKEN
    assert not remembered.failure_persists(POD, T0 + timedelta(seconds=59), MINUTE)
    # Later failures keep the first one's time: it is the run that counts.
    remembered.passed(POD, wrote=True, error=BROKEN, now=T0 + timedelta(seconds=30))
    remembered.passed(POD, wrote=True, error=REFUSED, now=T0 + timedelta(seconds=50))
    assert remembered.failure_persists(POD, T0 + MINUTE, MINUTE)
    assert not remembered.failure_persists(ObjectKey("Pod", "default", "other"), T0, MINUTE)
    assert remembered.failure_persists(POD, T0, timedelta(0)), "no delay: at once"


def test_a_pass_without_an_error_ends_the_run_and_the_next_failure_starts_anew() -> None:
    remembered = memory()
    remembered.passed(POD, wrote=True, error=BROKEN, now=T0)
    remembered.passed(POD, wrote=False, error=None, now=T0 + MINUTE)
    assert remembered.last_error(POD) is None
    assert not remembered.failure_persists(POD, T0 + 2 * MINUTE, MINUTE)
    remembered.passed(POD, wrote=True, error=BROKEN, now=T0 + 2 * MINUTE)
    assert not remembered.failure_persists(POD, T0 + 2 * MINUTE + MINUTE / 2, MINUTE)
    assert remembered.failure_persists(POD, T0 + 3 * MINUTE, MINUTE)
    remembered.passed(POD, wrote=False, error=None, now=T0 + 3 * MINUTE)
    assert not remembered.failure_persists(POD, T0 + 9 * MINUTE, MINUTE)
    assert POD not in remembered._passes, "a key with nothing to remember is forgotten"


def test_the_delay_is_a_setting_of_every_worker() -> None:
    service = WorkerService(
        WorkerDefinition(name="toy", reconcilers=(), watched_kinds=(), wakes=lambda *_: ()),
        field_manager="toy",
    )
    assert _worker_settings(service, {}).report_failures_after == 60.0
    shrunk = _worker_settings(service, {"SANDBUS_REPORT_FAILURES_AFTER": "1.5"})
    assert shrunk.report_failures_after == 1.5
    both = _worker_settings(
        service, {"SANDBUS_REPORT_FAILURES_AFTER": "0", "SANDBUS_TOY_CONCURRENCY": "3"}
    )
    assert (both.report_failures_after, both.concurrency) == (0.0, 3)
