"""bench.latency runs (so its table cannot rot) and its figures are sane: every event acknowledged
and read once, latencies positive (ack-to-read at least 0 and below write-to-read), p50 <= p99, and
the cost profile sending fewer requests per GB than the default. No timing is asserted."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(300)


def test_the_latency_table_has_a_sane_row_per_profile_and_rate():
    done = subprocess.run([sys.executable, "-m", "bench.latency", "--quick"], check=False, capture_output=True,
                          text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    header = lines.index(next(line for line in lines if line.startswith("profile")))
    rows = [line.split() for line in lines[header + 1:] if line.startswith(("default ", "cost "))]
    assert [(r[0], float(r[1])) for r in rows] == [("default", 10), ("default", 100), ("cost", 10), ("cost", 100)]
    for profile, rate, events, acked, read, ack50, ack99, read50, read99, after50, after99, requests, per_gb in rows:
        assert int(events) == round(float(rate) * 2) == int(acked) == int(read)
        assert 0 < float(ack50) <= float(ack99) and 0 < float(read50) <= float(read99)
        assert 0 <= float(after50) <= float(after99) <= float(read99)
        assert 0 < int(requests) <= int(events)
        assert float(per_gb) == pytest.approx(int(requests) / (int(events) * 1024 / 1e9), rel=0.01)
    requests = {(r[0], float(r[1])): int(r[11]) for r in rows}
    assert requests[("cost", 100)] < requests[("default", 100)]
