"""Elapsed time that keeps counting while the machine is suspended.

``time.monotonic()`` stops while a laptop sleeps or a VM is paused, so a block held across a week of
sleep would claim to be seconds old and a server that forgot its writer id would append it again. The
wall clock counts across a suspend but may be stepped back or forth. The larger of the two never
understates an age; overstating one only turns a resend into a typed WriterExpired (outcome unknown),
never into a duplicate.
"""

from __future__ import annotations

import time


class Since:
    """A moment, to ask later how long ago it was. Both clocks are read through this module's ``time``
    at each call (so a test that moves it moves every moment and age alike)."""

    __slots__ = ("monotonic", "wall")

    def __init__(self, monotonic: float | None = None, wall: float | None = None) -> None:
        self.monotonic = time.monotonic() if monotonic is None else monotonic
        self.wall = time.time() if wall is None else wall

    def elapsed_s(self) -> float:
        return max(time.monotonic() - self.monotonic, time.time() - self.wall, 0.0)

    def elapsed_ms(self) -> int:
        return int(self.elapsed_s() * 1000)
