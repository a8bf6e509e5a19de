"""The routes (services/taskexecutor/core/routes.py, upstream's router.go), the settings and
flags (core/settings.py, cli.py: upstream's ``-listen-addr=HOST:PORT`` included), and reading
``/proc`` (core/procfs.py)."""

from __future__ import annotations

import argparse

import pytest

from services.taskexecutor.cli import add_arguments, settings_from
from services.taskexecutor.core.procfs import names_task_dir, stat_state
from services.taskexecutor.core.routes import Route, resolve
from services.taskexecutor.core.settings import ExecutorSettings, parse_listen_addr


@pytest.mark.parametrize(
    ("method", "target", "route", "name"),
    [
        ("POST", "/setTasks", Route.SET_TASKS, ""),
        ("GET", "/getTasks", Route.GET_TASKS, ""),
        ("GET", "/getTasks?x=1", Route.GET_TASKS, ""),
        ("POST", "/tasks", Route.CREATE_TASK, ""),
        ("GET", "/tasks/bs-0", Route.GET_TASK, "bs-0"),
        ("DELETE", "/tasks/bs-0", Route.DELETE_TASK, "bs-0"),
        ("GET", "/tasks/a%20b", Route.GET_TASK, "a b"),
        ("GET", "/health", Route.HEALTH, ""),
    ],
)
def test_the_routes(method: str, target: str, route: Route, name: str) -> None:
    resolved = resolve(method, target)
    assert (resolved.route, resolved.name) == (route, name)


def test_a_known_path_with_another_method_is_405_with_allow() -> None:
    resolved = resolve("GET", "/setTasks")
    assert (resolved.route, resolved.status, resolved.allow) == (None, 405, ("POST",))
    assert resolve("POST", "/tasks/a").allow == ("DELETE", "GET")


@pytest.mark.parametrize("target", ["/", "/nope", "/tasks/", "/tasks/a/b", "/getTasks/x"])
def test_an_unknown_path_is_404(target: str) -> None:
    assert resolve("GET", target).status == 404


@pytest.mark.parametrize("target", ["/tasks/..", "/tasks/%2e%2e", "/tasks/a%2Fb"])
def test_a_name_no_task_can_have_is_400(target: str) -> None:
    resolved = resolve("GET", target)
    assert (resolved.route, resolved.status) == (None, 400)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.0.0.0:5758", ("0.0.0.0", 5758)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        (":5758", ("0.0.0.0", 5758)),
        ("[::1]:5758", ("::1", 5758)),
        ("localhost:80", ("localhost", 80)),
    ],
)
def test_listen_addresses_as_go_takes_them(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen_addr(text) == expected


@pytest.mark.parametrize("text", ["5758", "host:", "host:x", "::1:5758", "h:70000"])
def test_bad_listen_addresses_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="listen address"):
        parse_listen_addr(text)


def parsed(*argv: str, env: dict[str, str] | None = None) -> ExecutorSettings:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_arguments(parser)
    return settings_from(parser.parse_args(list(argv)), env or {})


def test_the_defaults_are_upstreams() -> None:
    assert parsed() == ExecutorSettings(
        host="0.0.0.0",
        port=5758,
        data_dir="/var/lib/sandbox/tasks",
        reconcile_interval=0.5,
        stop_grace=10.0,
    )


def test_upstreams_flags_and_environment() -> None:
    assert parsed("-listen-addr=127.0.0.1:6000", "-data-dir=/d") == ExecutorSettings(
        host="127.0.0.1", port=6000, data_dir="/d"
    )
    assert parsed("--listen-addr", "10.0.0.1:7") == ExecutorSettings(host="10.0.0.1", port=7)
    from_env = parsed(env={"LISTEN_ADDR": "127.0.0.2:8", "DATA_DIR": "/e"})
    assert (from_env.host, from_env.port, from_env.data_dir) == ("127.0.0.2", 8, "/e")


def test_host_and_port_override_the_listen_address() -> None:
    settings = parsed("-listen-addr=0.0.0.0:5758", "--port", "0", "--host", "127.0.0.1")
    assert (settings.host, settings.port) == ("127.0.0.1", 0)
    settings = parsed("--data-dir", "/x", "--reconcile-interval", "0.1", "--stop-grace", "2")
    assert (settings.data_dir, settings.reconcile_interval, settings.stop_grace) == ("/x", 0.1, 2)


@pytest.mark.parametrize(
    "argv", [("--port", "70000"), ("--reconcile-interval", "0"), ("--stop-grace", "-1")]
)
def test_bad_settings_are_refused(argv: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        parsed(*argv)


def test_the_state_of_a_proc_stat_line_whose_name_has_parentheses() -> None:
    assert stat_state("4242 (python) S 1 4242 4242 0 -1") == "S"
    assert stat_state("4242 (a) b (c)) Z 1 4242") == "Z"
    assert stat_state("garbage") is None


def test_a_supervisor_is_known_by_its_task_directory_argument() -> None:
    cmdline = b"/usr/bin/python3\0-m\0services.taskexecutor.supervisor\0/data/bs-0\0"
    assert names_task_dir(cmdline, "/data/bs-0")
    assert not names_task_dir(cmdline, "/data/bs-1")
    assert not names_task_dir(cmdline, "/data/bs")
