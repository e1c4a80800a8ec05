"""An SDK call with a value out of range fails with the typed error the server would answer."""

import pytest

from rillet import api
from rillet.errors import InvalidArgument


def test_an_out_of_range_argument_is_invalid_argument():
    with pytest.raises(InvalidArgument, match="timestamp_ms"):
        api.NoteTimeRequest(timestamp_ms=-1, position=[api.CutPosition(segment_id=0, offset=0)])
    with pytest.raises(InvalidArgument, match="offset"):
        api.CutPosition(segment_id=0, offset=2**63)


def test_a_nested_body_from_the_wire_is_invalid_argument_too():
    with pytest.raises(InvalidArgument, match="offset"):
        api.TruncateRequest.model_validate({"positions": [{"segment_id": 0, "offset": -1}]})
