"""``kubectl apply --dry-run=client`` accepts every generated CRD.

A client dry-run still asks the server for discovery (to map the kind to a resource) and, to
validate, for the server's OpenAPI document. No cluster exists here, so the test serves the
discovery documents for ``apiextensions.k8s.io/v1`` from a throwaway HTTP server and passes
``--validate=false``: kubectl then parses every file, decodes each object as a
CustomResourceDefinition and prints the dry-run result. The schema rules that server-side validation
would check are tested with :func:`devtools.cluster.apirules.structural.schema_problems` in
test_crd.py.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.crd import crd_for
from api.kinds import ALL_KINDS
from tests.unit.api.manifests import CRD_DIR

_DISCOVERY: dict[str, dict[str, Any]] = {
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": []},
    "/apis": {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": "apiextensions.k8s.io",
                "versions": [{"groupVersion": "apiextensions.k8s.io/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "apiextensions.k8s.io/v1", "version": "v1"},
            }
        ],
    },
    "/apis/apiextensions.k8s.io/v1": {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "apiextensions.k8s.io/v1",
        "resources": [
            {
                "name": "customresourcedefinitions",
                "singularName": "customresourcedefinition",
                "namespaced": False,
                "kind": "CustomResourceDefinition",
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                "shortNames": ["crd", "crds"],
            }
        ],
    },
}


class _DiscoveryOnly(http.server.BaseHTTPRequestHandler):
    """Discovery for apiextensions.k8s.io/v1; every object is NotFound, so apply would create."""

    def do_GET(self) -> None:
        body = _DISCOVERY.get(self.path.split("?", 1)[0])
        if body is None:
            self._reply(
                404,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "reason": "NotFound",
                    "code": 404,
                },
            )
        else:
            self._reply(200, body)

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _kubectl() -> str | None:
    beside_python = Path(sys.prefix) / "bin" / "kubectl"
    return str(beside_python) if beside_python.exists() else shutil.which("kubectl")


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DiscoveryOnly)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    config = tmp_path / "kubeconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stub", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "stub", "user": {}}],
                "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
                "current-context": "stub",
            }
        )
    )
    try:
        yield config
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_kubectl_client_dry_run_accepts_every_crd(kubeconfig: Path, tmp_path: Path) -> None:
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("kubectl is not installed")

    result = subprocess.run(
        [
            kubectl,
            "--kubeconfig",
            str(kubeconfig),
            "--cache-dir",
            str(tmp_path / "cache"),
            "apply",
            "--dry-run=client",
            "--validate=false",
            "-o",
            "json",
            "-f",
            str(CRD_DIR),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    objects = printed["items"] if printed.get("kind") == "List" else [printed]
    assert sorted(obj["metadata"]["name"] for obj in objects) == sorted(
        kind.KIND.crd_name for kind in ALL_KINDS
    )
    # kubectl decoded them as CRDs and printed them back with nothing lost.
    by_name = {obj["metadata"]["name"]: obj for obj in objects}
    for kind in ALL_KINDS:
        printed_crd = by_name[kind.KIND.crd_name]
        printed_crd["metadata"].pop("annotations", None)  # kubectl's last-applied-configuration
        assert printed_crd == crd_for(kind)
