"""Consumption-based retention under concurrent reader-group creates, resets, deletes and checkpoint
publishes with a running retention schedule (issue 31): the history run (bench/cbr_history.py, small here)
must truncate no event before every group that existed throughout the cycle acknowledged it, never move the
head back, and end with exactly the live groups subscribed; and the run must actually have done each of
those things, or it proves nothing."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SMALL = {"groups": 3, "duration_s": 25.0, "seed": 7}  # long enough for its minimum counts on a busy machine


def _harness():
    """The bench module, loaded from its file (tests/bench shadows the ``bench`` package here)."""
    spec = importlib.util.spec_from_file_location("rillet_cbr_history", ROOT / "bench" / "cbr_history.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_checker_catches_a_truncation_past_a_registered_group():
    h = _harness()
    Step, Cycle, check = h.Step, h.Cycle, h.check
    steps = [Step("g", "create", 0.0, 1.0, 100), Step("g", "publish", 2.0, 3.0, 300)]
    assert check(steps, [Cycle(4.0, 5.0, 300)]) == []
    assert len(check(steps, [Cycle(4.0, 5.0, 400)])) == 1
    # a publish overlapping the cycle may have been in force: not a violation; after a reset back it is
    assert check(steps, [Cycle(2.5, 3.5, 300)]) == []
    reset = [*steps, Step("g", "reset", 3.5, 3.8, 200)]
    assert len(check(reset, [Cycle(4.0, 5.0, 300)])) == 1
    assert len(check(steps, [Cycle(4.0, 5.0, 300), Cycle(6.0, 7.0, 200)])) == 1  # the head moved back


@pytest.mark.timeout(120)
def test_no_event_is_truncated_before_every_subscriber_acknowledged_it():
    """The small run in its own interpreter (it binds the models to its own moto, as ``python -m`` would)."""
    code = ("import dataclasses, json; from bench import cbr_history as h; "
            f"r = h.run(h.Settings(**{SMALL!r})); print(h.report(r)); print(json.dumps(dataclasses.asdict(r)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False, capture_output=True, text=True,
                          timeout=110)
    assert done.returncode == 0, done.stderr[-3000:]
    *lines, last = done.stdout.strip().splitlines()
    result, figures = json.loads(last), "\n".join(lines)
    assert result["violations"] == [] and result["notes"] == [], figures
    ops = result["operations"]
    assert ops.get("create", 0) >= 4 and ops.get("reset", 0) >= 2 and ops.get("delete", 0) >= 2, figures
    assert result["advances"] >= 10 and result["truncations"] >= 3, figures
