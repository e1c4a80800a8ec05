"""dataplane.deployment.batch_get on moto: the keys DynamoDB leaves unprocessed (a throttled
partition's share of a BatchGetItem) are asked for again after a growing pause, and not for ever.

Moto never throttles, so its answers are edited on the way back, as DynamoDB's would read: some of
the items found are moved from ``Responses`` to ``UnprocessedKeys``.
"""

from __future__ import annotations

import pytest
from dataplane_model import _api_calls_through
from pynamodb.exceptions import GetError
from this_thread import patch_in_this_thread

from dataplane import deployment as deployment_module
from dataplane.deployment import BATCH_GET_ATTEMPTS, batch_get
from dataplane.models import META_KEY, SegmentItem, SegmentMeta, WriterState, writer_key


@pytest.fixture
def items(deployment, unique) -> list[tuple[str, str]]:
    keys = []
    for n in range(150):  # two pages: 100 keys, then 50
        if n % 2:
            SegmentMeta(f"{unique}/s/{n}", META_KEY, created_ms=n).save()
            keys.append((f"{unique}/s/{n}", META_KEY))
        else:
            WriterState(f"{unique}/s/0#1#w0", writer_key(f"w{n}"), incarnation=1, first=n, last=n, offset=0,
                        time_ms=0, expires_at=0).save()
            keys.append((f"{unique}/s/0#1#w0", writer_key(f"w{n}")))
    return keys


def _throttling(answers_left_short: int | None):
    """Leaves half of what each BatchGetItem found unprocessed, for the first ``answers_left_short``
    answers (None: every answer); records each request's key count."""
    requests: list[int] = []

    def patched(original, client, operation, params):
        answer = original(client, operation, params)
        if operation != "BatchGetItem":
            return answer
        (table, wanted), = params["RequestItems"].items()
        requests.append(len(wanted["Keys"]))
        if answers_left_short is None or len(requests) <= answers_left_short:
            found = answer["Responses"][table]
            held_back = found[::2]
            answer["Responses"][table] = found[1::2]
            if held_back:
                answer["UnprocessedKeys"] = {table: {
                    "Keys": [{"pk": item["pk"], "sk": item["sk"]} for item in held_back],
                    "ConsistentRead": wanted.get("ConsistentRead", False)}}
        return answer

    return requests, patched


def test_unprocessed_keys_are_asked_for_again_after_growing_pauses(items, monkeypatch):
    pauses: list[float] = []
    patch_in_this_thread(monkeypatch, deployment_module.time, "sleep", pauses.append)
    patch_in_this_thread(monkeypatch, deployment_module.random, "uniform", lambda low, high: high)  # the ceiling
    requests, patched = _throttling(answers_left_short=3)
    with _api_calls_through(patched):
        found = batch_get(SegmentItem, reversed(items), consistent_read=True)
    assert sorted((item.pk, item.sk) for item in found) == sorted(items)
    assert {type(item) for item in found} == {SegmentMeta, WriterState}  # by their discriminator
    # The first page of 100 keys: 50 left, then 25, then 13 (three answers short), then the rest;
    # the second page of 50 comes whole.
    assert requests == [100, 50, 25, 13, 50]
    assert pauses == [0.025, 0.05, 0.1]  # a ceiling that doubles, none before a page's first request


def test_keys_still_unprocessed_after_the_last_attempt_raise_rather_than_spin(items, monkeypatch):
    patch_in_this_thread(monkeypatch, deployment_module.time, "sleep", lambda _s: None)
    requests, patched = _throttling(answers_left_short=None)
    with _api_calls_through(patched), pytest.raises(GetError, match="still unprocessed"):
        batch_get(SegmentItem, items[:8], consistent_read=True)
    assert requests == [8, 4, 2, 1, 1, 1][:BATCH_GET_ATTEMPTS]
    assert len(requests) == BATCH_GET_ATTEMPTS


def test_keys_that_are_missing_are_left_out(items):
    found = batch_get(SegmentItem, [items[0], ("no-such-segment/s/0", META_KEY)], consistent_read=True)
    assert [(item.pk, item.sk) for item in found] == [items[0]]
