"""The sandbox's files as the runtime's HTTP API shows them: paths confined to the sandbox's
directory, directory listings in the legacy runtime's shape, and the multipart upload body.

A path from a request is taken relative to the sandbox's directory whatever it starts with,
and refused (:class:`Escape`) when, links resolved, it lands outside it: the SDK sanitises
upload names itself, but the runtime must not rely on its clients.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["Escape", "Upload", "confined", "listing", "parse_multipart"]


class Escape(ValueError):
    """A path that leads out of the sandbox's directory."""


@dataclass(frozen=True)
class Upload:
    filename: str
    content: bytes


def confined(base: str, path: str) -> str:
    """``path`` under ``base``, resolved; :class:`Escape` when it leaves ``base``."""
    root = os.path.realpath(base)
    full = os.path.realpath(os.path.join(root, path.lstrip("/")))
    if os.path.commonpath([root, full]) != root:
        raise Escape(f"{path!r} is outside the sandbox's directory")
    return full


def listing(directory: str) -> list[dict[str, object]]:
    """The entries of ``directory``: name, size, type (file or directory) and mod_time."""
    entries: list[dict[str, object]] = []
    with os.scandir(directory) as scan:
        for entry in scan:
            stat = entry.stat(follow_symlinks=False)
            kind = "directory" if entry.is_dir(follow_symlinks=False) else "file"
            entries.append(
                {"name": entry.name, "size": stat.st_size, "type": kind, "mod_time": stat.st_mtime}
            )
    return sorted(entries, key=lambda entry: str(entry["name"]))


def _boundary(content_type: str) -> bytes | None:
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        return None
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary" and value:
            return value.strip('"').encode()
    return None


def _disposition(headers: bytes) -> dict[str, str]:
    """The parameters of a part's Content-Disposition (``name``, ``filename``)."""
    for line in headers.decode("utf-8", errors="replace").split("\r\n"):
        field, _, value = line.partition(":")
        if field.strip().lower() != "content-disposition":
            continue
        params = {}
        for item in value.split(";")[1:]:
            key, _, raw = item.strip().partition("=")
            params[key.lower()] = raw.strip().strip('"')
        return params
    return {}


def parse_multipart(content_type: str, body: bytes) -> Upload | None:
    """The part named ``file`` of a multipart/form-data body, with its filename (None: no such
    part, or not multipart at all)."""
    boundary = _boundary(content_type)
    if boundary is None:
        return None
    for chunk in body.split(b"--" + boundary)[1:]:
        if chunk.startswith(b"--"):
            break  # the closing delimiter
        headers, separator, content = chunk.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        if not separator:
            continue
        params = _disposition(headers)
        if params.get("name") == "file" and params.get("filename"):
            return Upload(params["filename"], content.removesuffix(b"\r\n"))
    return None
