"""Writes a kubeconfig for the development cluster: plain HTTP and a dummy bearer token.

Both ``kubernetes_asyncio.config.load_kube_config`` and kubectl accept it; the token is never
checked (the development cluster has no authentication), it only makes clients behave as they
do against a real cluster.
"""

from __future__ import annotations

from pathlib import Path

import yaml

__all__ = ["CONTEXT_NAME", "kubeconfig_document", "write_kubeconfig"]

CONTEXT_NAME = "sandbus-devcluster"
DUMMY_TOKEN = "sandbus-devcluster-token"


def kubeconfig_document(server: str, namespace: str = "default") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT_NAME, "cluster": {"server": server}}],
        "users": [{"name": CONTEXT_NAME, "user": {"token": DUMMY_TOKEN}}],
        "contexts": [
            {
                "name": CONTEXT_NAME,
                "context": {"cluster": CONTEXT_NAME, "user": CONTEXT_NAME, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT_NAME,
        "preferences": {},
    }


def write_kubeconfig(path: Path, server: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(kubeconfig_document(server), sort_keys=False))
    tmp.replace(path)
    return path
