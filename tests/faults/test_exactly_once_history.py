"""Exactly once across concurrent commit finishers and a stream name deleted and created again (issue 25).

The small run of bench/exactly_once_history.py: transactions each committed by two concurrent
``commit()`` calls (the second a few ms late, from a second client or another thread), and writers
appending while a driver seals, deletes and re-creates their stream's name. It must show no anomaly
(nothing lost, duplicated, reordered, failed-but-stored, phantom, split, or in another incarnation),
and the races it exists for must have happened: both commit calls answering COMMITTED, every
re-create, and writes against a sealed incarnation refused with a typed error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SMALL = {"transactions": 8, "events_per_txn": 4, "writers": 2, "events_per_writer": 60, "recreates": 2,
         "deadline_s": 60.0}


def _run_history(sublog_shards: int) -> tuple[dict, str]:
    """The small run in its own interpreter (it binds the models to its stack, as ``python -m`` would),
    its streams' segments in sub-log mode with ``sublog_shards`` (0: the chain): the result as JSON,
    and the printed figures for the failure messages."""
    code = ("import dataclasses, json; from bench import exactly_once_history as h; "
            f"r = h.run(h.Settings(**{SMALL!r})); print(h.report(r)); "
            "print(json.dumps({**dataclasses.asdict(r), 'violations': r.violations}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2], check=False,
                          env={**os.environ, "RILLET_SUBLOG_SHARDS": str(sublog_shards)},
                          capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stderr[-3000:]
    *figures, result = done.stdout.strip().splitlines()
    return json.loads(result), "\n".join(figures)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sublog_shards", [0, 4], ids=["chain", "sublogs"])
def test_double_commits_and_recreated_names_keep_every_event_exactly_once(sublog_shards):
    result, figures = _run_history(sublog_shards)
    assert not result["notes"], figures
    for part in ("txn_anomalies", "re_anomalies"):
        for kind in ("unresolved", "lost", "duplicated", "reordered_keys", "failed_but_stored", "failed_unproven",
                     "phantoms"):
            assert result[part][kind] == [], f"{part} {kind}:\n{figures}"
    assert result["not_contiguous"] == [] and result["misplaced"] == [], figures
    assert result["violations"] == 0, figures

    committed = SMALL["transactions"] - SMALL["transactions"] // 5
    assert result["txn_states"] == {"COMMITTED": committed, "ABORTED": SMALL["transactions"] // 5}, figures
    assert sum(result["commit_calls"].values()) == 2 * committed, figures
    assert result["both_commits_ok"] > 0, figures  # both finishers of one commit ran to the end
    assert result["txn_anomalies"]["acknowledged"] == committed * SMALL["events_per_txn"], figures

    assert len(result["incarnations"]) == SMALL["recreates"] + 1, figures
    assert all(n > 0 for n in result["incarnations"]), figures  # every incarnation was written to
    assert result["stale_typed_failures"] > 0, figures  # writes against a sealed incarnation, refused typed
    assert result["re_anomalies"]["acknowledged"] == sum(result["incarnations"]), figures
