"""How the CLI, and Dagster's reports, state sizes, durations, policies and rejected values: ``10 GB``,
``7d``, ``time >= 7d``, ``fixed:3``. Imports nothing, so it costs a command nothing to load."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rillet.models import RetentionPolicy, ScalingPolicy

_UNITS_MS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))
_UNITS_BYTES = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3),
                ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def human_duration(ms: int) -> str:
    """The largest unit that states ``ms`` exactly: 604800000 -> ``7d``, 90000 -> ``90s``."""
    for unit, size in _UNITS_MS:
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def rounded_duration(ms: float) -> str:
    """``3s``, ``2h``: the largest unit, rounded down, for how long ago something happened."""
    for unit, size in _UNITS_MS:
        if ms >= size:
            return f"{int(ms // size)}{unit}"
    return f"{int(ms)}ms"


def human_size(count: int) -> str:
    """The largest unit that states ``count`` bytes exactly: 10**10 -> ``10 GB``, 2**29 -> ``512 MiB``."""
    for unit, size in _UNITS_BYTES:
        if count and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} B"


def describe_retention(policy: RetentionPolicy | None) -> str:
    """``time >= 7d``, ``size 10 GB..100 GB``, ``consumption-based, subscribers timeout 1h, fallback after 7d; ...``."""
    if policy is None:
        return "none (kept forever)"
    show = human_duration if policy.retention_type.value == "TIME" else human_size
    kind = policy.retention_type.value.lower()
    limits = (f"{kind} {show(policy.retention_param)}..{show(policy.retention_max)}" if policy.retention_max is not None
              else f"{kind} >= {show(policy.retention_param)}")
    if policy.consumption is None:
        return limits
    text = f"consumption-based, subscribers timeout {human_duration(policy.consumption.subscriber_timeout_ms)}"
    if policy.consumption.fallback_after_ms is not None:
        text += f", fallback after {human_duration(policy.consumption.fallback_after_ms)}"
    return f"{text}; {limits}"


def describe_scaling(policy: ScalingPolicy) -> str:
    """``fixed:3``, ``events:100,2,1``: the form ``--scaling`` takes."""
    if policy.scale_type.value == "FIXED_NUM_SEGMENTS":
        return f"fixed:{policy.min_num_segments}"
    kind = "events" if policy.scale_type.value == "BY_RATE_IN_EVENTS_PER_SEC" else "kbytes"
    return f"{kind}:{policy.target_rate},{policy.scale_factor},{policy.min_num_segments}"


def human_bytes(count: float) -> str:
    """Rounded for reading (``1.5 KB``); human_size states a configured size exactly."""
    if count < 1000:
        return f"{count:.0f} B"
    for unit in ("KB", "MB", "GB"):
        count /= 1000
        if count < 1000:
            return f"{count:.1f} {unit}"
    return f"{count / 1000:.1f} TB"


def counted(count: int, noun: str) -> str:
    """``1 segment``, ``3 segments``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


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


def one_line(error: ValueError) -> str:
    """A rejected value in one line: a pydantic error's first message (naming the field), not its report."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError) and error.errors():
        first = error.errors(include_url=False)[0]
        cause = first.get("ctx", {}).get("error")
        message = str(cause) if first["type"] == "value_error" and cause is not None else first["msg"]
        field = ".".join(str(part) for part in first["loc"])
        more = error.error_count() - 1
        return f"{field + ': ' if field else ''}{message}{f' (and {more} more)' if more else ''}"
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
