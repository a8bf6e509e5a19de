"""The event log readers' functional core: instants, folding, diffing and timelines.

No I/O: the import-linter contract "Planners are pure" (pyproject.toml) covers every
``services.*.core`` package. Reading the log and printing are the shell's.
"""
