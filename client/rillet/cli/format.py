"""How the CLI states policies, counts and rejected values: ``time >= 7d``, ``fixed:3``, ``3 segments``
(sizes and durations: rillet.units). Imports nothing else, so it costs a command nothing to load."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rillet.units import human_duration, human_size

if TYPE_CHECKING:
    from rillet.models import RetentionPolicy, ScalingPolicy


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


def counted(count: int, noun: str) -> str:
    """``1 segment``, ``3 segments``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


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
