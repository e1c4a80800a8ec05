"""The key-value table cost model runs, and its request units are the ones docs/kvt.md states."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(300)


def test_kvt_operations_cost_what_the_docs_state():
    code = "import json; from bench import kvt_cost; print(json.dumps(kvt_cost.run()))"
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=280,
                          env={**__import__("os").environ, "AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t"})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {name: (dynamo, plain) for name, dynamo, _total, plain in json.loads(done.stdout.strip().splitlines()[-1])}
    # a put: one consistent read of the table record (1 RRU) and a transaction of the state check and
    # the entry (2 items x 2 WRU); plain DynamoDB: one PutItem (1 WRU)
    assert rows["put"] == (pytest.approx(0.125 + 4 * 0.625), pytest.approx(0.625))
    # a get: the table record and the entry, both consistent reads (1 RRU each)
    assert rows["get"] == (pytest.approx(2 * 0.125), pytest.approx(0.125))
    # ten puts in one transaction: eleven items at 2 WRU, plus the record read
    assert rows["transaction of 10 puts"][0] == pytest.approx(0.125 + 22 * 0.625)
