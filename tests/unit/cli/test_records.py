"""Reading one message of the log never raises."""

from __future__ import annotations

from events.codec import encode_event
from services.cli.history.records import LogRecord, UnreadableRecord, in_window, read_record
from tests.unit.cli.histories import T0, at, change, sandbox


def test_a_valid_event_on_its_subject_is_read() -> None:
    event = change("added", sandbox("a", 1), 0)
    record = read_record(3, "sandbus.events.sandbox.default.a", T0, encode_event(event))
    assert isinstance(record, LogRecord)
    assert record.event == event
    assert record.seq == 3


def test_garbage_is_unreadable_with_the_decoder_reason() -> None:
    record = read_record(4, "sandbus.events.sandbox.default.a", T0, b"\x00garbage")
    assert isinstance(record, UnreadableRecord)
    assert "not valid JSON" in record.reason
    assert record.payload == b"\x00garbage"


def test_an_event_that_breaks_the_contract_is_unreadable() -> None:
    payload = encode_event(change("added", sandbox("a", 1), 0)).replace(b'"uid-a"', b'""')
    record = read_record(5, "sandbus.events.sandbox.default.a", T0, payload)
    assert isinstance(record, UnreadableRecord)
    assert "data.object.metadata.uid" in record.reason


def test_an_event_on_another_objects_subject_is_unreadable() -> None:
    event = change("added", sandbox("a", 1), 0)
    record = read_record(6, "sandbus.events.sandbox.default.b", T0, encode_event(event))
    assert isinstance(record, UnreadableRecord)
    assert "belongs on sandbus.events.sandbox.default.a" in record.reason


def test_windows_are_inclusive_and_may_be_open() -> None:
    assert in_window(at(5), at(5), at(5))
    assert not in_window(at(4), at(5), None)
    assert not in_window(at(6), None, at(5))
    assert in_window(at(6), None, None)
