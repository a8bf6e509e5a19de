"""Waiting for the state table: the server copies the event log into it a moment after each
write, and starts copying a moment (about 0.2 s) after the stream is made, so a test that reads
the table right after writing the log waits for the copy first."""

from __future__ import annotations

from nats.js import JetStreamContext

from services.runtime.bus import BusConfig
from tests.support.waiting import until

__all__ = ["state_table_copied"]


async def state_table_copied(
    js: JetStreamContext, objects: int, bus: BusConfig | None = None, within: float = 10.0
) -> None:
    """Wait until the state table holds at least ``objects`` objects and has copied all of the
    event log there is."""
    stream = (bus or BusConfig()).state_stream

    async def copied() -> str:
        info = await js.stream_info(stream)
        sources = info.sources or []
        if any(source.lag or (source.active or -1) < 0 for source in sources):
            return ""
        return "copied" if (info.state.messages or 0) >= objects else ""

    await until(copied, within=within, what=f"the state table to copy {objects} objects")
