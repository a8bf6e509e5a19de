"""The Restart recycle strategy's state machine (services/pool/core/opensandbox/restart.py),
row by row of upstream's ``recycle/restart/restart_default_test.go`` and
``recycle/restart_test.go`` (docs/opensandbox.md §7.1), plus the Go wire formats the module
reproduces (durations, ``encoding/json`` decoding, RFC 3339 times)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from api.objects import Json
from api.opensandbox import ANNOTATION_RESTART_CONFIG, ANNOTATION_RESTART_RECORD, RestartRecord
from services.pool.core.opensandbox.restart import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_RESTART_COMMAND,
    DEFAULT_RETRY_INTERVAL,
    ContainerExec,
    RestartSettings,
    RestartState,
    RestartStep,
    build_restart_record,
    decide_restart,
    encode_restart_record,
    evaluate_restart,
    load_restart_record,
    parse_go_duration,
    parse_restart_config,
)
from tests.support.samples import stamp

NOW = datetime(2026, 5, 4, 10, 0, 0, tzinfo=UTC)
SANDBOX = "sbx1"
POOL: Json = {"metadata": {"name": "pool", "namespace": "default"}}


def status(name: str, container_id: str, state: str = "running") -> Json:
    return {"name": name, "containerID": container_id, "state": {state: {}}}


def running_pod(*container_ids: str, name: str = "pod1") -> Json:
    """upstream ``newRunningPod``: containers c0, c1... running under these ids."""
    return {
        "metadata": {"name": name, "namespace": "default"},
        "status": {
            "phase": "Running",
            "containerStatuses": [status(f"c{i}", cid) for i, cid in enumerate(container_ids)],
        },
    }


def with_record(pod: Json, **record: Any) -> Json:
    """upstream ``podWithRecord``: the pod carrying a restart record."""
    annotations = pod["metadata"].setdefault("annotations", {})
    annotations[ANNOTATION_RESTART_RECORD] = json.dumps(record)
    return pod


def with_annotation(pod: Json, value: str) -> Json:
    pod["metadata"].setdefault("annotations", {})[ANNOTATION_RESTART_RECORD] = value
    return pod


def pool_with_config(config: Any) -> Json:
    value = config if isinstance(config, str) else json.dumps(config)
    return {"metadata": {"name": "pool", "annotations": {ANNOTATION_RESTART_CONFIG: value}}}


def persisted(pod: Json, step: RestartStep) -> Json:
    """The pod after the shell merge-patched it with the step's record."""
    patch = step.record_patch()
    if patch is not None:
        pod["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
    return pod


# --- TestParseConfig -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param(None, RestartSettings(), id="NilAnnotations"),
        pytest.param({}, RestartSettings(), id="EmptyAnnotations"),
        pytest.param(
            {
                ANNOTATION_RESTART_CONFIG: '{"blacklist":["sidecar","init"],"retryInterval":"60s",'
                '"maxRetries":5,"restartCommand":["/sbin/init"]}'
            },
            RestartSettings(
                blacklist=frozenset({"sidecar", "init"}),
                retry_interval=timedelta(seconds=60),
                max_retries=5,
                restart_command=("/sbin/init",),
            ),
            id="ValidConfig",
        ),
        pytest.param(
            {ANNOTATION_RESTART_CONFIG: '{"blacklist":["sidecar"]}'},
            RestartSettings(blacklist=frozenset({"sidecar"})),
            id="PartialConfig_FallbackToDefaults",
        ),
        pytest.param(
            {ANNOTATION_RESTART_CONFIG: "{invalid json}"},
            RestartSettings(),
            id="InvalidJSON_FallbackToDefaults",
        ),
    ],
)
def test_parse_config(annotations: dict[str, str] | None, expected: RestartSettings) -> None:
    """TestParseConfig: nil, empty or invalid → defaults (30s, 3, ``kill 1``); a partial config
    is merged with the defaults."""
    assert parse_restart_config(annotations) == expected


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"retryInterval": "1m30s"}, RestartSettings(retry_interval=timedelta(seconds=90))),
        ({"retryInterval": "30"}, RestartSettings()),  # no unit: not a Go duration
        ({"retryInterval": ""}, RestartSettings()),
        ({"retryInterval": 30}, RestartSettings()),  # seconds as a number: wrong type
        ({"maxRetries": 0}, RestartSettings()),
        ({"maxRetries": -2}, RestartSettings()),
        ({"maxRetries": 2.5, "blacklist": ["s"]}, RestartSettings(blacklist=frozenset({"s"}))),
        ({"maxRetries": 1 << 31}, RestartSettings()),  # beyond int32
        ({"maxRetries": "5"}, RestartSettings()),
        ({"restartCommand": []}, RestartSettings()),
        ({"restartCommand": "kill 1"}, RestartSettings()),
        ({"restartCommand": ["kill", 9]}, RestartSettings(restart_command=("kill", ""))),
        (
            {"MaxRetries": 7, "RETRYINTERVAL": "2s"},
            RestartSettings(max_retries=7, retry_interval=timedelta(seconds=2)),
        ),
        ({"retryInterval": None, "blacklist": None}, RestartSettings()),
        ([1, 2], RestartSettings()),
        ("null", RestartSettings()),
    ],
)
def test_parse_config_reads_as_go_does(config: Any, expected: RestartSettings) -> None:
    """TestParseConfig, beyond its rows: ``json.Unmarshal`` into ``restartConfig`` skips a field
    of the wrong type and keeps the others, matches keys case-insensitively, and
    ``retryInterval`` is a Go duration string."""
    annotations = pool_with_config(config)["metadata"]["annotations"]
    assert parse_restart_config(annotations) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5s", timedelta(seconds=1.5)),
        ("500ms", timedelta(milliseconds=500)),
        ("2us", timedelta(microseconds=2)),
        ("2\u00b5s", timedelta(microseconds=2)),
        ("1500ns", timedelta(microseconds=1)),
        ("0", timedelta(0)),
        ("-2m", timedelta(minutes=-2)),
        ("+5s", timedelta(seconds=5)),
        (".5s", timedelta(seconds=0.5)),
        ("5.s", timedelta(seconds=5)),
        ("2562047h", timedelta(hours=2562047)),
        ("", None),
        ("30", None),
        ("0s0", None),
        (".s", None),
        ("1d", None),
        ("5 s", None),
        ("1S", None),
        ("-", None),
        ("2562048h", None),  # beyond 1<<63 - 1 nanoseconds
    ],
)
def test_go_durations(text: str, expected: timedelta | None) -> None:
    """``retryInterval`` parsed like Go's ``time.ParseDuration`` (restart_default.go:79)."""
    assert parse_go_duration(text) == expected


