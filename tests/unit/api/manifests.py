"""Where the checked-in manifests are and how to read them the way Kubernetes does.

kubectl turns YAML into JSON before anything else sees it, so a timestamp stays a string;
PyYAML's safe loader would turn ``2030-06-30T18:00:00Z`` into a ``datetime``. The loader here
keeps every scalar that is not a bool, a number or null as a string.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
CRD_DIR = REPO / "deploy" / "crds"
EXAMPLES_DIR = REPO / "examples"
OBSERVED_DIR = REPO / "tests" / "fixtures" / "observed"
"""Objects as the API server hands them back, with status and resourceVersion. They are not
under examples/, which a new user applies whole (``kubectl apply -R -f examples/``): a
resourceVersion there is a precondition that fails."""


class KubernetesYamlLoader(yaml.SafeLoader):
    """A safe loader without the timestamp resolver."""


KubernetesYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document in the file."""
    with path.open(encoding="utf-8") as stream:
        return [doc for doc in yaml.load_all(stream, Loader=KubernetesYamlLoader) if doc]


def example_files() -> list[Path]:
    """Every manifest under examples/, both API families, then the observed objects, in a
    stable order."""
    return sorted(EXAMPLES_DIR.rglob("*.yaml")) + sorted(OBSERVED_DIR.glob("*.yaml"))


def example_documents() -> list[tuple[str, dict[str, Any]]]:
    """``(relative path#index, document)`` for every document of every example (an observed
    object's path is ``observed/NAME.yaml``)."""
    documents = []
    for path in example_files():
        root = EXAMPLES_DIR if path.is_relative_to(EXAMPLES_DIR) else OBSERVED_DIR.parent
        for index, document in enumerate(load_documents(path)):
            documents.append((f"{path.relative_to(root)}#{index}", document))
    return documents
