"""Bad input to the history commands is refused while parsing, with exit code 2."""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import signal

import pytest

from events.envelope import ObjectRef
from services.cli.history import arguments as cli


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sandbus")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["events", "replay", "--since", "yesterday"],
        ["events", "replay", "--until", "2026-05-04T10:00:00"],
        ["events", "tail", "--since", "ten minutes"],
        ["state", "--at", "10"],
    ],
)
def test_an_unreadable_time_exits_2_saying_what_is_expected(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    message = _refused(argv, capsys)
    assert "RFC 3339" in message or "time zone" in message


@pytest.mark.parametrize(
    "argv",
    [
        ["events", "tail", "--kind", "deployment"],
        ["state", "--kind", "deployment"],
        ["explain", "deployment/default/x"],
    ],
)
def test_an_unknown_kind_exits_2_naming_the_known_kinds(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    message = _refused(argv, capsys)
    assert "unknown kind 'deployment'" in message
    assert "Sandbox, SandboxTemplate, SandboxClaim" in message


@pytest.mark.parametrize(
    "argv",
    [
        ["explain", "sandbox"],
        ["explain", "sandbox/a/b/c"],
        ["events", "replay", "--since-seq", "0"],
        ["events", "replay", "--since", "10m", "--since-seq", "3"],
        ["events", "replay", "--json", "--into", "x.db"],
        ["state", "-o", "wide"],
    ],
)
def test_other_malformed_arguments_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _refused(argv, capsys)


def test_good_arguments_become_typed_values() -> None:
    args = _parser().parse_args(
        ["explain", "swp/team/python", "--nats", "nats://x:1", "--stream", "LOG"]
    )
    assert args.object == ObjectRef(kind="SandboxWarmPool", namespace="team", name="python")
    assert (args.nats, args.stream) == ("nats://x:1", "LOG")
    state = _parser().parse_args(["state", "--kind", "sandboxes"])
    assert state.kind == "Sandbox"
    assert state.at.tzinfo is not None  # --at defaults to now


async def test_until_before_since_exits_2_without_connecting() -> None:
    args = _parser().parse_args(
        [
            "events",
            "replay",
            "--since",
            "2026-05-04T10:00:00Z",
            "--until",
            "2026-05-04T09:00:00Z",
            "--nats",
            "nats://127.0.0.1:1",
        ]
    )
    err = io.StringIO()
    assert await args.run(args, out=io.StringIO(), err=err) == 2
    assert "--until is before --since" in err.getvalue()


def test_a_signal_cancels_the_running_command_cleanly() -> None:
    cleaned_up = []

    async def waits_forever(args: argparse.Namespace, *, out: object, err: object) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        try:
            await asyncio.Event().wait()
        finally:
            cleaned_up.append(True)
        return 0

    code = cli._execute(waits_forever, argparse.Namespace(), on_signal=cli.INTERRUPTED)
    assert code == 130
    assert cleaned_up == [True]


def test_a_command_that_ends_gives_its_exit_code() -> None:
    async def fails(args: argparse.Namespace, *, out: object, err: object) -> int:
        return 1

    assert cli._execute(fails, argparse.Namespace(), on_signal=0) == 1
