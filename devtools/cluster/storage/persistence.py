"""SQLite persistence for ``--data DIR``: objects survive a restart, resourceVersions keep rising.

One table of objects keyed by (resource, namespace, name) holding the canonical JSON, and one
row with the last resourceVersion. The store writes each commit's changes in one transaction
while it still holds the commit lock, so the file never holds a state the API did not serve.
The change history is not persisted: after a restart every watch from an older RV gets 410,
as after an etcd compaction, and clients relist.
"""

from __future__ import annotations

from pathlib import Path

import aiosqlite

__all__ = ["SqliteBackend"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    resource TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (resource, namespace, name)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class SqliteBackend:
    def __init__(self, directory: Path | str) -> None:
        self.path = Path(directory) / "devcluster.sqlite"
        self._db: aiosqlite.Connection | None = None

    async def load(self) -> tuple[int, list[tuple[str, str, str, bytes]]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = await aiosqlite.connect(self.path)
        await self._db.execute("PRAGMA journal_mode=WAL")
        await self._db.execute("PRAGMA synchronous=NORMAL")
        await self._db.executescript(_SCHEMA)
        await self._db.commit()
        async with self._db.execute("SELECT value FROM meta WHERE key = 'resourceVersion'") as cur:
            row = await cur.fetchone()
        rv = int(row[0]) if row else 0
        async with self._db.execute("SELECT resource, namespace, name, data FROM objects") as cur:
            rows = [(r[0], r[1], r[2], bytes(r[3])) for r in await cur.fetchall()]
        return rv, rows

    async def write(
        self,
        rv: int,
        puts: list[tuple[str, str, str, bytes]],
        deletes: list[tuple[str, str, str]],
    ) -> None:
        assert self._db is not None, "load() first"
        if deletes:
            await self._db.executemany(
                "DELETE FROM objects WHERE resource = ? AND namespace = ? AND name = ?", deletes
            )
        if puts:
            await self._db.executemany(
                "INSERT OR REPLACE INTO objects (resource, namespace, name, data) "
                "VALUES (?, ?, ?, ?)",
                puts,
            )
        await self._db.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('resourceVersion', ?)", (str(rv),)
        )
        await self._db.commit()

    async def close(self) -> None:
        if self._db is not None:
            await self._db.close()
            self._db = None
