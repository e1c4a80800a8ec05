"""Per-segment traffic rates, decayed over 2, 5, 10 and 20 minutes as Pravega's segment store does.

Four rates are kept: events, bytes, append requests (blocks and merges committed), and appends
waiting. Pravega's policies scale on the first two; the other two tell auto-scaling when a segment
nears what one segment commits (dataplane/scale_signals.py), whatever its events and bytes. The third
counts what committed; the fourth what was offered and had to wait: each committed append adds the
seconds it spent behind other appenders' claims, so its rate is the mean number of appends waiting
behind others at any moment (Little's law). A lone writer adds nothing to it; writers that saturate
the segment add about one each, at any request latency, even while the commits a second stay low.

(The windows can be shortened with RILLET_RATE_WINDOWS_S so that tests and demos see auto-scaling
in seconds; the append path and the auto-scaler read the same setting.)

Each rate is an exponentially decayed sum: on every append ``r <- r * exp(-dt / w) + n / w``. For a
steady input of ``n`` per second the rate converges to ``n``, and an idle segment's rate decays
towards zero without anything being written: readers decay the stored value to "now". The state
rides on the segment's head record, so keeping it costs no extra request per append.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass


def _windows() -> tuple[float, ...]:
    """The four windows in seconds; RILLET_RATE_WINDOWS_S shrinks them (tests and demos only)."""
    configured = os.environ.get("RILLET_RATE_WINDOWS_S")
    windows = tuple(float(w) for w in configured.split(",")) if configured else (120.0, 300.0, 600.0, 1200.0)
    if len(windows) != 4 or any(w <= 0 for w in windows):
        raise ValueError(f"RILLET_RATE_WINDOWS_S must be four positive numbers, got {configured!r}")
    return windows


WINDOWS_S = _windows()


@dataclass(frozen=True)
class Rates:
    at_ms: int
    events: tuple[float, ...]
    bytes: tuple[float, ...]
    appends: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)  # append requests a second
    waiting: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)  # appends waiting behind other appenders, on average

    @classmethod
    def empty(cls, at_ms: int) -> Rates:
        zero = tuple(0.0 for _ in WINDOWS_S)
        return cls(at_ms, zero, zero, zero, zero)

    @classmethod
    def from_item(cls, item: dict | None, now_ms: int) -> Rates:
        if not item:
            return cls.empty(now_ms)
        # "a" and "w" are absent on head records written before append requests and waiting were
        # counted: none counted yet.
        none = [0.0] * len(WINDOWS_S)
        return cls(int(item["t"]), tuple(float(x) for x in item["e"]), tuple(float(x) for x in item["b"]),
                   tuple(float(x) for x in item.get("a", none)), tuple(float(x) for x in item.get("w", none)))

    def to_item(self) -> dict:
        return {"t": self.at_ms, "e": [round(x, 6) for x in self.events], "b": [round(x, 6) for x in self.bytes],
                "a": [round(x, 6) for x in self.appends], "w": [round(x, 6) for x in self.waiting]}

    def decayed(self, now_ms: int) -> Rates:
        dt = max(0.0, (now_ms - self.at_ms) / 1000.0)
        factors = [math.exp(-dt / w) for w in WINDOWS_S]
        return Rates(max(now_ms, self.at_ms), tuple(r * f for r, f in zip(self.events, factors)),
                     tuple(r * f for r, f in zip(self.bytes, factors)),
                     tuple(r * f for r, f in zip(self.appends, factors)),
                     tuple(r * f for r, f in zip(self.waiting, factors)))

    def record(self, now_ms: int, events: int, size: int, appends: int = 1, waited_s: float = 0.0) -> Rates:
        """The rates after ``appends`` append requests (a sub-log batch commits several) of ``events``
        events and ``size`` bytes in all at ``now_ms``, which waited ``waited_s`` seconds in all behind
        other appenders."""
        base = self.decayed(now_ms)
        return Rates(base.at_ms, tuple(r + events / w for r, w in zip(base.events, WINDOWS_S)),
                     tuple(r + size / w for r, w in zip(base.bytes, WINDOWS_S)),
                     tuple(r + appends / w for r, w in zip(base.appends, WINDOWS_S)),
                     tuple(r + waited_s / w for r, w in zip(base.waiting, WINDOWS_S)))
