"""The NATS URL in the watcher's log lines never shows a password or a token (a Deployment's
URL carries one)."""

from __future__ import annotations

import pytest

from services.runtime.connection import redacted


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "nats://watcher:s3cr3t@sandbus-nats:4222",
            "nats://watcher:***@sandbus-nats:4222",
        ),
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
        ("nats://s3cr3t@host:4222", "nats://***@host:4222"),  # token authentication
        (
            "nats://a:p1@n1:4222, nats://a:p2@n2:4222",
            "nats://a:***@n1:4222,nats://a:***@n2:4222",
        ),
        ("tls://u:p%40ss@host", "tls://u:***@host"),
    ],
)
def test_passwords_are_masked(url: str, shown: str) -> None:
    assert redacted(url) == shown
    assert "s3cr3t" not in redacted(url)
