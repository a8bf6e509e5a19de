"""Certificates for the TLS tests of this directory, made with openssl: a CA, and a server and a
client certificate signed by it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

needs_openssl = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="no openssl to make certificates"
)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def certificates(directory: Path, server_name: str = "IP:127.0.0.1") -> dict[str, Path]:
    """A CA, a server certificate for ``server_name`` (a subjectAltName: ``IP:...`` or
    ``DNS:...``) and a client certificate, both signed by it."""
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
    for who, san in (("server", server_name), ("client", "DNS:sandbus-test")):
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
