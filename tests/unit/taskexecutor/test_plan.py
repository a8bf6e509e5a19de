"""The executor's decisions over its tasks (services/taskexecutor/core/plan.py), case for case
as upstream's te/manager/task_manager_test.go covers the task manager (docs/opensandbox.md
§7.3): create, duplicate, max 1 active, delete, sync, the recovery drop and keep rules, async
stop, timeout handling and terminal states. Get and list, which only read the table, are
covered through the shell in test_executor.py."""

from __future__ import annotations

import pytest

from services.taskexecutor.core.plan import (
    MAX_ACTIVE_TASKS,
    SUPERVISOR_MARGIN,
    UNBOUNDED_HOOK_ALLOWANCE,
    Step,
    admission_problem,
    is_active,
    keep_after_restart,
    marked_for_deletion,
    new_record,
    plan_reconcile,
    plan_sync,
    stop_deadline,
)
from services.taskexecutor.core.records import State, Status, TaskRecord
from tests.unit.taskexecutor.world import (
    T0,
    at,
    hook,
    last_status,
    record,
    spec,
    status,
    table,
    with_status,
)

# --- create, duplicate, max 1 active (upstream: Create, "duplicate", "max concurrent") ---------


def test_create_into_an_empty_executor_is_admitted_and_starts_pending() -> None:
    assert admission_problem({}, spec("a")) is None
    created = new_record(spec("a"), T0)
    assert created.created_at == T0
    assert created.status == Status(state=State.PENDING, reason="Pending")
    assert not created.deleting and not created.stopped_for_timeout


def test_create_of_a_container_task_is_failed_at_once() -> None:
    created = new_record(spec("c", container=True), T0)
    assert created.status is not None
    assert (created.status.state, created.status.reason) == (
        State.FAILED,
        "ContainerTaskNotSupported",
    )


def test_create_with_a_name_taken_is_refused_whatever_its_state() -> None:
    for state in State:
        problem = admission_problem(table(record(spec("a"), state)), spec("a"))
        assert problem == "task a already exists"
    assert admission_problem(table(record(spec("a"), deleting=True)), spec("a")) is not None


@pytest.mark.parametrize("state", [State.PENDING, State.RUNNING])
def test_at_most_one_active_task(state: State) -> None:
    assert MAX_ACTIVE_TASKS == 1
    problem = admission_problem(table(record(spec("a"), state)), spec("b"))
    assert problem == "task b: maximum concurrent tasks (1) reached, cannot create new task"


@pytest.mark.parametrize(
    "other",
    [
        record(spec("a"), State.RUNNING, deleting=True),
        record(spec("a"), State.TIMEOUT),
        record(spec("a"), State.SUCCEEDED),
        record(spec("a"), State.FAILED),
        record(spec("a"), State.NOT_FOUND),
    ],
    ids=["deleting", "timeout", "succeeded", "failed", "not-found"],
)
def test_deleting_timed_out_and_ended_tasks_do_not_count(other: TaskRecord) -> None:
    assert admission_problem(table(other), spec("b")) is None


def test_a_container_task_needs_no_slot() -> None:
    assert admission_problem(table(record(spec("a"))), spec("c", container=True)) is None


def test_is_active_reads_the_last_status_and_a_never_inspected_task_is_pending() -> None:
    assert is_active(record(state=None))
    assert not is_active(record(state=State.RUNNING, deleting=True))


# --- delete (upstream: Delete, soft delete) ---------------------------------------------------


def test_delete_marks_once_and_keeps_the_first_mark() -> None:
    marked = marked_for_deletion(record(), at(5))
    assert marked.deletion_timestamp == at(5)
    assert marked_for_deletion(marked, at(9)) is marked


# --- sync (upstream: Sync) --------------------------------------------------------------------


def test_sync_deletes_what_is_not_desired_and_creates_what_is_new() -> None:
    current = table(record(spec("old")))
    plan = plan_sync(current, [spec("new")])
    assert plan.delete == ("old",)
    assert [t.name for t in plan.create] == ["new"]  # "old" is deleting: "new" may start
    assert plan.refused == ()


def test_sync_never_updates_an_existing_task() -> None:
    current = table(record(spec("a", "sleep", "30")))
    plan = plan_sync(current, [spec("a", "echo", "changed")])
    assert plan.delete == () and plan.create == () and plan.refused == ()


def test_sync_with_nothing_desired_deletes_everything_not_deleting_yet() -> None:
    current = table(
        record(spec("a")), record(spec("b"), State.SUCCEEDED), record(spec("c"), deleting=True)
    )
    assert plan_sync(current, []).delete == ("a", "b")


def test_sync_does_not_bring_back_a_task_being_deleted() -> None:
    current = table(record(spec("a"), deleting=True))
    plan = plan_sync(current, [spec("a")])
    assert plan.create == () and plan.delete == ()


def test_sync_refuses_the_second_new_active_task_and_creates_the_first() -> None:
    plan = plan_sync({}, [spec("a"), spec("b"), spec("c", container=True)])
    assert [t.name for t in plan.create] == ["a", "c"]
    assert plan.refused == ("task b: maximum concurrent tasks (1) reached, cannot create new task",)


def test_sync_keeps_a_running_task_and_refuses_a_new_one_beside_it() -> None:
    plan = plan_sync(table(record(spec("a"))), [spec("a"), spec("b")])
    assert plan.create == () and plan.delete == ()
    assert len(plan.refused) == 1 and "task b" in plan.refused[0]