# --- TestInitInfo --------------------------------------------------------------------------


def two_running() -> Json:
    return {
        "status": {
            "containerStatuses": [
                status("main", "docker://abc123"),
                status("sidecar", "docker://def456"),
            ]
        }
    }


@pytest.mark.parametrize(
    ("settings", "pod", "sandbox", "containers"),
    [
        pytest.param(RestartSettings(), two_running(), "", ["main", "sidecar"], id="AllRunning"),
        pytest.param(
            RestartSettings(blacklist=frozenset({"sidecar"})),
            two_running(),
            "sbx1",
            ["main"],
            id="Blacklist_ExcludesSidecar",
        ),
        pytest.param(
            RestartSettings(),
            {
                "status": {
                    "containerStatuses": [
                        status("running", "docker://abc123"),
                        status("waiting", "docker://def456", "waiting"),
                        status("terminated", "docker://ghi789", "terminated"),
                    ]
                }
            },
            "",
            ["running"],
            id="OnlyRunningContainers",
        ),
    ],
)
def test_init_info(
    settings: RestartSettings, pod: Json, sandbox: str, containers: list[str]
) -> None:
    """TestInitInfo: the record holds the running containers only, minus the blacklist, each with
    its current containerID, under the sandbox's id."""
    record = build_restart_record(pod, sandbox, settings, NOW)
    assert record.id == sandbox
    assert sorted(record.containers) == containers
    ids = {s["name"]: s["containerID"] for s in pod["status"]["containerStatuses"]}
    assert record.containers == {name: ids[name] for name in containers}
    assert record.start_time == "2026-05-04T10:00:00Z"
    assert record.retry_count == 0 and record.last_retry_time is None


