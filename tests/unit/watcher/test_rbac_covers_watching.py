"""The watcher's ClusterRole lets it list and watch every resource it is built to watch.

A resource added to :data:`services.watcher.resources.WATCHED_RESOURCES` without its RBAC rule
works against the development cluster (which authorises everything) and fails on a real one
with 403 on every list: this test is where that is caught.
"""

from __future__ import annotations

import pytest

from services.watcher.resources import WATCHED_RESOURCES, WatchedResource
from tests.unit.deploy.manifests import BASE, allowed, of_kind, render


@pytest.mark.parametrize("resource", WATCHED_RESOURCES, ids=lambda r: r.plural)
def test_the_watcher_may_list_and_watch(resource: WatchedResource) -> None:
    """List and watch, and no get: the watcher never reads one object (an object as of a
    revision is a list too; tests/component/deploy/test_rbac_requests.py records it)."""
    role = of_kind(render(BASE), "ClusterRole")["sandbus-watcher"]
    for verb in ("list", "watch"):
        assert allowed(role, resource.group, resource.plural, verb), (resource.plural, verb)