# --- reconcile: async stop, timeout handling, terminal states --------------------------------


def test_a_status_that_changed_is_persisted_and_an_unchanged_one_is_not() -> None:
    task = record(state=State.RUNNING, started_at=T0)
    done = status(State.SUCCEEDED, exit_code=0, reason="Succeeded")
    assert plan_reconcile(table(task), {"bs-0": done}, set()) == [
        Step("bs-0", record=with_status(task, done))
    ]
    assert plan_reconcile(table(task), {"bs-0": last_status(task)}, set()) == []


def test_a_task_not_inspected_is_left_alone() -> None:
    assert plan_reconcile(table(record()), {}, set()) == []


def test_a_deleting_running_task_is_stopped_once() -> None:
    task = record(deleting=True, started_at=T0)
    running = last_status(task)
    (only,) = plan_reconcile(table(task), {"bs-0": running}, set())
    assert only == Step("bs-0", stop=True)
    # The stop runs in the background; the next passes do not begin another one.
    assert plan_reconcile(table(task), {"bs-0": running}, {"bs-0"}) == []


@pytest.mark.parametrize("state", [State.SUCCEEDED, State.FAILED, State.NOT_FOUND, State.PENDING])
def test_a_deleting_task_that_ended_or_never_started_is_removed(state: State) -> None:
    task = record(deleting=True)
    assert plan_reconcile(table(task), {"bs-0": status(state)}, {"bs-0"}) == [
        Step("bs-0", remove=True)
    ]


def test_terminal_states_are_kept_while_not_deleting() -> None:
    for state in (State.SUCCEEDED, State.FAILED, State.NOT_FOUND):
        task = record(state=state)
        assert plan_reconcile(table(task), {"bs-0": status(state)}, set()) == []


def test_a_task_past_its_timeout_is_marked_then_stopped() -> None:
    task = record(spec(timeout=5))
    timeout = status(State.TIMEOUT, exit_code=137, reason="TaskTimeout", started_at=T0)
    (only,) = plan_reconcile(table(task), {"bs-0": timeout}, set())
    assert only.stop and not only.remove
    assert only.record is not None
    assert only.record.stopped_for_timeout
    assert only.record.status == timeout


def test_a_timeout_stop_under_way_is_not_begun_again() -> None:
    timeout = status(State.TIMEOUT, exit_code=137, reason="TaskTimeout", started_at=T0)
    task = with_status(record(spec(timeout=5), stopped_for_timeout=True), timeout)
    assert plan_reconcile(table(task), {"bs-0": timeout}, {"bs-0"}) == []


def test_a_deleting_task_past_its_timeout_is_stopped_for_the_deletion() -> None:
    timeout = status(State.TIMEOUT, exit_code=137, reason="TaskTimeout")
    task = with_status(record(spec(timeout=5), deleting=True), timeout)
    (only,) = plan_reconcile(table(task), {"bs-0": timeout}, set())
    assert only == Step("bs-0", stop=True)


def test_each_task_is_planned_on_its_own() -> None:
    ended = record(spec("a"), deleting=True)
    running = record(spec("b"), State.RUNNING)
    statuses = {"a": status(State.FAILED), "b": last_status(running)}
    steps = plan_reconcile(table(ended, running), statuses, set())
    assert steps == [Step("a", remove=True)]


# --- restart recovery (upstream: recovery drop and keep rules) --------------------------------

RECOVERY = [
    # (persisted, inspected now, kept)
    (State.PENDING, State.PENDING, False),
    (State.PENDING, State.FAILED, False),
    (State.PENDING, State.NOT_FOUND, False),
    (State.PENDING, State.RUNNING, True),
    (State.PENDING, State.SUCCEEDED, True),
    (State.RUNNING, State.PENDING, False),
    (State.RUNNING, State.FAILED, False),
    (State.RUNNING, State.NOT_FOUND, False),
    (State.RUNNING, State.RUNNING, True),
    (State.RUNNING, State.TIMEOUT, True),
    (State.RUNNING, State.SUCCEEDED, True),
    (State.SUCCEEDED, State.SUCCEEDED, True),
    (State.FAILED, State.FAILED, True),
    (State.TIMEOUT, State.FAILED, True),
    (State.NOT_FOUND, State.NOT_FOUND, True),
]


@pytest.mark.parametrize(("was", "now", "kept"), RECOVERY)
def test_recovery_drops_a_pending_or_running_task_that_did_not_survive(
    was: State, now: State, kept: bool
) -> None:
    assert keep_after_restart(record(state=was), status(now)) is kept


def test_recovery_treats_a_task_never_inspected_as_pending() -> None:
    assert not keep_after_restart(record(state=None), status(State.PENDING))
    assert keep_after_restart(record(state=None), status(State.RUNNING))


# --- stop deadline ---------------------------------------------------------------------------


def test_the_stop_deadline_leaves_the_post_stop_hook_its_time() -> None:
    grace = 10.0
    plain = spec().process
    with_hook = spec(post_stop=hook("save", timeout=7)).process
    unbounded = spec(post_stop=hook("save")).process
    assert stop_deadline(plain, grace) == grace + SUPERVISOR_MARGIN
    assert stop_deadline(with_hook, grace) == grace + 7 + SUPERVISOR_MARGIN
    assert stop_deadline(unbounded, grace) == grace + UNBOUNDED_HOOK_ALLOWANCE + SUPERVISOR_MARGIN
    assert stop_deadline(None, 0.0) == SUPERVISOR_MARGIN
