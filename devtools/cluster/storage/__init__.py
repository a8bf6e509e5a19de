"""Where objects live: the store, its SQLite persistence, and the copies the write path makes.

- :mod:`.store` — :class:`~.store.Store`: objects as canonical JSON, the global
  resourceVersion, the change history that watches replay, the commit lock.
- :mod:`.persistence` — SQLite for ``--data DIR``: objects survive a restart.
- :mod:`.jsontree` — cheap copies of decoded JSON documents for the write path.
"""
