"""The history checker of the e2e reader-group tests finds what it is meant to find."""

from __future__ import annotations

try:
    from history import History, event_text
except ModuleNotFoundError:  # tests/ is a package
    from tests.history import History, event_text


def history_of(writes: list[str], reads: list[tuple[str, str]], unacknowledged: set[str] = frozenset()) -> History:
    h = History()
    for e in writes:
        h.attempt(e)
        if e not in unacknowledged:
            h.acknowledge(e)
    for reader, e in reads:
        h.read(reader, e)
    return h


W = [event_text(0, 0, 0), event_text(0, 0, 1), event_text(0, 1, 0), event_text(1, 0, 0)]


def test_a_clean_history_has_no_problem():
    assert history_of(W, [("a", W[2]), ("b", W[0]), ("a", W[3]), ("b", W[1])]).check() == []


def test_an_unacknowledged_event_may_be_missing_but_not_duplicated():
    assert history_of(W, [("a", W[0]), ("a", W[2]), ("a", W[3])], unacknowledged={W[1]}).check() == []
    problems = history_of(W, [("a", w) for w in W + [W[1]]], unacknowledged={W[1]}).check()
    assert len(problems) == 2 and "read 2 times" in problems[0]  # a duplicate, and out of order


def test_lost_duplicated_unknown_and_reordered_events_are_reported():
    lost = history_of(W, [("a", W[0]), ("a", W[1]), ("a", W[2])]).check()
    assert lost == [f"acknowledged {W[3]} never read"]
    duplicated = history_of(W, [("a", w) for w in W] + [("b", W[3])]).check()
    assert "read 2 times" in duplicated[0] and len(duplicated) == 2  # also: not after the first read
    unknown = history_of(W, [("a", w) for w in W] + [("a", "w9:k9:0")]).check()
    assert unknown == ["w9:k9:0 read but never written"]
    reordered = history_of(W, [("a", W[1]), ("b", W[0]), ("a", W[2]), ("a", W[3])]).check()
    assert len(reordered) == 1 and "w0:k0: seq 0 read" in reordered[0]
