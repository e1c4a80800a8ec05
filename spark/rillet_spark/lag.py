"""A streaming query's backlog from its progress, as Kafka's source reports offsets behind latest.

On Spark 4.2 and later the source reports the streams' tails (``reportLatestOffset``), so each source
in ``query.lastProgress["sources"]`` carries the end of the batch it read (``endOffset``) and the
tails when it was planned (``latestOffset``), both as stream cuts. Spark 4.0 and 4.1 do not ask a
Python source for its latest offset: there ``latestOffset`` is the batch's end and the backlog reads 0.
"""

from __future__ import annotations

import json

from rillet.stream_cut import StreamCut


def backlog_bytes(progress: dict) -> dict[str, int]:
    """Bytes between the end of the last batch and the tails, per ``scope/stream``, for every Rillet
    source of a query's progress (``query.lastProgress``). A segment the batch has not reached yet
    counts from its start; one the tail has left (sealed and read) counts nothing."""
    backlog: dict[str, int] = {}
    for source in progress.get("sources", []):
        end, latest = _cuts(source.get("endOffset")), _cuts(source.get("latestOffset"))
        for name, tail in latest.items():
            reached = {p.segment.segment_id: p.offset for p in end[name].positions} if name in end else {}
            backlog[name] = backlog.get(name, 0) + sum(
                max(0, p.offset - reached.get(p.segment.segment_id, 0)) for p in tail.positions)
    return backlog


def _cuts(offset) -> dict[str, StreamCut]:
    """The cuts of a Rillet source offset as the progress gives it (a JSON string or a dict); none for
    another source's."""
    if isinstance(offset, str):
        try:
            offset = json.loads(offset)
        except ValueError:
            return {}
    if not isinstance(offset, dict) or not ("cuts" in offset or "cut" in offset):
        return {}
    cuts = [StreamCut.from_text(text) for text in (offset["cuts"] if "cuts" in offset else [offset["cut"]])]
    return {f"{cut.scope}/{cut.stream}": cut for cut in cuts}
