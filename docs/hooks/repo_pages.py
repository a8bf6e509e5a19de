"""An mkdocs hook: a few Markdown files that live outside docs/ become pages of the guide.

BENCHMARKS.md is generated at the repository's root, and bench/README.md and deploy/README.md
sit beside what they describe. The guide shows each of them as a page of its own, read from
where it lives at build time, so there is one copy of each text. A link from one of them to
another is pointed at that one's page; any other link is left as it is, and the strict build
fails on it if it leads nowhere.

The top-level README.md is not a page (GitHub shows it), but it links into docs/: the build
fails when one of its relative links names a file that does not exist.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

PAGES = {
    "BENCHMARKS.md": "guide/benchmark-results.md",
    "bench/README.md": "guide/benchmark-scenarios.md",
    "deploy/README.md": "guide/deploy-manifests.md",
}
"""A file of the repository → the page it becomes, under docs/."""


def _relink(text: str, source: str, page: str) -> str:
    """``text`` with each ``](path)`` link to another file of :data:`PAGES`, written relative
    to ``source``, rewritten to that file's page, relative to ``page``."""
    for other, other_page in PAGES.items():
        written = posixpath.relpath(other, posixpath.dirname(source) or ".")
        target = posixpath.relpath(other_page, posixpath.dirname(page))
        text = text.replace(f"]({written})", f"]({target})")
        text = text.replace(f"]({written}#", f"]({target}#")
    return text


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _check_readme(root: Path) -> None:
    """Fail the build on a relative link of README.md to a file that is not there."""
    missing = [
        target
        for target in _LINK.findall((root / "README.md").read_text(encoding="utf-8"))
        if "://" not in target
        and not target.startswith(("#", "mailto:"))
        and not (root / target.split("#", 1)[0]).exists()
    ]
    if missing:
        raise PluginError(f"README.md links to files that do not exist: {', '.join(missing)}")


def on_files(files: Files, config: Any) -> Files:
    root = Path(config.config_file_path).parent
    _check_readme(root)
    for source, page in PAGES.items():
        text = (root / source).read_text(encoding="utf-8")
        files.append(File.generated(config, page, content=_relink(text, source, page)))
    return files
