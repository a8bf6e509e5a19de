"""The ``sandbus_up`` fixture of ``tests/e2e/test_up.py``: ``sandbus up --dir TMP/state`` as a
user runs it, stopped with SIGTERM (and checked to exit 0) after the test."""

from __future__ import annotations

from tests.e2e.test_up import sandbus_up

__all__ = ["sandbus_up"]
