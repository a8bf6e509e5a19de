"""The history commands run in-process, as `sandbus <argv> --nats <url>` would run them, and
events put on the bus for them to read: what the history tests share. Their fixtures (a NATS
connection, the bus provisioned) are in this directory's conftest.py."""

from __future__ import annotations

import argparse
import asyncio
import io
from collections.abc import Iterable
from dataclasses import dataclass

from nats.js import JetStreamContext

from events.types import DecisionMade, Event, ObjectEvent
from services.cli.history import arguments as cli
from services.runtime.bus import BusConfig, publish_event

EVENT_LOG = BusConfig().event_log_stream
COMMAND_TIMEOUT = 20.0


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sandbus")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser


async def run_command(argv: list[str], nats_url: str) -> Result:
    """Run one history command in-process, as `sandbus <argv> --nats <url>` would."""
    args = parser().parse_args([*argv, "--nats", nats_url])
    out, err = io.StringIO(), io.StringIO()
    # A bounded command must end by itself: wait_for turns a hang into a failure.
    code = await asyncio.wait_for(args.run(args, out=out, err=err), COMMAND_TIMEOUT)
    return Result(code, out.getvalue(), err.getvalue())


async def publish_all(js: JetStreamContext, events: Iterable[Event]) -> None:
    for event in events:
        assert isinstance(event, ObjectEvent | DecisionMade)
        ack = await publish_event(js, event)
        assert not ack.duplicate


async def publish_garbage(js: JetStreamContext, subject: str, payload: bytes) -> int:
    """Store a message that is not a valid event on an event-log subject; its sequence."""
    ack = await js.publish(subject, payload, stream=EVENT_LOG)
    return ack.seq
