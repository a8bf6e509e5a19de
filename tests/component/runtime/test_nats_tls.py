"""TLS between the services and NATS, on a real nats-server that requires it and verifies its
clients' certificates (``SANDBUS_NATS_TLS_CA``, ``_CERT``, ``_KEY``; services/runtime/connection.py
``tls_context``). The certificates are made here with openssl."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from devtools.natsd import NatsServer, TlsFiles
from services.runtime.connection import ConnectionLost, connect_nats, tls_context

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="no openssl to make certificates"
)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def certificates(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it."""
    paths = {
        name: directory / f"{name}.pem"
        for name in ("ca", "ca-key", "server", "server-key", "client", "client-key")
    }
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        str(paths["ca-key"]),
        "-out",
        str(paths["ca"]),
    )
    for who, san in (("server", "IP:127.0.0.1"), ("client", "DNS:sandbus-test")):
        request = directory / f"{who}.csr"
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={who}",
            "-keyout",
            str(paths[f"{who}-key"]),
            "-out",
            str(request),
        )
        extensions = directory / f"{who}.ext"
        extensions.write_text(f"subjectAltName={san}\n")
        _openssl(
            "x509",
            "-req",
            "-in",
            str(request),
            "-CA",
            str(paths["ca"]),
            "-CAkey",
            str(paths["ca-key"]),
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            str(paths[who]),
            "-extfile",
            str(extensions),
        )
    return paths


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
