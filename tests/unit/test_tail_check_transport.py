"""Where the SDK sends tail checks (issue 27): to the tails URL GET /v1/endpoints names, or, from a
deployment older than the tails function (no tails_url in its answer), to the read URL."""

from __future__ import annotations

import pytest

import rillet
from rillet import api
from rillet.segments import SegmentClient
from rillet.transport import Transport

OLD = {"append_url": "http://append.test", "read_url": "http://read.test"}
NEW = {**OLD, "tails_url": "http://tails.test"}


def _segments(answer: dict) -> SegmentClient:
    connection = rillet.Connection("http://controller.test", sign=False)
    asked = []
    connection.controller.transport.json = lambda method, path, **kw: asked.append((method, path)) or answer
    segments = connection.segments
    assert asked == [("GET", "/v1/endpoints")]
    return segments


def test_an_answer_without_the_tails_url_sends_tail_checks_to_the_read_url():
    assert api.Endpoints.model_validate(OLD).tail_check_url == "http://read.test"
    segments = _segments(OLD)
    assert segments.tails_transport is segments.read_transport
    assert segments.read_transport.endpoint == "http://read.test"


def test_an_answer_with_the_tails_url_sends_tail_checks_there_and_nothing_else():
    assert api.Endpoints.model_validate(NEW).tail_check_url == "http://tails.test"
    segments = _segments(NEW)
    assert segments.tails_transport.endpoint == "http://tails.test"
    assert segments.read_transport.endpoint == "http://read.test"
    sent = {"read": [], "tails": []}
    for name, paths in sent.items():
        transport = getattr(segments, f"{name}_transport")
        transport.json = lambda method, path, paths=paths, **kw: paths.append(path) or {"tails": [
            {"segment_id": 4, "found": True, "start_offset": 0, "length": 7, "sealed": False}]}
    assert [t.length for t in segments.tails("sc", "st", [4])] == [7]
    assert sent == {"read": [], "tails": ["/v1/segments/sc/st/tails"]}


def test_a_newer_deployments_answer_still_parses():
    """Fields added later are ignored (an SDK that refused them would break on the next upgrade)."""
    assert api.Endpoints.model_validate({**NEW, "another_url": "http://x.test"}).tail_check_url == "http://tails.test"


@pytest.mark.parametrize("missing", ["append_url", "read_url"])
def test_an_answer_without_a_data_url_is_refused(missing):
    with pytest.raises(rillet.InvalidArgument):
        api.Endpoints.model_validate({k: v for k, v in NEW.items() if k != missing})


def test_a_segment_client_without_a_tails_transport_checks_tails_at_the_read_api():
    read = Transport("http://read.test", sign=False)
    assert SegmentClient(Transport("http://append.test", sign=False), read).tails_transport is read
