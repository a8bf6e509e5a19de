"""SQLite persistence for ``--data DIR``: objects survive a restart, resourceVersions keep rising.

One table of objects keyed by (resource, namespace, name) holding the canonical JSON, and one
row with the last resourceVersion. The store hands each group of commits to :meth:`write`, which
puts them on file in one transaction (:mod:`.store`), so the file never holds a state the API did
not serve. The change history is not persisted: after a restart every watch from an older RV
gets 410, as after an etcd compaction, and clients relist.

A transaction runs on the event loop's own thread. SQLite in WAL mode with ``synchronous=NORMAL``
does not wait for the disk at a commit (only at a checkpoint), so a transaction of a few 3 KB
objects takes about 0.1 ms of CPU and 0.2 ms in all; handing it to another thread cost more than
that in the hand-off alone (aiosqlite, four hops a write: 254 µs of CPU; one hop to an executor:
225 µs; inline: 96 µs; measured on this machine with 3 KB objects). Under load the store hands
over a group of commits at a time, so the loop waits once for many writes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

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
        self._db: sqlite3.Connection | None = None

    async def load(self) -> tuple[int, list[tuple[str, str, str, bytes]]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = self._db = sqlite3.connect(self.path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        row = db.execute("SELECT value FROM meta WHERE key = 'resourceVersion'").fetchone()
        rows = db.execute("SELECT resource, namespace, name, data FROM objects").fetchall()
        return (int(row[0]) if row else 0), [(r[0], r[1], r[2], bytes(r[3])) for r in rows]

    async def write(
        self,
        rv: int,
        puts: list[tuple[str, str, str, bytes]],
        deletes: list[tuple[str, str, str]],
    ) -> None:
        db = self._db
        assert db is not None, "load() first"
        db.execute("BEGIN")
        try:
            db.executemany(
                "DELETE FROM objects WHERE resource = ? AND namespace = ? AND name = ?", deletes
            )
            db.executemany(
                "INSERT OR REPLACE INTO objects (resource, namespace, name, data) "
                "VALUES (?, ?, ?, ?)",
                puts,
            )
            db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('resourceVersion', ?)",
                (str(rv),),
            )
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    async def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