# --- TestEvalState -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statuses", "state"),
    [
        pytest.param(
            [status("main", "docker://new-id")],
            RestartState.SUCCEEDED,
            id="Succeeded_ContainerIDChanged",
        ),
        pytest.param(
            [status("main", "docker://old-id")],
            RestartState.RESTARTING,
            id="Restarting_SameContainerID",
        ),
        pytest.param(
            [status("main", "docker://new-id", "waiting")],
            RestartState.RESTARTING,
            id="Restarting_ContainerNotRunning",
        ),
        pytest.param([], RestartState.RESTARTING, id="Restarting_ContainerNotFound"),
    ],
)
def test_eval_state(statuses: list[Json], state: RestartState) -> None:
    """TestEvalState: Succeeded when the containerID changed and the container runs; Restarting
    when it is unchanged, not running, or missing."""
    record = RestartRecord(id="", start_time="", containers={"main": "docker://old-id"})
    pod = {"status": {"containerStatuses": statuses}}
    assert evaluate_restart(pod, record) is state


def test_eval_state_of_a_record_of_no_container() -> None:
    """TestEvalState's loop over no recorded container: nothing left to wait for."""
    record = RestartRecord(id="", start_time="", containers={})
    assert evaluate_restart(running_pod("docker://a"), record) is RestartState.SUCCEEDED


# --- TestLoadInfo --------------------------------------------------------------------------


def test_load_info() -> None:
    """TestLoadInfo: no annotation → nothing (upstream: an error); a valid one is parsed."""
    assert load_restart_record({"metadata": {"name": "pod1", "namespace": "default"}}) is None
    pod = with_record(
        running_pod(),
        id="sbx1",
        startTime="2026-01-01T00:00:00Z",
        containers={"main": "docker://abc123"},
    )
    assert load_restart_record(pod) == RestartRecord(
        id="sbx1", start_time="2026-01-01T00:00:00Z", containers={"main": "docker://abc123"}
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("{not json", None),
        ('["sbx1"]', None),
        ('{"id": "sbx1", "retryCount": "2"}', None),  # a field of the wrong type
        ('{"id": "sbx1", "retryCount": 1.0}', None),
        ('{"id": "sbx1", "containers": {"main": 3}}', None),
        ("null", RestartRecord(id="", start_time="", containers={})),
        ('{"id": "sbx1"}', RestartRecord(id="sbx1", start_time="", containers={})),
        (
            '{"ID": "sbx1", "containers": {"main": null}, "retrycount": 2, "extra": true}',
            RestartRecord(id="sbx1", start_time="", containers={"main": ""}, retry_count=2),
        ),
    ],
)
def test_load_info_reads_as_go_does(value: str, expected: RestartRecord | None) -> None:
    """TestLoadInfo, beyond its rows: ``json.Unmarshal`` into ``restartInfo``: a wrong type is an
    error (the record starts over), missing fields are zero, keys match case-insensitively."""
    assert load_restart_record(with_annotation(running_pod(), value)) == expected


