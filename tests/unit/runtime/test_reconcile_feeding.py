"""The bus feed's subject filters and durable name. (Stopping its tasks when a cancellation is
lost is :func:`services.runtime.cancellation.stop_tasks`, tested in test_cancellation.py.)"""

from __future__ import annotations

from services.runtime.reconcile.feeding import BusFeed, durable_name


def test_the_feed_follows_the_event_subjects_of_its_kinds() -> None:
    feed = BusFeed(
        None,  # type: ignore[arg-type]
        worker="sandbox",
        kinds=("Sandbox", "Pod"),
        deliver=lambda event: None,
        load=lambda state: None,
    )
    assert feed.event_filters == ["sandbus.events.sandbox.*.*", "sandbus.events.pod.*.*"]
    assert feed.durable == durable_name("sandbox") == "sandbox-worker"
