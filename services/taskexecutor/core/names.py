"""Task names, which are also directory names (docs/opensandbox.md §5, "persistence").

Every task lives in ``<dataDir>/<name>/``, so a name is checked before it becomes a path, as
upstream's ``SafeJoin`` does (``te/utils/pathutil.go``): it must be one path component that
stays inside the data dir. Upstream rejects a separator and ``..``; here ``.`` (the data dir
itself), NUL (which no file system takes) and names longer than a file name may be are refused
too, so that every name accepted over HTTP can be stored.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_NAME_BYTES", "name_problem"]

MAX_NAME_BYTES: Final = 255
"""The longest file name Linux file systems take (NAME_MAX), in bytes of UTF-8."""


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a task; None when it can."""
    if not name:
        return "must not be empty"
    if name in (".", ".."):
        return f"must not be {name!r}"
    if "/" in name or "\\" in name:
        # A backslash is no separator on Linux, but it is elsewhere, and no controller names a
        # task with one (they are ``<sandbox>-<index>``): refusing it costs nothing.
        return "must not contain a path separator"
    if "\x00" in name:
        return "must not contain a NUL character"
    if len(name.encode()) > MAX_NAME_BYTES:
        return f"must be at most {MAX_NAME_BYTES} bytes long"
    return None