def test_record_is_written_as_go_marshals_it() -> None:
    """``json.Marshal(restartInfo)``: declaration order, map keys sorted, empty
    ``lastRetryTime``/``retryCount`` omitted (``omitempty``)."""
    record = RestartRecord(id="s", start_time="t", containers={"b": "2", "a": "1"})
    assert encode_restart_record(record) == (
        '{"id":"s","startTime":"t","containers":{"a":"1","b":"2"}}'
    )
    retried = RestartRecord(
        id="s", start_time="t", containers={}, last_retry_time="u", retry_count=2
    )
    assert encode_restart_record(retried) == (
        '{"id":"s","startTime":"t","containers":{},"lastRetryTime":"u","retryCount":2}'
    )


# --- TestDefaultRestartCommand_SendsSIGTERM --------------------------------------------------


def test_default_restart_command_sends_sigterm() -> None:
    """TestDefaultRestartCommand_SendsSIGTERM: the default command is ``kill 1``, and it is what
    an attempt executes when the Pool configures none."""
    assert DEFAULT_RESTART_COMMAND == ("kill", "1")
    assert parse_restart_config(None).restart_command == ("kill", "1")
    step = decide_restart(running_pod("docker://old"), POOL, SANDBOX, NOW)
    assert step.execs == (ContainerExec("c0", ("kill", "1")),)


# --- TestTryRestart ------------------------------------------------------------------------


def record_of(**fields: Any) -> Json:
    return {"id": SANDBOX, "startTime": "2026-01-01T00:00:00Z", **fields}


@pytest.mark.parametrize(
    ("pod", "state", "execs"),
    [
        pytest.param(running_pod("docker://old"), RestartState.RESTARTING, 1, id="FirstCall"),
        pytest.param(
            {
                "metadata": {"name": "pod1", "namespace": "default"},
                "status": {"phase": "Pending"},
            },
            RestartState.POD_NOT_RUNNING,
            0,
            id="PodNotRunning",
        ),
        pytest.param(
            with_record(
                running_pod("docker://new"), **record_of(containers={"c0": "docker://old"})
            ),
            RestartState.SUCCEEDED,
            0,
            id="AlreadySucceeded_SkipsExec",
        ),
        pytest.param(
            with_record(
                running_pod("docker://old"),
                **record_of(containers={"c0": "docker://old"}, retryCount=DEFAULT_MAX_RETRIES),
            ),
            RestartState.FAILED,
            0,
            id="MaxRetriesExceeded_ReturnsFailed",
        ),
        pytest.param(
            with_record(
                running_pod("docker://old"),
                **record_of(containers={"c0": "docker://old"}, lastRetryTime=stamp(NOW)),
            ),
            RestartState.RESTARTING,
            0,
            id="RetryIntervalNotElapsed_SkipsExec",
        ),
        pytest.param(
            with_record(
                running_pod("docker://new"),
                **{**record_of(containers={"c0": "docker://old"}), "id": "other-sbx"},
            ),
            RestartState.RESTARTING,
            1,
            id="StaleRecord_DifferentID_ReinitializesAndExecs",
        ),
        pytest.param(
            with_record(
                running_pod("docker://old"),
                **record_of(
                    containers={"c0": "docker://old"},
                    retryCount=1,
                    lastRetryTime=stamp(NOW - 2 * DEFAULT_RETRY_INTERVAL),
                ),
            ),
            RestartState.RESTARTING,
            1,
            id="RetryIntervalElapsed_Retries",
        ),
    ],
)
def test_try_restart(pod: Json, state: RestartState, execs: int) -> None:
    """TestTryRestart: first call initialises and execs once; non-running Pod → error (here a
    state of its own); already succeeded → no exec; max retries → Failed; interval not elapsed
    → no exec; a record with a different id re-initialises; interval elapsed → retry."""
    step = decide_restart(pod, POOL, SANDBOX, NOW)
    assert step.state is state
    assert len(step.execs) == execs


