"""The times users type for --since, --until and --at."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.cli.history.core.instants import (
    InstantError,
    format_instant,
    parse_duration,
    parse_instant,
)

NOW = datetime(2026, 5, 4, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-05-04T10:03:01Z", datetime(2026, 5, 4, 10, 3, 1, tzinfo=UTC)),
        ("2026-05-04T10:03:01.002Z", datetime(2026, 5, 4, 10, 3, 1, 2000, tzinfo=UTC)),
        ("2026-05-04t10:03:01.5z", datetime(2026, 5, 4, 10, 3, 1, 500000, tzinfo=UTC)),
        ("2026-05-04 12:03:01+02:00", datetime(2026, 5, 4, 10, 3, 1, tzinfo=UTC)),
        ("2026-05-04T05:03:01-05:00", datetime(2026, 5, 4, 10, 3, 1, tzinfo=UTC)),
        # Kubernetes and NATS print nanoseconds; Python keeps microseconds.
        ("2026-05-04T10:03:01.123456789Z", datetime(2026, 5, 4, 10, 3, 1, 123456, tzinfo=UTC)),
    ],
)
def test_rfc3339_is_read_in_utc(text: str, expected: datetime) -> None:
    parsed = parse_instant(text, now=NOW)
    assert parsed == expected
    assert parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("text", "ago"),
    [
        ("90s", timedelta(seconds=90)),
        ("10m", timedelta(minutes=10)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1w", timedelta(weeks=1)),
        ("500ms", timedelta(milliseconds=500)),
        ("10m ago", timedelta(minutes=10)),
        ("  10M ", timedelta(minutes=10)),
        ("now", timedelta(0)),
    ],
)
def test_durations_are_taken_back_from_now(text: str, ago: timedelta) -> None:
    assert parse_instant(text, now=NOW) == NOW - ago


def test_now_in_another_zone_is_returned_in_utc() -> None:
    now = datetime(2026, 5, 4, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    assert parse_instant("1h", now=now) == datetime(2026, 5, 4, 11, 0, tzinfo=UTC)


def test_a_timestamp_without_zone_is_refused_not_guessed() -> None:
    with pytest.raises(InstantError, match="no time zone; add Z"):
        parse_instant("2026-05-04T10:03:01", now=NOW)


@pytest.mark.parametrize(
    "text", ["", "yesterday", "10", "10 minutes", "2026-05-04", "10:03:01Z", "-10m", "1h-5m"]
)
def test_unreadable_times_say_what_is_expected(text: str) -> None:
    with pytest.raises(InstantError, match=r"RFC 3339|duration"):
        parse_instant(text, now=NOW)


def test_an_impossible_date_is_reported() -> None:
    with pytest.raises(InstantError, match="not a valid date"):
        parse_instant("2026-02-30T10:00:00Z", now=NOW)


def test_parse_duration_rejects_a_bare_number() -> None:
    with pytest.raises(InstantError, match="not a duration"):
        parse_duration("15")


def test_a_naive_now_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_instant("10m", now=datetime(2026, 5, 4))


def test_format_instant_prints_utc_milliseconds() -> None:
    instant = datetime(2026, 5, 4, 12, 3, 1, 2999, tzinfo=timezone(timedelta(hours=2)))
    assert format_instant(instant) == "2026-05-04T10:03:01.002Z"


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 2),
        max_value=datetime(9998, 12, 31),
        timezones=st.just(UTC),
    )
)
def test_what_is_printed_reads_back_to_the_millisecond(instant: datetime) -> None:
    truncated = instant.replace(microsecond=instant.microsecond // 1000 * 1000)
    assert parse_instant(format_instant(instant), now=NOW) == truncated
