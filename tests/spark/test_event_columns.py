"""The Spark source's unframing into Arrow columns agrees with the SDK's frame-by-frame walk, for plain
frames and for frames that kept their routing key and time (rillet.framing)."""

import random
from types import SimpleNamespace

import pyarrow as pa
import pytest

from rillet import framing
from rillet.framing import frame, unframe
from rillet_spark import limits
from rillet_spark.limits import _after_events
from rillet_spark.planning import _Piece
from rillet_spark.unframing import _events


def test_columns_hold_exactly_the_whole_frames_and_leave_a_partial_one():
    payloads = [bytes([i % 251]) * (i % 70) for i in range(500)]  # empty events too
    buffer = bytearray(b"".join(frame(p) for p in payloads)) + frame(b"cut short")[:7]
    unframed = _events(buffer, pa.binary())
    frames, expected_consumed = unframe(buffer)
    assert unframed.consumed == expected_consumed == len(buffer) - 7
    assert unframed.positions.tolist() == [f.position for f in frames]
    assert unframed.events.to_pylist() == payloads
    assert unframed.routing_keys.null_count == unframed.timestamps.null_count == len(payloads)


def test_text_events_are_checked_as_utf8():
    events = _events(bytearray(frame("día".encode()) + frame(b"")), pa.string()).events
    assert events.type == pa.string() and events.to_pylist() == ["día", ""]
    with pytest.raises(pa.ArrowInvalid):
        _events(bytearray(frame(b"\xff\xfe")), pa.string())


def test_a_corrupt_length_is_an_error_not_a_huge_event():
    with pytest.raises(ValueError, match="corrupt frame at 0"):
        _events(bytearray(b"\xff\xff\xff\xff" + b"x" * 10), pa.binary())


def test_no_whole_frame_gives_no_events():
    unframed = _events(bytearray(b"\x00\x00"), pa.binary())
    assert (len(unframed.positions), len(unframed.events), len(unframed.routing_keys), unframed.consumed) == (0, 0, 0, 0)


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
    unframed = _events(buffer, pa.binary())
    frames, expected_consumed = unframe(buffer)
    assert unframed.consumed == expected_consumed == len(buffer) - 30
    assert unframed.positions.tolist() == [f.position for f in frames]
    assert unframed.events.to_pylist() == payloads


def _as_columns(unframed):
    """(position, payload, routing key, timestamp in ms) per event, as ``framing.unframe`` gives them."""
    micros = unframed.timestamps.cast(pa.int64()).to_pylist()
    return list(zip(unframed.positions.tolist(), unframed.events.to_pylist(), unframed.routing_keys.to_pylist(),
                    [None if m is None else m // 1000 for m in micros], strict=True))


def _mixed_frames(count: int, seed: int = 7) -> list[bytes]:
    """Plain frames and kept ones with a key, a time, both or neither, in random order and runs."""
    rng = random.Random(seed)
    frames = []
    for i in range(count):
        payload = bytes([i % 251]) * rng.choice([0, 1, 60, 60, 60, 300])
        kind = rng.choice(["plain", "both", "both", "key", "time", "none"])
        key = rng.choice(["k", "käy", "x" * 1024, ""]) if kind in ("both", "key") else None
        timestamp = rng.choice([0, 1_700_000_000_123, 2**53]) if kind in ("both", "time") else None
        run = rng.choice([1, 1, 5, 40])  # long runs of equal frames take the numpy path
        frames += [frame(payload, key, timestamp, keep=kind != "plain")] * run
    return frames


def test_kept_keys_and_times_fill_their_columns_beside_plain_frames():
    buffer = bytearray(b"".join(_mixed_frames(600))) + frame(b"partial", "k", 5, keep=True)[:12]
    unframed = _events(buffer, pa.binary(), base=1000)
    frames, consumed = unframe(buffer, base=1000)
    assert unframed.consumed == consumed == len(buffer) - 12
    assert _as_columns(unframed) == [(f.position, f.payload, f.routing_key, f.timestamp_ms) for f in frames]
    assert unframed.routing_keys.type == pa.string()
    assert unframed.timestamps.type == pa.timestamp("us", tz="UTC")  # what Spark's TimestampType takes
    assert any(f.routing_key is None for f in frames) and any(f.timestamp_ms is None for f in frames)


def test_a_buffer_of_kept_frames_alone_and_kept_text_events():
    payloads = ["día", "", "x" * 70]
    buffer = bytearray(b"".join(frame(p.encode(), "k", 42, keep=True) for p in payloads for _ in range(50)))
    unframed = _events(buffer, pa.string())
    assert unframed.events.type == pa.string()
    assert unframed.events.to_pylist() == [p for p in payloads for _ in range(50)]
    assert set(unframed.routing_keys.to_pylist()) == {"k"}
    assert set(unframed.timestamps.cast(pa.int64()).to_pylist()) == {42_000}


@pytest.mark.parametrize("body, why", [
    (b"", "without its flags byte"),
    (bytes([framing.HAS_TIME]) + b"1234567", "run past the frame"),  # 7 of the time's 8 bytes
    (bytes([framing.HAS_KEY]) + b"\x00", "run past the frame"),  # half the key's length
    (bytes([framing.HAS_KEY]) + b"\x00\x09abc", "kept key runs past the frame"),
    (bytes([framing.HAS_KEY]) + b"\x00\x02\xff\xfe", "routing key is not UTF-8"),
    (bytes([framing.HAS_TIME]) + (2**63).to_bytes(8, "big"), "beyond Spark's timestamps"),
])
def test_a_corrupt_kept_frame_is_an_error_naming_its_offset(body, why):
    corrupt = (framing.KEPT | len(body)).to_bytes(4, "big") + body
    good = frame(b"fine", "k", 1, keep=True)
    with pytest.raises(ValueError, match=f"corrupt frame at {500 + 2 * len(good)}: .*{why}"):
        _events(bytearray(good * 2 + corrupt + good), pa.binary(), base=500)


def test_a_kept_frame_longer_than_the_largest_body_is_corrupt():
    word = framing.KEPT | (framing.MAX_BODY_SIZE + 1)
    with pytest.raises(ValueError, match="corrupt frame at 0: length"):
        _events(bytearray(word.to_bytes(4, "big") + b"x" * 10), pa.binary())


class _Segment:
    """The read API of one segment holding ``data``, answering at most ``answer`` bytes per read."""

    def __init__(self, data: bytes, answer: int) -> None:
        self.segments = self
        self.data, self.answer = data, answer

    def read(self, scope, stream, segment_id, offset, length, incarnation=None):
        return SimpleNamespace(data=self.data[offset:offset + min(length, self.answer)])


@pytest.mark.parametrize("window", [64 * 1024, 100])  # one window, and events running past windows
def test_the_driver_walk_for_max_events_per_trigger_masks_the_kept_flag(monkeypatch, window):
    """A kept frame's word has its high bit set: read as a length it would skip about 2 GB."""
    monkeypatch.setattr(limits, "COUNT_WINDOW_BYTES", window)
    frames = _mixed_frames(200, seed=3)
    data = b"".join(frames)
    ends = [position + length for position, length, *_ in unframe(data)[0]]
    piece = _Piece("s", "t", 0, 0, len(data))
    for count in (1, 7, 150, len(ends)):
        assert _after_events(_Segment(data, answer=4096), piece, count) == ends[count - 1]
    assert _after_events(_Segment(data, answer=4096), piece, len(ends) + 5) == len(data)
    start = ends[9]
    assert _after_events(_Segment(data, answer=4096), _Piece("s", "t", 0, start, len(data)), 3) == ends[12]
