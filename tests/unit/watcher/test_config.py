"""The watcher's settings from the environment, as a Deployment gives them."""

from __future__ import annotations

import pytest

from services.runtime.lease import LeaseTimings
from services.watcher.config import WatcherConfig


def test_defaults_follow_the_pod() -> None:
    config = WatcherConfig.from_env({"POD_NAMESPACE": "sandbus-system"})
    assert config.lease_namespace == "sandbus-system"
    assert config.lease_name == "sandbus-watcher"
    assert config.lease == LeaseTimings()
    assert config.inactivity_limit == 70.0
    assert config.identity  # host name and process id


def test_every_setting_can_be_given() -> None:
    config = WatcherConfig.from_env(
        {
            "SANDBUS_WATCHER_IDENTITY": "w-1",
            "SANDBUS_WATCHER_LEASE_NAMESPACE": "ops",
            "SANDBUS_WATCHER_LEASE_NAME": "lead",
            "SANDBUS_WATCHER_LEASE_SECONDS": "10",
            "SANDBUS_WATCHER_INACTIVITY_SECONDS": "5",
            "SANDBUS_WATCHER_SHARDS": "4",
            "SANDBUS_WATCHER_MAX_PENDING": "16",
            "SANDBUS_WATCHER_PAGE_SIZE": "50",
            "SANDBUS_BUS_DUPLICATE_WINDOW": "60",
        }
    )
    assert (config.identity, config.lease_namespace, config.lease_name) == ("w-1", "ops", "lead")
    assert config.lease == LeaseTimings.for_duration(10.0)
    assert (config.inactivity_limit, config.shards, config.max_pending) == (5.0, 4, 16)
    assert config.list_page_size == 50
    assert config.bus.duplicate_window == 60.0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SANDBUS_WATCHER_SHARDS", "many"),
        ("SANDBUS_WATCHER_SHARDS", "0"),
        ("SANDBUS_WATCHER_LEASE_SECONDS", "-1"),
        ("SANDBUS_WATCHER_INACTIVITY_SECONDS", "0"),
    ],
)
def test_a_bad_setting_is_refused_with_its_reason(name: str, value: str) -> None:
    with pytest.raises(ValueError, match="invalid watcher setting"):
        WatcherConfig.from_env({name: value})
