"""What a push read of a stream takes from each message's ack subject."""

from __future__ import annotations

import pytest
from nats.aio.msg import Msg

from services.runtime.streams import _pending


@pytest.mark.parametrize(
    "reply",
    [
        "$JS.ACK.SANDBUS_STATE.reader.1.812.3.1764633600000000000.42",
        "$JS.ACK._.ACCOUNTHASH.SANDBUS_STATE.reader.1.812.3.1764633600000000000.7.x1y2",
        "$JS.ACK.hub.ACCOUNTHASH.SANDBUS_STATE.reader.1.812.3.1764633600000000000.0",
    ],
    ids=["v1", "v2", "v2 without its random token"],
)
def test_the_pending_count_is_read_as_nats_py_reads_it(reply: str) -> None:
    assert _pending(reply) == Msg.Metadata._from_reply(reply).num_pending
