"""The pool worker's settings from its environment (``services.pool.service.settings_from``),
against upstream's flags and their defaults (main.go, docs/agent-sandbox.md §4)."""

from __future__ import annotations

import pytest

from services.pool.core.members import plan_member
from services.pool.core.observation import PoolSettings
from services.pool.core.opensandbox.plan import plan_open_pool
from services.pool.core.plan import plan_pool
from services.pool.service import definition, settings_from
from services.runtime.reconcile.serving import lease_settings
from services.runtime.worker_api import ObjectCache, Observed
from tests.unit.pool.world import POOL
from tests.unit.pool.world import pool as a_pool

VARIABLES = (
    "SANDBUS_POOL_MAX_BATCH",
    "SANDBUS_POOL_READINESS_GRACE",
    "SANDBUS_POOL_UNSCHEDULABLE_RECHECK",
    "SANDBUS_POOL_REPLENISH_DELAY",
    "SANDBUS_POOL_MAX_REFILL_RATE",
    "SANDBUS_POOL_EVICTION",
)


def test_the_defaults_are_upstreams() -> None:
    """Upstream TestWarmPoolDefaults (5 min grace, 1 min recheck) and the flags' defaults:
    --sandbox-warm-pool-max-batch-size 300, --sandbox-warm-pool-replenish-delay 0,
    --sandbox-warm-pool-max-refill-rate 0, --enable-warm-pool-eviction true."""
    settings = settings_from({})
    assert settings == PoolSettings(
        max_batch=300,
        readiness_grace=300.0,
        unschedulable_recheck=60.0,
        replenish_delay=0.0,
        max_refill_rate=0.0,
        eviction=True,
    )
    assert settings_from({name: " " for name in VARIABLES}) == settings, "blank: the default"


def test_every_variable_is_read() -> None:
    """Upstream TestReconcilePool_ConfigurableGraceAndRecheck: every flag is honoured."""
    settings = settings_from(
        {
            "SANDBUS_POOL_MAX_BATCH": "25",
            "SANDBUS_POOL_READINESS_GRACE": "90",
            "SANDBUS_POOL_UNSCHEDULABLE_RECHECK": "7.5",
            "SANDBUS_POOL_REPLENISH_DELAY": "2",
            "SANDBUS_POOL_MAX_REFILL_RATE": "0.5",
            "SANDBUS_POOL_EVICTION": "false",
        }
    )
    assert settings == PoolSettings(
        max_batch=25,
        readiness_grace=90.0,
        unschedulable_recheck=7.5,
        replenish_delay=2.0,
        max_refill_rate=0.5,
        eviction=False,
    )
    assert settings_from({"SANDBUS_POOL_EVICTION": " True "}).eviction is True
    assert settings_from({"SANDBUS_POOL_MAX_BATCH": "1e3"}).max_batch == 1000
    assert settings_from({"SANDBUS_POOL_MAX_BATCH": "0"}).max_batch == 1, "at least one"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SANDBUS_POOL_MAX_BATCH", "ten"),
        ("SANDBUS_POOL_MAX_BATCH", "2.5"),
        ("SANDBUS_POOL_MAX_BATCH", "-1"),
        ("SANDBUS_POOL_READINESS_GRACE", "5m"),
        ("SANDBUS_POOL_READINESS_GRACE", "-1"),
        ("SANDBUS_POOL_UNSCHEDULABLE_RECHECK", "inf"),
        ("SANDBUS_POOL_REPLENISH_DELAY", "nan"),
        ("SANDBUS_POOL_MAX_REFILL_RATE", "fast"),
        ("SANDBUS_POOL_EVICTION", "yes"),
        ("SANDBUS_POOL_EVICTION", "1"),
    ],
)
def test_a_bad_value_stops_the_service_naming_the_variable(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match=name):
        settings_from({name: value})
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        definition()


def test_the_worker_runs_with_the_settings_of_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SANDBUS_POOL_READINESS_GRACE", "42")
    built = definition()
    (pool, member, open_pool) = built.reconcilers
    cache = ObjectCache(label_indexes=built.label_indexes)
    cache.observe("added", a_pool())
    settings = pool.observe(POOL, Observed(cache)).settings
    assert pool.plan is plan_pool and settings.readiness_grace == 42.0
    assert member.plan is plan_member
    assert open_pool.plan is plan_open_pool and open_pool.kind == "Pool"


def test_the_shells_variables_apply_to_the_pool_worker() -> None:
    """The process shell's SANDBUS_POOL_LEASE_SECONDS and SANDBUS_POOL_LEASE_NAME: the pool
    worker is active-passive on the Lease ``sandbus-pool`` unless renamed."""
    assert lease_settings("pool", {}).name == "sandbus-pool"
    renamed = lease_settings(
        "pool", {"SANDBUS_POOL_LEASE_NAME": "mine", "SANDBUS_POOL_LEASE_SECONDS": "2"}
    )
    assert renamed.name == "mine" and renamed.timings != lease_settings("pool", {}).timings
    with pytest.raises(ValueError, match="SANDBUS_POOL_LEASE_SECONDS"):
        lease_settings("pool", {"SANDBUS_POOL_LEASE_SECONDS": "0"})
