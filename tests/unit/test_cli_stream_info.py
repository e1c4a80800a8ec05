"""``rillet stream info``'s segment table: each column under its header, whatever the widths; the
count of segments in the singular for one."""

from __future__ import annotations

import pytest

from rillet import cli
from rillet.cli import streams
from rillet.models import SegmentPosition, SegmentRange, StreamConfiguration, StreamInfo, StreamState


def _info(*tails: tuple[int, float, float, int]) -> StreamInfo:
    positions = [SegmentPosition(segment=SegmentRange(segment_id=i, low=low, high=high), offset=offset)
                 for i, low, high, offset in tails]
    return StreamInfo(scope="demo", stream="s", state=StreamState.ACTIVE, configuration=StreamConfiguration(),
                      created_at_ms=0, current_epoch=1, current_segments=[p.segment for p in positions],
                      head=[p.model_copy(update={"offset": 0}) for p in positions], tail=positions)


class _Manager:
    def __init__(self, info: StreamInfo) -> None:
        self.info = info

    def get_stream_info(self, scope: str, stream: str) -> StreamInfo:
        return self.info


@pytest.mark.parametrize(("info", "count"), [
    (_info((0, 0.0, 1.0, 18)), "1 segment"),
    (_info((4294967297, 0.0, 0.5, 1_234_567), (4294967298, 0.5, 1.0, 9)), "2 segments"),
])
def test_the_segment_table_sits_under_its_headers(capsys, monkeypatch, info, count):
    monkeypatch.setattr(streams, "_manager", lambda args: _Manager(info))
    assert cli.main(["stream", "info", "demo/s"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"segments    {count}" in lines
    header = next(line for line in lines if line.split()[:1] == ["id"])
    rows = lines[lines.index(header) + 1:]
    assert len(rows) == len(info.tail)
    for row, position in zip(rows, info.tail, strict=True):
        cells = {"id": str(position.segment.segment_id), "range": f"[{position.segment.low:.4f}, ",
                 "head": "0", "tail": str(position.offset)}
        for name, cell in cells.items():
            assert row[header.index(name):].startswith(cell), (name, header, row)
