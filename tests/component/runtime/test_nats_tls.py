"""TLS between the services and NATS, on a real nats-server that requires it and verifies its
clients' certificates (``SANDBUS_NATS_TLS_CA``, ``_CERT``, ``_KEY``; services/runtime/connection.py
``tls_context``). The certificates are made with openssl (certificates.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.natsd import NatsServer, TlsFiles
from services.runtime.connection import ConnectionLost, connect_nats, tls_context
from tests.component.runtime.certificates import certificates, needs_openssl

pytestmark = needs_openssl


@pytest.mark.timeout(60)
async def test_a_service_with_the_ca_and_its_certificate_connects(tmp_path: Path) -> None:
    files = certificates(tmp_path)
    tls = TlsFiles(cert=files["server"], key=files["server-key"], ca=files["ca"])
    async with NatsServer(store_dir=tmp_path / "nats", tls=tls) as server:
        env = {
            "SANDBUS_NATS_TLS_CA": str(files["ca"]),
            "SANDBUS_NATS_TLS_CERT": str(files["client"]),
            "SANDBUS_NATS_TLS_KEY": str(files["client-key"]),
        }
        connection = await connect_nats(server.url, name="test", budget=5, tls=tls_context(env))
        try:
            reply = await connection.client.request("$JS.API.INFO", b"", timeout=5)
            assert b"memory" in reply.data
        finally:
            await connection.close()
        # Without a client certificate the server refuses; without the CA the client does.
        for missing in ({"SANDBUS_NATS_TLS_CA": str(files["ca"])}, {}):
            context = tls_context(missing)
            with pytest.raises(ConnectionLost):
                await connect_nats(server.url, name="test", budget=2, tls=context)


def test_the_settings_are_checked() -> None:
    assert tls_context({}) is None
    with pytest.raises(ValueError, match="go together"):
        tls_context({"SANDBUS_NATS_TLS_CERT": "/x.pem"})
    with pytest.raises(ValueError, match=r"SANDBUS_NATS_TLS_CA='/nonexistent\.pem'"):
        tls_context({"SANDBUS_NATS_TLS_CA": "/nonexistent.pem"})
