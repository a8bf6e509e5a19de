"""The claim worker's functional core: pure planners and the decisions they share (no I/O)."""
