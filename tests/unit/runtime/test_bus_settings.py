"""The bus's settings from the environment (``BusConfig.from_environment``) and the servers a
NATS URL names (``server_urls``): what a Deployment or ``sandbus up --nats-cluster`` sets."""

from __future__ import annotations

import pytest

from services.runtime.bus import BusConfig
from services.runtime.connection import server_urls


def test_defaults_without_the_variables() -> None:
    assert BusConfig.from_environment({}) == BusConfig()


def test_replicas_and_the_duplicate_window() -> None:
    config = BusConfig.from_environment(
        {"SANDBUS_BUS_REPLICAS": "3", "SANDBUS_BUS_DUPLICATE_WINDOW": "60"}
    )
    assert (config.replicas, config.duplicate_window) == (3, 60.0)


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("SANDBUS_BUS_REPLICAS", "three", "SANDBUS_BUS_REPLICAS='three'"),
        ("SANDBUS_BUS_REPLICAS", "7", "replicas must be 1..5"),
        ("SANDBUS_BUS_DUPLICATE_WINDOW", "-1", "duplicate_window must be positive"),
    ],
)
def test_a_bad_value_names_what_is_wrong(variable: str, value: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace(".", r"\.")):
        BusConfig.from_environment({variable: value})


def test_a_cluster_url_names_every_node() -> None:
    assert server_urls("nats://a:4222, nats://b:4222,,nats://c:4222") == [
        "nats://a:4222",
        "nats://b:4222",
        "nats://c:4222",
    ]
    assert server_urls("nats://a:4222") == ["nats://a:4222"]
    with pytest.raises(ValueError, match="no NATS server"):
        server_urls(" , ")
