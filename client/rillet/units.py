"""How Rillet states durations and byte counts to people (the CLI, the auto-scaler's and retention's
reasons, Dagster's reports): ``7d``, ``9m59s``, ``10 GB``, ``1.5 KB``. Imports nothing."""

from __future__ import annotations

_UNITS_MS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))
_UNITS_BYTES = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3),
                ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _exactly(count: int, units: tuple[tuple[str, int], ...], separator: str, smallest: str) -> str:
    """``count`` in the largest of ``units`` that states it exactly, else in ``smallest``."""
    for unit, size in units:
        if count and count % size == 0:
            return f"{count // size}{separator}{unit}"
    return f"{count}{separator}{smallest}"


def human_duration(ms: int) -> str:
    """The largest unit that states ``ms`` exactly: 604800000 -> ``7d``, 90000 -> ``90s``."""
    return _exactly(ms, _UNITS_MS, "", "ms")


def rounded_duration(ms: float) -> str:
    """``3s``, ``2h``: the largest unit, rounded down, for how long ago something happened."""
    for unit, size in _UNITS_MS:
        if ms >= size:
            return f"{int(ms // size)}{unit}"
    return f"{int(ms)}ms"


def short_duration(ms: float) -> str:
    """The largest unit and the next one, rounded down, for how long is left: ``9m59s``, ``45s``,
    ``1h2m``, ``10m``, ``0s``."""
    ms = max(0, int(ms))
    for i, (unit, size) in enumerate(_UNITS_MS):
        if ms >= size:
            text = f"{ms // size}{unit}"
            if i + 1 < len(_UNITS_MS):
                next_unit, next_size = _UNITS_MS[i + 1]
                rest = ms % size // next_size
                text += f"{rest}{next_unit}" if rest else ""
            return text
    return "0s"


def human_size(count: int) -> str:
    """The largest unit that states ``count`` bytes exactly: 10**10 -> ``10 GB``, 2**29 -> ``512 MiB``."""
    return _exactly(count, _UNITS_BYTES, " ", "B")


def human_bytes(count: float) -> str:
    """Rounded for reading (``1.5 KB``); human_size states a configured size exactly."""
    if count < 1000:
        return f"{count:.0f} B"
    for unit in ("KB", "MB", "GB"):
        count /= 1000
        if count < 1000:
            return f"{count:.1f} {unit}"
    return f"{count / 1000:.1f} TB"
