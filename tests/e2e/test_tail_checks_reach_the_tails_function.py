"""An SDK reader idle at the tail sends its tail checks to the tails function (issue 27): the standalone
stack serves it on a port of its own, metered at its 128 MB, and counts its invocations; the read
function gets none of them, and the first event still reaches the reader."""

from __future__ import annotations

import rillet
from rillet.framing import frame


def test_an_idle_reader_checks_tails_at_the_tails_function_only(stack, manager, url, unique):
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(2)))
    factory = rillet.EventStreamClientFactory(unique, url)
    reader = factory.create_stream_reader("s", rillet.BytesSerializer(), backoff=rillet.TailBackoff(first_s=0.05, max_s=0.4))
    segments = reader.connection.segments
    assert reader.connection.controller.endpoints.tails_url == stack.functions["tails"].url
    assert stack.functions["tails"].spec.memory_mb == 128
    sent = {"read": [], "tails": []}
    for name, paths in sent.items():
        transport = getattr(segments, f"{name}_transport")
        original = transport.request
        transport.request = lambda method, path, paths=paths, original=original, **kw: (
            paths.append(path) or original(method, path, **kw))

    assert reader.read_next_event(timeout_ms=0) is None  # each segment located once: at the tail
    sent["read"].clear()
    sent["tails"].clear()
    tails_before = stack.invocations.invocations.get("tails", 0)
    assert reader.read_next_event(timeout_ms=2000) is None
    assert sent["read"] == [], sent  # no read request while idle
    assert len(sent["tails"]) >= 3 and all(path.endswith("/tails") for path in sent["tails"]), sent
    # every check was an invocation of the tails function (others may run beside this test: at least)
    assert stack.invocations.invocations.get("tails", 0) - tails_before >= len(sent["tails"])

    first = reader.connection.controller.current_segments(unique, "s")[0].segment_id
    segments.append(unique, "s", first, "w", 0, 1, frame(b"news"))
    event = reader.read_next_event(timeout_ms=5000)
    assert event is not None and event.event == b"news" and event.pointer.segment_id == first


def _sent(reader) -> dict[str, list[str]]:
    """The paths of the read and tails requests ``reader`` sends from now on."""
    sent: dict[str, list[str]] = {"read": [], "tails": []}
    for name, paths in sent.items():
        transport = getattr(reader.connection.segments, f"{name}_transport")
        original = transport.request
        transport.request = lambda method, path, paths=paths, original=original, **kw: (
            paths.append(path) or original(method, path, **kw))
    return sent


def test_a_reader_whose_last_answer_reached_the_length_checks_the_tail_instead_of_locating_it(manager, url, unique):
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(1)))
    factory = rillet.EventStreamClientFactory(unique, url)
    writer = factory.create_event_writer("s", rillet.BytesSerializer())
    for i in range(3):
        writer.write_event(b"e%d" % i)
    writer.flush()
    reader = factory.create_stream_reader("s", rillet.BytesSerializer(), backoff=rillet.TailBackoff(first_s=0.5))
    sent = _sent(reader)
    got = []
    while (events := reader.read_events(timeout_ms=0)) is not None:
        got += list(events.payloads)
    assert got == [b"e0", b"e1", b"e2"]
    # One locate answered the events and the length; the look at the tail that ends the catch-up is one
    # tail check, not a locate at the tail and then a check.
    assert len(sent["read"]) == 1 and len(sent["tails"]) == 1, sent


def test_a_group_reader_woken_by_news_sends_one_tail_check_after_the_events_not_three_requests(manager, url, unique):
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(1)))
    rillet.ReaderGroupManager(unique, url).create_reader_group("g", rillet.group_config([f"{unique}/s"]))
    factory = rillet.EventStreamClientFactory(unique, url)
    reader = factory.create_reader("r", "g", rillet.BytesSerializer(), backoff=rillet.TailBackoff(first_s=0.5))
    writer = factory.create_event_writer("s", rillet.BytesSerializer())
    writer.write_event(b"first")
    writer.flush()
    first = reader.read_next_event(timeout_ms=10_000)
    assert first is not None and first.event == b"first"
    sent = _sent(reader)
    assert reader.read_next_event(timeout_ms=300) is None  # shorter than first_s: one check is due at once
    # The answer that brought the event showed the length: the reader looks for more with one tail check
    # (before: a locate at the tail and two checks back to back), then waits first_s.
    assert sent["read"] == [] and len(sent["tails"]) == 1, sent
