"""The reader group state's stored form (controlplane.models.CompressedJSONAttribute): deflated, a
fraction of its JSON, and a record written before compression still reads."""

import json

from controlplane.models import ReaderGroupRecord

ATTRIBUTE = ReaderGroupRecord.state


def test_a_state_round_trips_in_a_fraction_of_its_json():
    state = {"readers": {f"reader-{i:04d}": {"segments": {f"scope/stream/{i}": {"offset": i * 1000}}}
                         for i in range(500)}}
    stored = ATTRIBUTE.serialize(state)
    assert stored.startswith("z:") and ATTRIBUTE.deserialize(stored) == state
    assert len(stored) < len(json.dumps(state)) / 4


def test_a_record_stored_as_plain_json_before_compression_reads_as_it_is():
    assert ATTRIBUTE.deserialize('{"config": {"generation": 3}, "readers": {}}') == {"config": {"generation": 3},
                                                                                   "readers": {}}
