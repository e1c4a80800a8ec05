"""The CLI's human output: the progress line on a terminal, sizes and durations, retention policies."""

import io

from rillet import RetentionPolicy
from rillet.cli.data import Progress
from rillet.cli.format import describe_retention
from rillet.units import human_duration, human_size


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_drawn_on_a_terminal_only():
    terminal = Terminal()
    progress = Progress("wrote", terminal)
    for _ in range(3):
        progress.add(1500)
    progress.done()
    text = terminal.getvalue()
    assert text.startswith("\rwrote 1 events, 1.5 KB, ") and text.endswith("\n")
    assert "\rwrote 3 events, 4.5 KB, " in text

    piped = io.StringIO()
    progress = Progress("wrote", piped)
    progress.add(10)
    progress.done()
    assert piped.getvalue() == "" and (progress.events, progress.bytes) == (1, 10)


def test_policies_in_human_terms():
    assert human_duration(604_800_000) == "7d" and human_duration(90_000) == "90s" and human_duration(1500) == "1500ms"
    assert human_size(10**10) == "10 GB" and human_size(512 * 2**20) == "512 MiB" and human_size(1001) == "1001 B"
    assert describe_retention(RetentionPolicy.by_time(604_800_000)) == "time >= 7d"
    assert describe_retention(RetentionPolicy.by_size(10**10, 10**11)) == "size 10 GB..100 GB"
    consumption = RetentionPolicy.by_time(604_800_000).with_consumption(3_600_000, 604_800_000)
    assert describe_retention(consumption) == (
        "consumption-based, subscribers timeout 1h, fallback after 7d; time >= 7d")
    assert describe_retention(None) == "none (kept forever)"