def test_try_restart_first_call_records_and_counts_the_attempt() -> None:
    """TestTryRestart FirstCall_InitializesAndExecs, in full: the record names the sandbox and
    the container's old id, and already counts the attempt it asks for."""
    step = decide_restart(running_pod("docker://old"), POOL, SANDBOX, NOW)
    assert step.message == "retry #1 sent to 1 container(s), waiting for restart"
    assert step.record is not None
    assert json.loads(step.record) == {
        "id": SANDBOX,
        "startTime": "2026-05-04T10:00:00Z",
        "containers": {"c0": "docker://old"},
        "lastRetryTime": "2026-05-04T10:00:00Z",
        "retryCount": 1,
    }
    assert step.record_patch() == {
        "metadata": {"annotations": {ANNOTATION_RESTART_RECORD: step.record}}
    }


def test_try_restart_pod_not_running_reports_the_phase() -> None:
    """TestTryRestart PodNotRunning_ReturnsError: the reason upstream's error gives, no write."""
    pod = {"metadata": {"name": "pod1", "namespace": "default"}, "status": {"phase": "Pending"}}
    step = decide_restart(pod, POOL, SANDBOX, NOW)
    assert step.message == "pod default/pod1 is not running (phase: Pending)"
    assert step.record is None and step.recycle_state is None


def test_try_restart_exec_failure_still_counts() -> None:
    """TestTryRestart ExecFails_LogsAndContinues: the record to persist does not depend on how
    the execs went, so attempts whose exec failed (the containers never restart) are counted,
    spaced by the interval, and end in Failed after maxRetries."""
    pod = running_pod("docker://old")
    now = NOW
    states = []
    for _ in range(DEFAULT_MAX_RETRIES + 1):
        step = decide_restart(pod, POOL, SANDBOX, now)
        states.append((step.state, len(step.execs), step.retry_count))
        persisted(pod, step)  # every exec failed: the container ids stay as they were
        early = decide_restart(pod, POOL, SANDBOX, now + DEFAULT_RETRY_INTERVAL / 2)
        assert early.execs == () and early.record is None
        now += DEFAULT_RETRY_INTERVAL
    assert states == [
        (RestartState.RESTARTING, 1, 1),
        (RestartState.RESTARTING, 1, 2),
        (RestartState.RESTARTING, 1, 3),
        (RestartState.FAILED, 0, 3),
    ]
    assert step.message == "max retries (3) exceeded" and step.need_delete


def test_try_restart_interval_message_and_elapsed_bound() -> None:
    """TestTryRestart RetryIntervalNotElapsed_SkipsExec: ``time.Since(last) < interval`` holds
    back; at exactly the interval the next attempt goes out."""
    pool = pool_with_config({"retryInterval": "10s"})
    last = NOW - timedelta(seconds=9)
    pod = with_record(
        running_pod("docker://old"),
        **record_of(containers={"c0": "docker://old"}, retryCount=1, lastRetryTime=stamp(last)),
    )
    held = decide_restart(pod, pool, SANDBOX, NOW)
    assert held.message == "retry interval not elapsed, next retry after 2026-05-04T10:00:01Z"
    assert held.record is None
    due = decide_restart(pod, pool, SANDBOX, NOW + timedelta(seconds=1))
    assert len(due.execs) == 1 and due.retry_count == 2


def test_try_restart_unparsable_last_retry_does_not_hold_back() -> None:
    """restart_default.go:224-235: a lastRetryTime that ``time.Parse`` refuses is ignored."""
    pod = with_record(
        running_pod("docker://old"),
        **record_of(containers={"c0": "docker://old"}, retryCount=1, lastRetryTime="yesterday"),
    )
    assert len(decide_restart(pod, POOL, SANDBOX, NOW).execs) == 1


