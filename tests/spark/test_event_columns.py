"""The Spark source's unframing into Arrow columns agrees with the SDK's frame-by-frame walk."""

import pyarrow as pa
import pytest

from rillet.framing import frame, unframe
from rillet_spark.datasource import _events


def test_columns_hold_exactly_the_whole_frames_and_leave_a_partial_one():
    payloads = [bytes([i % 251]) * (i % 70) for i in range(500)]  # empty events too
    buffer = bytearray(b"".join(frame(p) for p in payloads)) + frame(b"cut short")[:7]
    positions, events, consumed = _events(buffer, pa.binary())
    frames, expected_consumed = unframe(buffer)
    assert consumed == expected_consumed == len(buffer) - 7
    assert positions.tolist() == [f.position for f in frames]
    assert events.to_pylist() == payloads


def test_text_events_are_checked_as_utf8():
    _, events, _ = _events(bytearray(frame("día".encode()) + frame(b"")), pa.string())
    assert events.type == pa.string() and events.to_pylist() == ["día", ""]
    with pytest.raises(pa.ArrowInvalid):
        _events(bytearray(frame(b"\xff\xfe")), pa.string())


def test_a_corrupt_length_is_an_error_not_a_huge_event():
    with pytest.raises(ValueError, match="corrupt frame at 0"):
        _events(bytearray(b"\xff\xff\xff\xff" + b"x" * 10), pa.binary())


def test_no_whole_frame_gives_no_events():
    positions, events, consumed = _events(bytearray(b"\x00\x00"), pa.binary())
    assert (len(positions), len(events), consumed) == (0, 0, 0)


def test_on_a_spark_without_python_data_sources_the_import_names_the_supported_versions(monkeypatch):
    import sys

    for name in [m for m in sys.modules if m.startswith("rillet_spark")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyspark.sql.datasource", None)  # as on Spark 3.5
    with pytest.raises(ImportError, match=r"needs Spark 4\.0 or later .* this is Spark \d"):
        import rillet_spark  # noqa: F401


def test_runs_of_equal_sizes_are_cut_at_a_different_size_and_at_a_partial_frame():
    payloads = [b"a" * 60] * 300 + [b"b" * 7] + [b"c" * 60] * 5 + [b"d" * 7] * 2 + [b""] * 3 + [b"e" * 60] * 40
    buffer = bytearray(b"".join(frame(p) for p in payloads)) + frame(b"f" * 60)[:30]
    positions, events, consumed = _events(buffer, pa.binary())
    frames, expected_consumed = unframe(buffer)
    assert consumed == expected_consumed == len(buffer) - 30
    assert positions.tolist() == [f.position for f in frames]
    assert events.to_pylist() == payloads
