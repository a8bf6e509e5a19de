"""The watcher's functional core: what to publish, and what was published.

No I/O: the import-linter contract "Planners are pure" (pyproject.toml) covers every
``services.*.core`` package. The watch loops and the publisher that act on these decisions are
the shell around it.
"""
