"""Fixtures every watcher component test shares (tests/component/watcher/fixtures.py)."""

from tests.component.watcher.fixtures import client, cluster, history, nc

__all__ = ["client", "cluster", "history", "nc"]