def test_try_restart_runs_the_configured_command_in_every_recorded_container() -> None:
    """TestTryRestart with a Pool's config: the command in each recorded container, in name
    order; the blacklisted one is never recorded; waiting ones are left out."""
    pool = pool_with_config({"blacklist": ["sidecar"], "restartCommand": ["kill", "-TERM", "1"]})
    pod = running_pod()
    pod["status"]["containerStatuses"] = [
        status("web", "containerd://w"),
        status("sidecar", "containerd://s"),
        status("app", "containerd://a"),
        status("init", "containerd://i", "waiting"),
    ]
    step = decide_restart(pod, pool, SANDBOX, NOW)
    assert step.execs == (
        ContainerExec("app", ("kill", "-TERM", "1")),
        ContainerExec("web", ("kill", "-TERM", "1")),
    )


def test_try_restart_succeeds_when_the_containers_came_back() -> None:
    """TestTryRestart AlreadySucceeded_SkipsExec after a real attempt: once every container runs
    under a new id the step is Succeeded and writes nothing."""
    pod = running_pod("docker://old", "docker://old2")
    persisted(pod, decide_restart(pod, POOL, SANDBOX, NOW))
    pod["status"]["containerStatuses"][0]["containerID"] = "docker://new"
    halfway = decide_restart(pod, POOL, SANDBOX, NOW + timedelta(seconds=1))
    assert halfway.state is RestartState.RESTARTING and halfway.execs == ()
    pod["status"]["containerStatuses"][1]["containerID"] = "docker://new2"
    step = decide_restart(pod, POOL, SANDBOX, NOW + timedelta(seconds=2))
    assert step.state is RestartState.SUCCEEDED
    assert step.record is None and step.execs == () and step.retry_count == 1


def test_try_restart_with_nothing_running_succeeds_at_once() -> None:
    """TestTryRestart, a Running Pod with no running container: the new record holds none, and
    a record of no container has succeeded (it is still persisted, as upstream does)."""
    pod = running_pod()
    pod["status"]["containerStatuses"] = [status("c0", "docker://x", "terminated")]
    step = decide_restart(pod, POOL, SANDBOX, NOW)
    assert step.state is RestartState.SUCCEEDED and step.execs == ()
    assert step.record is not None and json.loads(step.record)["containers"] == {}


def test_try_restart_needs_an_aware_clock() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        decide_restart(running_pod("docker://a"), POOL, SANDBOX, datetime(2026, 1, 1))


# --- recycle/restart_test.go TestRestartRecycler -------------------------------------------


def test_restart_recycler_nil_pod_succeeded() -> None:
    """TestRestartRecycler NilPod_Succeeded (and a terminating Pod, which the Pool controller
    hands in as nil): Succeeded, nothing to delete, nothing to write."""
    for pod in (None, {**running_pod("docker://a"), "metadata": {"deletionTimestamp": "t"}}):
        step = decide_restart(pod, POOL, SANDBOX, NOW)
        assert step.state is RestartState.SUCCEEDED
        assert step.recycle_state == "Succeeded" and not step.need_delete
        assert step.message == "restart recycler: pod is deleted"
        assert step.record is None and step.execs == ()


@pytest.mark.parametrize(
    ("state", "recycle_state", "need_delete"),
    [
        pytest.param(RestartState.SUCCEEDED, "Succeeded", False, id="HandlerSucceeded"),
        pytest.param(RestartState.FAILED, "Failed", True, id="HandlerFailed_NeedDelete"),
        pytest.param(RestartState.RESTARTING, "Recycling", False, id="HandlerRecycling"),
        pytest.param(RestartState.POD_NOT_RUNNING, None, False, id="HandlerError"),
    ],
)
def test_restart_recycler(
    state: RestartState, recycle_state: str | None, need_delete: bool
) -> None:
    """TestRestartRecycler: handler Succeeded → Succeeded; Failed → Failed + NeedDelete;
    Restarting → Recycling; the handler's error propagates (no recycle state)."""
    step = RestartStep(state, "")
    assert step.recycle_state == recycle_state
    assert step.need_delete is need_delete
