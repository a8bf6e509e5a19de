"""What the history commands say when there is no log to read."""

from __future__ import annotations

import pytest

from services.cli.history import commands
from tests.component.cli.commands import run_command

ALL_COMMANDS = [
    ["events", "replay"],
    ["state"],
    ["explain", "Sandbox/default/a"],
    ["events", "tail"],
]


@pytest.mark.parametrize("argv", ALL_COMMANDS)
async def test_a_server_without_the_event_log_is_a_clear_error(
    argv: list[str], nats_url: str
) -> None:
    # Nothing provisioned the bus here (no `js` fixture), so there is no event log stream.
    result = await run_command(argv, nats_url)
    assert result.code == 1
    assert "the event log stream SANDBUS_EVENTS does not exist" in result.err


async def test_an_unreachable_nats_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commands, "CONNECT_TIMEOUT", 0.5)
    result = await run_command(["state"], "nats://127.0.0.1:1")
    assert result.code == 1
    assert "cannot connect to NATS at nats://127.0.0.1:1" in result.err
